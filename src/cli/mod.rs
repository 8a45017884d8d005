//! Command-line front end: one file per subcommand; flags named as the seeds name them.
//! The CLI only parses, validates and wires stages together.
pub mod analyze;
pub mod bench;
pub mod compute;
pub mod estimate;
pub mod memory_flags;
pub mod model_flags;
pub mod profile;
pub mod train;
pub mod view;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "vramscope", version, about = "Shows and predicts where accelerator memory goes when a Transformer trains")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a LLaMA-style model (the workshop's tiny_llama_v1.py): loss, times, memory.
    #[command(allow_negative_numbers = true)]
    Train(train::TrainArgs),
    /// Profile memory like CS336's profile_memory.py: snapshot, summary, peak table.
    Profile(profile::ProfileArgs),
    /// Analyse a memory snapshot pickle (ours or PyTorch's): peak, live set, largest allocations.
    Analyze(analyze::AnalyzeArgs),
    /// Write the offline HTML report of a snapshot, or of two side by side on one scale.
    View(view::ViewArgs),
    /// Closed-form memory of a configuration with its derivation, beside a simulated meta run.
    Estimate(estimate::EstimateArgs),
    /// Speed benchmarks, printed as ratios measured side by side in one run.
    Bench(bench::BenchArgs),
}

/// An error the user caused with a flag: printed with the flag's name, exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl From<crate::model::ConfigError> for UsageError {
    fn from(e: crate::model::ConfigError) -> Self {
        UsageError(e.to_string())
    }
}

pub fn usage(flag: &str, msg: impl std::fmt::Display) -> anyhow::Error {
    UsageError(format!("invalid {flag}: {msg}")).into()
}

/// Runs the parsed command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let res = match cli.command {
        Command::Train(a) => train::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Profile(a) => profile::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::View(a) => view::run(a),
        Command::Estimate(a) => estimate::run(a),
    };
    match res {
        Ok(()) => 0,
        Err(e) => {
            let code = if e.downcast_ref::<UsageError>().is_some() { 2 } else { 1 };
            eprintln!("error: {e:#}");
            code
        }
    }
}

/// Size the rayon pool once per process (`--threads`); later calls keep the first size.
pub fn set_threads(n: Option<usize>) -> anyhow::Result<usize> {
    if let Some(0) = n {
        return Err(usage("--threads", "must be at least 1"));
    }
    let n = n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    Ok(rayon::current_num_threads())
}
