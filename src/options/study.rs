//! `study`'s flags: one workshop problem size and how to run it.
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct StudyArgs {
    /// Problem size (launch_performance_study.sh's)
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::study_sizes())]
    pub size: String,
    /// Also write a chrome trace with memory events and count FLOPs (the script's profilers)
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub enable_profilers: bool,
    /// auto (cpu when the run fits a cpu time budget, else meta), cpu, or meta
    #[arg(help_heading = super::heading::RUN, long, default_value = "auto")]
    pub device: String,
    /// Longest estimated cpu run that `auto` accepts, in minutes
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 5.0)]
    pub cpu_budget_minutes: f64,
    /// Override the size's step count
    #[arg(help_heading = super::heading::RUN, long)]
    pub num_steps: Option<usize>,
    /// Where the timestamped folder goes
    #[arg(help_heading = super::heading::OUTPUT, long, default_value = ".")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(help_heading = super::heading::RUN, long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub optim: super::optim::OptimFlags,
}

