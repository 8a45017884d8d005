//! `sweep`'s flags: comma lists given to profile flags (`--batch-size 1,2,4 --context-length
//! 128,256,512 --profile-type forward,training`), whose cartesian grid the session profiles.
//!
//! Every axis is a profile flag: a grid point is turned back into profile arguments and
//! validated by profile's own parser and planner, so an axis added to [`axes`] (one line and
//! one field) works everywhere at once.
use super::profile::{self, ProfileArgs};
use super::{usage, UsageError};
use crate::analyse::sweep::{points, Axis};
use crate::session::sweep::Point;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
pub struct SweepArgs {
    /// Model preset(s) (as `profile --model`), comma separated
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::presets(), long, visible_alias = "model", alias = "model-size")]
    pub preset: Option<String>,
    /// Hugging Face config.json file(s), comma separated
    #[arg(help_heading = super::heading::MODEL, long, value_name = "FILE[,FILE…]")]
    pub config: Option<String>,
    /// Reference implementation(s) to reproduce
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::flavours(), long)]
    pub flavour: Option<String>,
    /// Hidden size d_model (a comma list sweeps it)
    #[arg(help_heading = super::heading::MODEL, long)]
    pub hidden_dim: Option<String>,
    /// Number of decoder blocks (layers)
    #[arg(help_heading = super::heading::MODEL, long)]
    pub num_layers: Option<String>,
    /// Attention heads (must divide --hidden-dim)
    #[arg(help_heading = super::heading::MODEL, long)]
    pub num_heads: Option<String>,
    /// Key/value heads (grouped-query attention when fewer than --num-heads)
    #[arg(help_heading = super::heading::MODEL, long)]
    pub num_kv_heads: Option<String>,
    /// Feed-forward size d_ff
    #[arg(help_heading = super::heading::MODEL, long)]
    pub intermediate_dim: Option<String>,
    /// Vocabulary size (rows of the embedding and the LM head)
    #[arg(help_heading = super::heading::MODEL, long)]
    pub vocab_size: Option<String>,
    /// Longest sequence the model accepts (sizes RoPE tables)
    #[arg(help_heading = super::heading::MODEL, long)]
    pub max_seq_len: Option<String>,
    /// RoPE base frequency theta
    #[arg(help_heading = super::heading::MODEL, long)]
    pub rope_theta: Option<String>,
    /// Attention computation(s)
    #[arg(help_heading = super::heading::MEMORY, value_parser = super::values::attentions(), long)]
    pub attention: Option<String>,
    /// Batch size(s), comma-separated: one profile per value
    #[arg(help_heading = super::heading::RUN, long)]
    pub batch_size: Option<String>,
    /// Sequence length(s) to profile, comma-separated
    #[arg(help_heading = super::heading::RUN, long, alias = "seq-len")]
    pub context_length: Option<String>,
    /// (batch size, context length) points instead of the --batch-size × --context-length grid
    ///
    /// E.g. `4:512,16:128`: context 512 at batch 4 beside context 128 at batch 16; crossed with
    /// the other axes' lists
    #[arg(help_heading = super::heading::RUN, long, value_name = "B:S[,B:S…]", conflicts_with_all = ["batch_size", "context_length"])]
    pub points: Option<String>,
    /// forward, inference, training and/or generate (default: training)
    #[arg(help_heading = super::heading::RUN, long)]
    pub profile_type: Option<String>,
    /// generate()'s max_new_tokens (with --profile-type generate), comma-separated
    #[arg(help_heading = super::heading::RUN, long)]
    pub max_new_tokens: Option<String>,
    /// Micro-batches per optimizer step (gradient accumulation)
    #[arg(help_heading = super::heading::MEMORY, long)]
    pub grad_accum_steps: Option<String>,
    /// Precision(s) (as `profile --precision`)
    #[arg(help_heading = super::heading::PRECISION, value_parser = super::values::precisions(), long)]
    pub precision: Option<String>,
    /// none, blocks and/or every-N
    #[arg(help_heading = super::heading::MEMORY, long, value_parser = super::values::checkpoints())]
    pub checkpoint: Option<String>,
    /// none and/or all
    #[arg(help_heading = super::heading::MEMORY, long, value_parser = super::values::fusions())]
    pub fusion: Option<String>,
    /// Optimizer implementation(s) of the training step (as `profile --optimizer`)
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::optimizers(), long)]
    pub optimizer: Option<String>,
    /// clip_grad_norm_ max norm(s) before the step (as `profile --max-grad-norm`; 0 = off)
    #[arg(help_heading = super::heading::RUN, long)]
    pub max_grad_norm: Option<String>,
    /// hf flavour: from_pretrained's dtype(s) (auto, float32, bfloat16, float16)
    #[arg(help_heading = super::heading::PRECISION, long, value_parser = super::values::torch_dtypes(true))]
    pub dtype: Option<String>,
    /// hf flavour: attn_implementation(s)
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::attn_implementations(), long)]
    pub attn_implementation: Option<String>,
    /// hf flavour: gradient checkpointing mode(s) (none, non-reentrant, reentrant)
    #[arg(help_heading = super::heading::MEMORY, long)]
    pub gradient_checkpointing: Option<String>,
    /// hf flavour, peft LoRA rank(s) (turns LoRA on)
    #[arg(help_heading = super::heading::LORA, long)]
    pub lora_r: Option<String>,
    /// LoRA alpha(s)
    #[arg(help_heading = super::heading::LORA, long)]
    pub lora_alpha: Option<String>,
    /// LoRA dropout(s)
    #[arg(help_heading = super::heading::LORA, long)]
    pub lora_dropout: Option<String>,
    /// LoRA target_modules value(s), separated by ';' (a value is all-linear or a comma list)
    #[arg(help_heading = super::heading::LORA, value_parser = super::values::target_modules(), long)]
    pub target_modules: Option<String>,
    /// Every point's LoRA is DoRA (LoraConfig's use_dora; needs --lora-r)
    #[arg(help_heading = super::heading::LORA, long, requires = "lora_r")]
    pub use_dora: bool,
    /// LoRA modules_to_save value(s), separated by ';' (a value is a comma list of embed_tokens and lm_head)
    #[arg(help_heading = super::heading::LORA, value_parser = super::values::modules_to_save(), long)]
    pub modules_to_save: Option<String>,
    /// Every point loads the model in 4 bits (BitsAndBytesConfig's load_in_4bit)
    #[arg(help_heading = super::heading::LORA, long)]
    pub load_in_4bit: bool,
    /// Every point loads the model in 8 bits (BitsAndBytesConfig's load_in_8bit, LLM.int8())
    #[arg(help_heading = super::heading::LORA, long, conflicts_with = "load_in_4bit")]
    pub load_in_8bit: bool,
    /// llm_int8_threshold value(s)
    #[arg(help_heading = super::heading::LORA, long, requires = "load_in_8bit")]
    pub llm_int8_threshold: Option<String>,
    /// Every point's 4-bit model uses double quantization
    #[arg(help_heading = super::heading::LORA, long, requires = "load_in_4bit")]
    pub bnb_4bit_use_double_quant: bool,
    /// bnb_4bit_quant_type(s) (nf4, fp4)
    #[arg(help_heading = super::heading::LORA, long, requires = "load_in_4bit", value_parser = super::values::bnb_quant_types())]
    pub bnb_4bit_quant_type: Option<String>,
    /// bnb_4bit_compute_dtype(s)
    #[arg(help_heading = super::heading::LORA, long, requires = "load_in_4bit", value_parser = super::values::torch_dtypes(false))]
    pub bnb_4bit_compute_dtype: Option<String>,
    /// Parallel layout(s) (as `profile --parallel`); needs --world-size
    #[arg(help_heading = super::heading::PARALLEL, value_parser = super::values::layouts(), long)]
    pub parallel: Option<String>,
    /// Ranks in the job (with --parallel)
    ///
    /// Each point profiles rank 0, so the table shows how one rank's memory falls as ranks
    /// are added.
    #[arg(help_heading = super::heading::PARALLEL, long)]
    pub world_size: Option<String>,
    /// hsdp's shard group size(s)
    #[arg(help_heading = super::heading::PARALLEL, long)]
    pub gpus_per_node: Option<String>,
    /// FSDP2 MixedPrecisionPolicy param_dtype(s) (as `profile --fsdp-param-dtype`)
    #[arg(help_heading = super::heading::PARALLEL, long)]
    pub fsdp_param_dtype: Option<String>,
    /// FSDP2 MixedPrecisionPolicy reduce_dtype(s)
    #[arg(help_heading = super::heading::PARALLEL, long)]
    pub fsdp_reduce_dtype: Option<String>,
    /// FSDP units (as `profile --fsdp-unit`: block, every-N, root)
    #[arg(help_heading = super::heading::PARALLEL, long)]
    pub fsdp_unit: Option<String>,
    /// Unrecorded steps run first, so optimizer state exists as in a steady-state step
    #[arg(help_heading = super::heading::RUN, long)]
    pub warmup_steps: Option<String>,
    /// Recorded steps after the warm-up
    #[arg(help_heading = super::heading::RUN, long)]
    pub measure_steps: Option<String>,
    /// GPU preset(s) bounding the allocator (an OOM at a point is recorded as a result)
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::gpus(), long)]
    pub gpu: Option<String>,
    /// Device memory size(s) instead of --gpu (e.g. 24GiB)
    #[arg(help_heading = super::heading::RUN, long)]
    pub memory_limit: Option<String>,
    /// Share(s) of device memory the allocator may use; needs --gpu or --memory-limit
    ///
    /// torch.cuda.set_per_process_memory_fraction.
    #[arg(help_heading = super::heading::RUN, long)]
    pub memory_fraction: Option<String>,
    /// PYTORCH_CUDA_ALLOC_CONF string(s); separate several with ';' (a conf itself uses commas)
    #[arg(help_heading = super::heading::RUN, long)]
    pub allocator_conf: Option<String>,
    /// Random seed for the weights and the synthetic data
    #[arg(help_heading = super::heading::RUN, long)]
    pub seed: Option<String>,
    /// meta (shapes only, default) or cpu (real numerics)
    #[arg(help_heading = super::heading::RUN, long, default_value = "meta")]
    pub device: String,
    /// Also write each point's snapshot and HTML report (under <out-dir>/points/)
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub snapshots: bool,
    /// Folder the outputs are written to (created if missing)
    #[arg(help_heading = super::heading::OUTPUT, long, default_value = "vramscope-out/sweep")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(help_heading = super::heading::RUN, long)]
    pub threads: Option<usize>,
}

/// The sweepable flags: (profile flag, value list as given, separator). Adding an axis
/// (`--precision`, `--checkpoint`) is one field above and one line here.
fn axes(a: &SweepArgs) -> Vec<(&'static str, Option<&String>, char)> {
    vec![
        ("--model", a.preset.as_ref(), ','),
        ("--config", a.config.as_ref(), ','),
        ("--flavour", a.flavour.as_ref(), ','),
        ("--hidden-dim", a.hidden_dim.as_ref(), ','),
        ("--num-layers", a.num_layers.as_ref(), ','),
        ("--num-heads", a.num_heads.as_ref(), ','),
        ("--num-kv-heads", a.num_kv_heads.as_ref(), ','),
        ("--intermediate-dim", a.intermediate_dim.as_ref(), ','),
        ("--vocab-size", a.vocab_size.as_ref(), ','),
        ("--max-seq-len", a.max_seq_len.as_ref(), ','),
        ("--rope-theta", a.rope_theta.as_ref(), ','),
        ("--attention", a.attention.as_ref(), ','),
        ("--batch-size", a.batch_size.as_ref(), ','),
        ("--context-length", a.context_length.as_ref(), ','),
        ("--profile-type", a.profile_type.as_ref(), ','),
        ("--max-new-tokens", a.max_new_tokens.as_ref(), ','),
        ("--grad-accum-steps", a.grad_accum_steps.as_ref(), ','),
        ("--precision", a.precision.as_ref(), ','),
        ("--checkpoint", a.checkpoint.as_ref(), ','),
        ("--fusion", a.fusion.as_ref(), ','),
        ("--optimizer", a.optimizer.as_ref(), ','),
        ("--max-grad-norm", a.max_grad_norm.as_ref(), ','),
        ("--dtype", a.dtype.as_ref(), ','),
        ("--attn-implementation", a.attn_implementation.as_ref(), ','),
        ("--gradient-checkpointing", a.gradient_checkpointing.as_ref(), ','),
        ("--lora-r", a.lora_r.as_ref(), ','),
        ("--lora-alpha", a.lora_alpha.as_ref(), ','),
        ("--lora-dropout", a.lora_dropout.as_ref(), ','),
        ("--target-modules", a.target_modules.as_ref(), ';'),
        ("--modules-to-save", a.modules_to_save.as_ref(), ';'),
        ("--bnb-4bit-quant-type", a.bnb_4bit_quant_type.as_ref(), ','),
        ("--bnb-4bit-compute-dtype", a.bnb_4bit_compute_dtype.as_ref(), ','),
        ("--llm-int8-threshold", a.llm_int8_threshold.as_ref(), ','),
        ("--parallel", a.parallel.as_ref(), ','),
        ("--world-size", a.world_size.as_ref(), ','),
        ("--gpus-per-node", a.gpus_per_node.as_ref(), ','),
        ("--fsdp-param-dtype", a.fsdp_param_dtype.as_ref(), ','),
        ("--fsdp-reduce-dtype", a.fsdp_reduce_dtype.as_ref(), ','),
        ("--fsdp-unit", a.fsdp_unit.as_ref(), ','),
        ("--warmup-steps", a.warmup_steps.as_ref(), ','),
        ("--measure-steps", a.measure_steps.as_ref(), ','),
        ("--gpu", a.gpu.as_ref(), ','),
        ("--memory-limit", a.memory_limit.as_ref(), ','),
        ("--memory-fraction", a.memory_fraction.as_ref(), ','),
        ("--allocator-conf", a.allocator_conf.as_ref(), ';'),
        ("--seed", a.seed.as_ref(), ','),
    ]
}

/// `--points B:S,B:S,…`: the (batch size, context length) pairs in the order given; an error
/// names the flag and the token to blame.
pub fn parse_points(s: &str) -> Result<Vec<(usize, usize)>> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for tok in s.split(',') {
        let t = tok.trim();
        if t.is_empty() {
            return Err(usage("--points", format!("'{s}' has an empty point (expected BATCH:CONTEXT pairs separated by ',', e.g. 4:512,16:128)")));
        }
        let Some((b, c)) = t.split_once(':') else {
            return Err(usage("--points", format!("'{t}' is not BATCH:CONTEXT (e.g. 4:512)")));
        };
        let num = |v: &str, what: &str| -> Result<usize> {
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(usage("--points", format!("'{t}': the {what} '{}' is not a positive integer", v.trim()))),
            }
        };
        let p = (num(b, "batch size")?, num(c, "context length")?);
        if out.contains(&p) {
            return Err(usage("--points", format!("'{t}' appears twice in '{s}'")));
        }
        out.push(p);
    }
    Ok(out)
}

/// With `--points`, the batch-size and context-length lists its pairs use (each value once,
/// ascending), and the pairs; the grid of those two lists is filtered to the pairs.
fn point_lists(a: &SweepArgs) -> Result<Option<(String, String, Vec<(usize, usize)>)>> {
    let Some(s) = &a.points else { return Ok(None) };
    let pairs = parse_points(s)?;
    let list = |f: fn(&(usize, usize)) -> usize| {
        let mut v: Vec<usize> = pairs.iter().map(f).collect();
        v.sort_unstable();
        v.dedup();
        v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
    };
    Ok(Some((list(|p| p.0), list(|p| p.1), pairs)))
}

/// Is the grid point `idx` one of `--points`' pairs (always true without `--points`)?
fn listed(axes: &[Axis], idx: &[usize], pairs: Option<&[(usize, usize)]>) -> bool {
    let Some(pairs) = pairs else { return true };
    let value = |flag: &str| axes.iter().zip(idx).find(|(ax, _)| ax.flag == flag).and_then(|(ax, &i)| ax.values[i].parse::<usize>().ok());
    match (value("--batch-size"), value("--context-length")) {
        (Some(b), Some(c)) => pairs.contains(&(b, c)),
        _ => true,
    }
}

/// The parsed grid: axes in flag order; points in row-major order (last axis fastest).
fn grid(a: &SweepArgs) -> Result<Vec<Axis>> {
    // --points fills the batch-size and context-length axes with the values its pairs use.
    let mut a = a.clone();
    if let Some((b, c, _)) = point_lists(&a)? {
        a.batch_size = Some(b);
        a.context_length = Some(c);
    }
    let a = &a;
    let mut out = Vec::new();
    for (flag, given, sep) in axes(a) {
        let Some(s) = given else { continue };
        let values: Vec<String> = s.split(sep).map(|v| v.trim().to_string()).collect();
        if values.iter().any(|v| v.is_empty()) {
            return Err(usage(flag, format!("'{s}' has an empty value (expected values separated by '{sep}')")));
        }
        let mut seen = Vec::new();
        for v in &values {
            if seen.contains(v) {
                return Err(usage(flag, format!("'{v}' appears twice in '{s}'")));
            }
            seen.push(v.clone());
        }
        let numeric = values.iter().all(|v| v.parse::<f64>().is_ok());
        out.push(Axis { flag, values, numeric });
    }
    Ok(out)
}

fn label(axes: &[Axis], idx: &[usize]) -> String {
    axes.iter().zip(idx).map(|(ax, &i)| format!("{} {}", ax.flag, ax.values[i])).collect::<Vec<_>>().join(" ")
}

/// A grid point as profile arguments, parsed and validated by profile's own code.
fn point_args(axes: &[Axis], idx: &[usize], a: &SweepArgs, out_dir: &std::path::Path) -> Result<ProfileArgs> {
    let mut words: Vec<String> = vec!["--device".into(), a.device.clone(), "--out-dir".into(), out_dir.display().to_string()];
    // Switches every point shares (not axes).
    for (on, flag) in [(a.use_dora, "--use-dora"), (a.load_in_4bit, "--load-in-4bit"), (a.load_in_8bit, "--load-in-8bit"), (a.bnb_4bit_use_double_quant, "--bnb-4bit-use-double-quant")] {
        if on {
            words.push(flag.into());
        }
    }
    for (ax, &i) in axes.iter().zip(idx) {
        words.push(format!("{}={}", ax.flag, ax.values[i]));
    }
    ProfileArgs::parse_words(&words).map_err(|first| UsageError(format!("{first} (grid point: {})", label(axes, idx))).into())
}


/// The grid's axes and its points, each planned (validated) before anything runs; a point
/// too large for host memory moves to meta with a note. With `snapshots`, each point keeps
/// its trace (the caller writes its files under `<out-dir>/points/<point_dir>`).
pub fn plan(a: &SweepArgs) -> Result<(Vec<Axis>, Vec<Point>)> {
    // generate's length is a flag of generate points only: a grid mixing generate with
    // another profile type would give --max-new-tokens to a point that refuses it.
    let generate = a.profile_type.as_deref().map(|t| t.split(',').map(str::trim).collect::<Vec<_>>());
    if let Some(kinds) = generate.filter(|k| k.contains(&"generate") && k.len() > 1) {
        return Err(usage("--profile-type", format!("{}: sweep generate on its own (its --max-new-tokens applies to generate points only)", kinds.join(","))));
    }
    let axes = grid(a)?;
    let pairs = point_lists(a)?.map(|(_, _, p)| p);
    let mut planned = Vec::new();
    for idx in points(&axes).into_iter().filter(|idx| listed(&axes, idx, pairs.as_deref())) {
        let dir = if a.snapshots { a.out_dir.join("points").join(point_dir(&axes, &idx)) } else { a.out_dir.clone() };
        let args = point_args(&axes, &idx, a, &dir)?;
        let mut options = profile::options(&args).map_err(|e| match e.downcast_ref::<UsageError>() {
            Some(u) => UsageError(format!("{} (grid point: {})", u.0, label(&axes, &idx))).into(),
            None => e,
        })?;
        options.keep_trace = a.snapshots;
        let kind = args.profile_type[0];
        let host_note = options.host_fallback(&args.profile_type)?;
        if host_note.is_some() {
            options.device = crate::engine::Device::Meta;
        }
        planned.push(Point { label: label(&axes, &idx), dir, idx, options, kind, host_note });
    }
    Ok((axes, planned))
}

/// A point's folder name under `points/` (`batch-size-2_context-length-128`).
fn point_dir(axes: &[Axis], idx: &[usize]) -> String {
    let s: Vec<String> = axes.iter().zip(idx).map(|(ax, &i)| format!("{}-{}", ax.name(), ax.values[i])).collect();
    s.join("_").chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}
