//! Training: synthetic data, optimizers with the reference allocation patterns, and the
//! step runner with its phases.
pub mod data;
pub mod optim;
pub mod step;

pub use data::{Batcher, DataKind};
pub use optim::{Optimizer, OptimizerKind};
pub use step::{StepResult, StepRunner};
