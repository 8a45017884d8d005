//! The tensor engine: dtypes, devices, storages, views, ops and autograd.
pub mod autocast;
pub mod autograd;
pub mod calibrate;
pub mod checkpoint;
pub mod cost;
pub mod cpu;
pub mod dtype;
pub mod host;
pub mod layout;
pub mod ops;
pub mod runtime;
pub mod sgemm;
pub mod storage;
pub mod tensor;

pub use dtype::DType;
pub use storage::Device;
pub use tensor::Tensor;
