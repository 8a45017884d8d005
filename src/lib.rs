//! vramscope: where accelerator memory goes when a Transformer trains, predicted by running
//! the model op by op with PyTorch's allocation and autograd semantics.
pub mod analyse;
pub mod cli;
pub mod engine;
pub mod export;
pub mod model;
pub mod parallel;
/// The pickle codec of PyTorch's snapshots: read by `analyse`, written by `export`.
pub mod pickle;
#[cfg(feature = "python")]
mod python;
pub mod record;
pub mod session;
pub mod train;
