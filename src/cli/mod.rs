//! Command-line front end: one file per subcommand. Each parses its flags (defined, with their
//! checks, in `options/`), calls the job in `session/`, prints its text and writes its files
//! as one output set; no subcommand file imports another's.
pub mod analyze;
pub mod compare;
pub mod estimate;
pub mod fit;
pub mod json_out;
pub mod outputs;
pub mod profile;
pub mod reference;
pub mod run_all;
pub mod serve;
pub mod study;
pub mod sweep;
pub mod train;
pub mod view;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "vramscope", version, about = "Shows and predicts where accelerator memory goes when a Transformer trains", after_help = crate::error::EXIT_CODES_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a LLaMA-style model (the workshop's tiny_llama_v1.py): loss, times, memory.
    #[command(allow_negative_numbers = true)]
    Train(crate::options::train::TrainArgs),
    /// Profile memory like CS336's profile_memory.py: snapshot, summary, peak table.
    Profile(crate::options::profile::ProfileArgs),
    /// Profile runs over the grid of comma lists given to profile flags: CSV, JSON, Markdown,
    /// SVG plots and scaling fits (memory vs batch size and sequence length).
    Sweep(crate::options::sweep::SweepArgs),
    /// The largest batch size or longest context that fits a GPU (search over meta runs).
    Fit(crate::options::fit::FitArgs),
    /// CS336's run_all.sh (the memory-profiling assignment): the 2.7B model at context 128/256/512, forward and training,
    /// fp32 and bf16, with the snapshots and the text answers of parts (b) to (e).
    RunAll(crate::options::run_all::RunAllArgs),
    /// The workshop's launch_performance_study.sh: one Tiny LLaMA problem size into a timestamped
    /// performance_results_<size>_<time>/ folder (cpu when it fits a time budget, else meta).
    Study(crate::options::study::StudyArgs),
    /// Analyse a memory snapshot pickle (ours or PyTorch's): peak, live set, largest allocations.
    Analyze(crate::options::snapshot::AnalyzeArgs),
    /// Write the offline HTML report of a snapshot, or of two side by side on one scale.
    View(crate::options::snapshot::ViewArgs),
    /// Closed-form memory of a configuration with its derivation, beside a simulated meta run.
    Estimate(crate::options::estimate::EstimateArgs),
    /// vLLM 0.33.0's start-up memory plan: available KV cache memory, cache size in tokens and
    /// maximum concurrency, in vLLM's log words.
    #[command(allow_negative_numbers = true)]
    Serve(crate::options::serve::ServeArgs),
    /// Speed benchmarks, printed as ratios measured side by side in one run.
    Bench(crate::options::bench::BenchArgs),
}

pub use crate::error::{DoesNotFit, ExitCode};
pub use crate::options::{parse_device, usage, UsageError};
pub use crate::session::{quiet_oom_panics, set_threads};

/// Runs the parsed command; returns the process exit code ([`ExitCode`]).
pub fn run(cli: Cli) -> i32 {
    let r = dispatch(cli);
    let code = ExitCode::of(&r);
    if let Err(e) = r {
        match code {
            ExitCode::DoesNotFit => eprintln!("does not fit: {e:#}"),
            _ => eprintln!("error: {e:#}"),
        }
    }
    code.code()
}

/// Runs the parsed command, its error returned (a [`UsageError`] when a flag is to blame, a
/// [`DoesNotFit`] when the answer is that nothing fits, its outputs written).
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(a) => train::run(a),
        Command::Bench(a) => crate::bench::run(&a, &mut std::io::stdout()),
        // `--compare` is its own job (compare.rs).
        Command::Profile(a) if a.compare => compare::run(&a),
        Command::Profile(a) => profile::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Fit(a) => fit::run(a),
        Command::RunAll(a) => run_all::run(a),
        Command::Study(a) => study::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::View(a) => view::run(a),
        Command::Estimate(a) => estimate::run(a),
        Command::Serve(a) => serve::run(a),
    }
}

#[cfg(test)]
mod tests {
    /// Every flag and argument of every subcommand says what it does in `--help`.
    #[test]
    fn every_flag_has_a_help_line() {
        use clap::CommandFactory;
        let cmd = super::Cli::command();
        let mut missing = Vec::new();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{} {}", sub.get_name(), arg.get_long().map_or(id.to_string(), |l| format!("--{l}"))));
                }
            }
        }
        assert!(missing.is_empty(), "flags without a help line: {missing:?}");
    }
}
