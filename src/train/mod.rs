//! Training: synthetic data, optimizers with the reference allocation patterns, and the
//! step runner with its phases.
pub mod data;
pub mod optim;
pub mod precision;
pub mod scaler;
pub mod step;

pub use data::{Batcher, CausalLmBatch, DataKind};
pub use optim::{Optimizer, OptimizerKind};
pub use precision::Precision;
pub use scaler::GradScaler;
pub use step::{StepResult, StepRunner};
