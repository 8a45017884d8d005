//! `study`'s flags: one workshop problem size and how to run it.
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct StudyArgs {
    /// Problem size: tiny, small, medium, large or very_large
    pub size: String,
    /// Also write a chrome trace with memory events and count FLOPs (the script's profilers)
    #[arg(long)]
    pub enable_profilers: bool,
    /// auto (cpu when the run fits a cpu time budget, else meta), cpu, or meta
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Longest estimated cpu run that `auto` accepts, in minutes
    #[arg(long, default_value_t = 5.0)]
    pub cpu_budget_minutes: f64,
    /// Override the size's step count
    #[arg(long)]
    pub num_steps: Option<usize>,
    /// Where the timestamped folder goes
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub optim: super::optim::OptimFlags,
}

