#![recursion_limit = "256"]
//! vramscope: where accelerator memory goes when a Transformer trains, predicted by running
//! the model op by op with PyTorch's allocation and autograd semantics.
/// `println!` into a String, for the text renderers (writing to a String cannot fail).
macro_rules! out {
    ($s:expr) => {
        $s.push('\n')
    };
    ($s:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($s, $($t)*);
    }};
}

pub mod analyse;
pub mod bench;
pub mod cli;
pub mod clock;
pub mod engine;
pub mod error;
pub mod export;
pub mod model;
pub mod options;
pub mod parallel;
/// The pickle codec of PyTorch's snapshots: read by `analyse`, written by `export`.
pub mod pickle;
#[cfg(feature = "python")]
mod python;
pub mod record;
pub mod session;
pub mod train;
/// The jobs the static page runs (web/), from the command line's words; exported to
/// JavaScript with the `wasm` feature.
pub mod web;
