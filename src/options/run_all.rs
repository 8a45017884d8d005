//! `run-all`'s flags: seed 001's `run_all.sh` (the 2.7B model at context 128/256/512,
//! forward and training, fp32 and bf16), resolved into the session's list of runs.
use super::profile::{self, ProfileArgs};
use super::{usage, UsageError};
use crate::session::run_all::{Job, Plan};
use crate::session::ProfileType;
use crate::train::Precision;
use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct RunAllArgs {
    /// Model preset (as `profile --model`: a bare small/medium/large is CS336's)
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::presets(), long, visible_alias = "model-size", default_value = "2.7B")]
    pub model: String,
    /// Reference implementation (picks the family of a bare preset name)
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::flavours(), long)]
    pub flavour: Option<String>,
    /// Batch size B of every run
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 4)]
    pub batch_size: usize,
    /// Context lengths of parts (a) and (b); part (c) uses the longest
    #[arg(help_heading = super::heading::RUN, long, default_value = "128,256,512")]
    pub context_length: String,
    /// The mixed-precision type of part (c): bf16 or fp16
    #[arg(help_heading = super::heading::PRECISION, long, default_value = "bf16")]
    pub dtype: String,
    /// meta (shapes only; default, any model size) or cpu (real numerics)
    #[arg(help_heading = super::heading::RUN, long, default_value = "meta")]
    pub device: String,
    /// GPU whose memory bounds the allocator (an OOM is reported in the tables)
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::gpus(), long)]
    pub gpu: Option<String>,
    /// Unrecorded steps run first, so optimizer state exists as in a steady-state step
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 1)]
    pub warmup_steps: usize,
    /// Recorded steps after the warm-up
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 1)]
    pub measure_steps: usize,
    /// Folder the outputs are written to (created if missing)
    #[arg(help_heading = super::heading::OUTPUT, long, default_value = "results/memory_profiling")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(help_heading = super::heading::RUN, long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub optim: super::optim::OptimFlags,
    /// Budgets for reading back the snapshots this command writes (parts (a) and (e))
    #[command(flatten)]
    pub budget: super::budget::BudgetArgs,
}

/// Profile arguments for one run, parsed and validated by `profile`'s own code.
fn args_for(a: &RunAllArgs, ctx: usize, kind: ProfileType, precision: Precision, output: &Path) -> Result<ProfileArgs> {
    let mut argv: Vec<String> = Vec::new();
    let mut push = |f: &str, v: String| {
        argv.push(f.into());
        argv.push(v);
    };
    push("--model", a.model.clone());
    if let Some(f) = &a.flavour {
        push("--flavour", f.clone());
    }
    push("--batch-size", a.batch_size.to_string());
    push("--context-length", ctx.to_string());
    push("--profile-type", kind.name().into());
    push("--device", a.device.clone());
    push("--warmup-steps", a.warmup_steps.to_string());
    push("--measure-steps", a.measure_steps.to_string());
    push("--precision", precision.name().into());
    push("--output", output.display().to_string());
    push("--out-dir", a.out_dir.display().to_string());
    if let Some(g) = &a.gpu {
        push("--gpu", g.clone());
    }
    // The optimizer flags concern the training runs only (profile refuses them elsewhere).
    if kind == ProfileType::Training {
        argv.extend(a.optim.words());
    }
    ProfileArgs::parse_words(&argv).map_err(|e| UsageError(e).into())
}

/// Every run of the script, each validated by profile's own planner before the first starts;
/// the note when they all move to meta (fp32 training at the longest context, the largest
/// run, cannot fit in host memory).
pub fn plan(a: &RunAllArgs) -> Result<(Plan, Option<String>)> {
    let contexts = super::parse_list("--context-length", &a.context_length)?;
    let low = match Precision::parse(&a.dtype) {
        Some(p @ (Precision::Bf16 | Precision::Fp16)) => p,
        _ => return Err(usage("--dtype", format!("'{}' (expected bf16 or fp16)", a.dtype))),
    };
    let longest = *contexts.iter().max().unwrap();
    let name = |ctx: usize, kind: ProfileType, suffix: &str| a.out_dir.join(format!("{}_ctx{ctx}_{}{suffix}_snapshot.pickle", a.model, kind.name()));
    let mut jobs = Vec::new();
    let mut add = |ctx: usize, kind: ProfileType, precision: Precision, part_c: bool, snapshot: PathBuf| -> Result<()> {
        let options = profile::options(&args_for(a, ctx, kind, precision, &snapshot)?)?;
        jobs.push(Job { ctx, kind, precision, part_c, snapshot, options });
        Ok(())
    };
    for &ctx in &contexts {
        for kind in [ProfileType::Forward, ProfileType::Training] {
            add(ctx, kind, Precision::Fp32, false, name(ctx, kind, ""))?;
        }
    }
    for kind in [ProfileType::Forward, ProfileType::Training] {
        for prec in [Precision::Fp32, low] {
            add(longest, kind, prec, true, name(longest, kind, &format!("_{}", prec.name())))?;
        }
    }
    let mut note = None;
    if jobs[0].options.device == crate::engine::Device::Cpu {
        note = crate::session::host_memory::meta_instead(&jobs[0].options.model, Precision::Fp32, a.batch_size, &contexts, true)?;
        if note.is_some() {
            jobs.iter_mut().for_each(|j| j.options.device = crate::engine::Device::Meta);
        }
    }
    Ok((Plan { model: a.model.clone(), batch: a.batch_size, contexts, low, warmup_steps: a.warmup_steps, measure_steps: a.measure_steps, jobs }, note))
}
