//! The Python functions each model flavour mirrors, as frames for snapshots.
//!
//! A model function pushes its [`PyFn`](crate::record::PyFn) while it runs
//! (`runtime::py_frame`), so an allocation's snapshot frames name the reference
//! implementation's code the way PyTorch's own snapshot would: file, line, function.
pub mod cs336;
pub mod hf_frames;
pub mod lib_frames;
pub mod tinyllama;
pub mod moe_frames;
