//! vramscope: where accelerator memory goes when a Transformer trains, predicted by running
//! the model op by op with PyTorch's allocation and autograd semantics.
pub mod engine;
pub mod model;
pub mod record;
