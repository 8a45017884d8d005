//! Command-line front end: one file per subcommand; flags named as the seeds name them.
//! The CLI only parses, validates and wires stages together.
pub mod analyze;
pub mod bench;
pub mod budget_flags;
pub mod compare;
pub mod compute;
pub mod estimate;
pub mod fit;
pub mod fit_world;
pub mod hf_flags;
pub mod host_memory;
pub mod json_out;
pub mod outputs;
pub mod memory_flags;
pub mod model_flags;
pub mod optim_flags;
pub mod parallel_flags;
pub mod precision_flags;
pub mod profile;
pub mod run_all;
pub mod study;
pub mod sweep;
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
    /// Profile runs over the grid of comma lists given to profile flags: CSV, JSON, Markdown,
    /// SVG plots and scaling fits (memory vs batch size and sequence length).
    Sweep(sweep::SweepArgs),
    /// The largest batch size or longest context that fits a GPU (search over meta runs).
    Fit(fit::FitArgs),
    /// CS336's run_all.sh (the memory-profiling assignment): the 2.7B model at context 128/256/512, forward and training,
    /// fp32 and bf16, with the snapshots and the text answers of parts (b) to (e).
    RunAll(run_all::RunAllArgs),
    /// The workshop's launch_performance_study.sh: one Tiny LLaMA problem size into a timestamped
    /// performance_results_<size>_<time>/ folder (cpu when it fits a time budget, else meta).
    Study(study::StudyArgs),
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

/// `--device`: cpu or meta. A GPU device gets why there is none and what to use instead.
pub fn parse_device(s: &str) -> anyhow::Result<crate::engine::Device> {
    if let Some(d) = crate::engine::Device::parse(s) {
        return Ok(d);
    }
    let kind = s.split(':').next().unwrap_or_default().to_ascii_lowercase();
    if matches!(kind.as_str(), "cuda" | "gpu" | "rocm" | "hip") {
        return Err(usage(
            "--device",
            format!(
                "'{s}': there is no CUDA backend yet (vramscope runs on cpu with real numerics, or on meta with shapes only); \
                 for a prediction use --device meta with --gpu NAME (e.g. --device meta --gpu H100-80GB)"
            ),
        ));
    }
    Err(usage("--device", format!("'{s}' (expected cpu or meta)")))
}

/// Runs the parsed command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match dispatch(cli) {
        Ok(()) => 0,
        Err(e) => {
            let code = if e.downcast_ref::<UsageError>().is_some() { 2 } else { 1 };
            eprintln!("error: {e:#}");
            code
        }
    }
}

/// Runs the parsed command, its error returned (a [`UsageError`] when a flag is to blame).
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(a) => train::run(a),
        Command::Bench(a) => bench::run(a),
        // `--compare` and `--find world-size` are their own jobs (compare.rs, fit_world.rs).
        Command::Profile(a) if a.compare => compare::run(&a),
        Command::Profile(a) => profile::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Fit(a) if a.find == fit::Find::WorldSize => fit_world::run(&a),
        Command::Fit(a) => fit::run(a),
        Command::RunAll(a) => run_all::run(a),
        Command::Study(a) => study::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::View(a) => view::run(a),
        Command::Estimate(a) => estimate::run(a),
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

/// The allocator model's out-of-memory unwinds as a panic carrying `OomPanic`, caught by the
/// run that reports it; keep the default hook from printing it (other panics print as usual).
pub fn quiet_oom_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<crate::engine::runtime::OomPanic>().is_none() {
                prev(info)
            }
        }));
    });
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
