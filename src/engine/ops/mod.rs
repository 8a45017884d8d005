//! The primitive ops. Each one allocates its output through the runtime and, when autograd
//! is recording, attaches a node that saves exactly what PyTorch's derivative saves.
pub mod attention;
pub mod beam;
pub mod dropout;
pub mod elementwise;
pub mod int;
pub mod linalg;
pub mod moe;
pub mod moe_bias;
pub mod deepseek;
pub mod int8;
pub mod quant;
pub mod nn;
mod operand_copies;
pub mod reduce;
pub mod sampling;
