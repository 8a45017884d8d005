//! `bench`'s flags: which speed benchmark, threads and steps, and the PyTorch side.
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    Matmul,
    /// Elementwise/reduction kernels on 1 Mi-element f32 tensors, and naive vs flash attention
    Ops,
    /// Cost of recording (events + caching-allocator model) on a cpu training step
    Record,
    /// `analyze` of a PyTorch-format snapshot of --events trace entries: wall time and peak RSS against the targets (10 s, 2 GB)
    Analyze,
    /// Peak RSS of `profile --device meta --model 2.7B` at 100 and 400 measured steps (target: 400 under 2 GB)
    ProfileSteps,
    Train,
    All,
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// What to measure
    #[arg(help_heading = super::heading::RUN, value_enum, default_value = "all")]
    pub which: Which,
    /// Worker threads for both sides
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 2)]
    pub threads: usize,
    /// Training steps per side (the first 3 are warm-up)
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 13)]
    pub steps: usize,
    /// Trace entries of the snapshot `bench analyze` writes and reads
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    pub events: u64,
    /// Where `bench analyze` writes its snapshot, kept afterwards (default: a temp file, removed)
    #[arg(help_heading = super::heading::RUN, long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Skip PyTorch even if it is installed
    #[arg(help_heading = super::heading::RUN, long)]
    pub no_torch: bool,
    /// The PyTorch reference script (default: found in shared/bench/ above the current directory)
    #[arg(help_heading = super::heading::RUN, long)]
    pub torch_script: Option<PathBuf>,
    /// Python interpreter that runs the PyTorch side
    #[arg(help_heading = super::heading::RUN, long, default_value = "python3")]
    pub python: String,
}

