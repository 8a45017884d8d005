//! What a user asks for: each job's flags (the command line's; the Python package passes its
//! keyword arguments as the same words), their defaults and their checks, resolved into the
//! plain options the jobs in `session/` take. Both front ends parse with these clap
//! definitions, so a flag, its help line and its error message have one owner.
//!
//! A [`UsageError`] names the flag to blame: exit code 2 on the command line, ValueError in
//! Python.
pub mod bench;
pub mod budget;
pub mod compare;
pub mod estimate;
pub mod estimate_generate;
pub mod families;
pub mod fit;
pub mod generate;
pub mod hf;
pub mod keywords;
pub mod lora_targets;
pub mod memory;
pub mod model;
pub mod moe;
pub mod optim;
pub mod parallel;
pub mod parallel_models;
pub mod precision;
pub mod profile;
pub mod run_all;
pub mod serve;
pub mod snapshot;
pub mod study;
pub mod sweep;
pub mod train;
pub mod values;

/// The headings options are grouped under in `--help` and in docs/reference/: every flag of
/// every subcommand names one (tests/cli_reference.rs checks it).
pub mod heading {
    pub const MODEL: &str = "Model";
    pub const LORA: &str = "LoRA / QLoRA";
    pub const RUN: &str = "Run";
    pub const PRECISION: &str = "Precision";
    pub const MEMORY: &str = "Memory options";
    pub const PARALLEL: &str = "Parallel";
    pub const OUTPUT: &str = "Output";
    /// The snapshot files `analyze` and `view` read.
    pub const INPUT: &str = "Input";
    /// `--max-*` budgets of the commands that read snapshots.
    pub const BUDGETS: &str = "Snapshot budgets (a hostile or huge snapshot stops with an error naming the flag to raise)";
}

pub use crate::error::{usage, UsageError};

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

/// A comma list of positive whole numbers (`--context-length 128,256`).
pub fn parse_list(flag: &'static str, s: &str) -> anyhow::Result<Vec<usize>> {
    let v: Result<Vec<usize>, _> = s.split(',').map(|x| x.trim().parse::<usize>()).collect();
    match v {
        Ok(v) if !v.is_empty() && v.iter().all(|&x| x > 0) => Ok(v),
        _ => Err(usage(flag, format!("'{s}' (expected positive whole numbers separated by commas)"))),
    }
}

/// Parse a job's flags given as words (without the subcommand's name), as the Python package
/// and the jobs that run profiles do: the error is clap's first line, without `error: `.
pub fn parse_words<T: clap::Args>(command: &'static str, words: &[String]) -> Result<T, String> {
    let first = |e: clap::Error| e.to_string().lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
    parse_words_with(command, words, first)
}

/// [`parse_words`] with the whole of clap's message on one line (the possible values, the
/// arguments a flag requires, clap's tip), less its usage line and `--help` hint: what the
/// Python package shows.
pub fn parse_words_detailed<T: clap::Args>(command: &'static str, words: &[String]) -> Result<T, String> {
    let all = |e: clap::Error| {
        let text = e.to_string();
        let kept: Vec<&str> = text
            .lines()
            .map(str::trim)
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
            .filter(|l| !l.is_empty())
            .collect();
        kept.join(" ").trim_start_matches("error: ").to_string()
    };
    parse_words_with(command, words, all)
}

fn parse_words_with<T: clap::Args>(command: &'static str, words: &[String], msg: impl Fn(clap::Error) -> String) -> Result<T, String> {
    use clap::{FromArgMatches, Parser};
    #[derive(Parser)]
    struct W<T: clap::Args> {
        #[command(flatten)]
        a: T,
    }
    let cmd = <W<T> as clap::CommandFactory>::command().name(command);
    let m = cmd.try_get_matches_from(std::iter::once(command).chain(words.iter().map(String::as_str))).map_err(&msg)?;
    W::<T>::from_arg_matches(&m).map(|w| w.a).map_err(msg)
}
