//! `--parallel` and its options: one rank of a data-parallel job, tensor parallelism (`--tp`)
//! and sequence parallelism (profile and what runs profiles: sweep, fit, compare).
use super::usage;
use crate::engine::DType;
use crate::parallel::{Layout, ParallelConfig};
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct ParallelFlags {
    /// Simulate one rank of a parallel job with this layout (needs --world-size)
    #[arg(help_heading = super::heading::PARALLEL, value_parser = super::values::layouts(), long, value_name = "LAYOUT")]
    pub parallel: Option<String>,
    /// Ranks in the job (with --parallel)
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "N")]
    pub world_size: Option<usize>,
    /// Profile only this rank (default: rank 0 and every rank whose shard sizes differ)
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "R")]
    pub rank: Option<usize>,
    /// hsdp: ranks per node, the shard group (default 8)
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "N")]
    pub gpus_per_node: Option<usize>,
    /// fsdp/hsdp: keep each block's unsharded parameters from forward to backward
    ///
    /// fully_shard(reshard_after_forward=False), ZeRO-2-like.
    #[arg(help_heading = super::heading::PARALLEL, long)]
    pub no_reshard_after_forward: bool,
    /// fsdp/hsdp: MixedPrecisionPolicy(param_dtype=...): bf16, fp16 or fp32
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "DTYPE", value_parser = super::values::fsdp_dtypes())]
    pub fsdp_param_dtype: Option<String>,
    /// fsdp/hsdp: MixedPrecisionPolicy(reduce_dtype=...): bf16, fp16 or fp32
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "DTYPE", value_parser = super::values::fsdp_dtypes())]
    pub fsdp_reduce_dtype: Option<String>,
    /// zero2/fsdp/hsdp units: block (the default), every-N or root
    ///
    /// block: fully_shard on each decoder block, then the root; every-N: on each group of N
    /// consecutive blocks; root: fully_shard(model) alone, every parameter gathered at once.
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "UNIT")]
    pub fsdp_unit: Option<String>,
    /// params: FSDP2's CPUOffloadPolicy
    ///
    /// Sharded parameters, gradients and the optimizer step on the host; host memory is
    /// reported separately.
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "WHAT", value_parser = super::values::offloads())]
    pub offload: Option<String>,
    /// Tensor-parallel ranks (hf flavour)
    ///
    /// torch's Megatron-style plan (q/k/v/gate/up ColwiseParallel, o/down RowwiseParallel, vocabulary-parallel embedding, head gathered)
    /// on Llama-style models, transformers' own on phi3, olmo2, gemma2, gemma3_text and the MoE
    /// models but gpt-oss (their experts under moe_tp_experts; --tp-plan).
    /// With --parallel fsdp or zero2: a (world-size / N, N) mesh, FSDP2 over the first
    /// dimension (2-D); --parallel tp: N = --world-size
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "N")]
    pub tp: Option<usize>,
    /// With --parallel tp: torch's SequenceParallel plan too
    ///
    /// Norms and the residual stream on S / N positions, hidden states all-gathered before
    /// attention, the MLP and the head; the batch passes position_ids.
    #[arg(help_heading = super::heading::PARALLEL, long)]
    pub sequence_parallel: bool,
    /// With --tp: whose plan shards the model, auto or torch
    ///
    /// auto: transformers' own (from_pretrained(tp_plan="auto"): the config's
    /// base_model_tp_plan, the embedding vocabulary-parallel, the head gathered), the only plan
    /// on phi3, olmo2, gemma2, gemma3_text, mixtral, qwen3_moe, qwen2_moe and deepseek_v3 (the
    /// experts' packed_colwise gate_up and rowwise down under moe_tp_experts); torch: the
    /// Megatron-style plan above, the default on Llama-style models.
    #[arg(help_heading = super::heading::PARALLEL, long, value_name = "PLAN", value_parser = ["auto", "torch"])]
    pub tp_plan: Option<String>,
}

/// MixedPrecisionPolicy's dtypes, as the flags name them (help lists these).
pub const FSDP_DTYPES: [(&str, DType); 3] = [("bf16", DType::BF16), ("fp16", DType::F16), ("fp32", DType::F32)];

/// `--offload` values: (name, what moves to the host).
pub const OFFLOADS: [(&str, &str); 1] = [("params", "FSDP2's CPUOffloadPolicy: sharded parameters, their gradients and the optimizer step on the host")];

fn float_dtype(flag: &str, s: &str) -> anyhow::Result<DType> {
    match DType::parse(&s.to_ascii_lowercase()) {
        Some(d) if FSDP_DTYPES.iter().any(|(_, t)| *t == d) => Ok(d),
        _ => Err(usage(flag, format!("'{s}' (expected {})", FSDP_DTYPES.map(|(n, _)| n).join(", ")))),
    }
}

impl ParallelFlags {
    pub fn given(&self) -> bool {
        self.parallel.is_some()
            || self.world_size.is_some()
            || self.rank.is_some()
            || self.gpus_per_node.is_some()
            || self.no_reshard_after_forward
            || self.fsdp_param_dtype.is_some()
            || self.fsdp_reduce_dtype.is_some()
            || self.fsdp_unit.is_some()
            || self.offload.is_some()
            || self.tp.is_some()
            || self.sequence_parallel
            || self.tp_plan.is_some()
    }

    /// The flags as words, for subcommands that pass them on to `profile`.
    pub fn words(&self) -> Vec<String> {
        let mut w = Vec::new();
        let mut push = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                w.extend([k.to_string(), v]);
            }
        };
        push("--parallel", self.parallel.clone());
        push("--world-size", self.world_size.map(|n| n.to_string()));
        push("--rank", self.rank.map(|n| n.to_string()));
        push("--gpus-per-node", self.gpus_per_node.map(|n| n.to_string()));
        push("--fsdp-param-dtype", self.fsdp_param_dtype.clone());
        push("--fsdp-reduce-dtype", self.fsdp_reduce_dtype.clone());
        push("--fsdp-unit", self.fsdp_unit.clone());
        push("--offload", self.offload.clone());
        push("--tp", self.tp.map(|n| n.to_string()));
        push("--tp-plan", self.tp_plan.clone());
        if self.no_reshard_after_forward {
            w.push("--no-reshard-after-forward".into());
        }
        if self.sequence_parallel {
            w.push("--sequence-parallel".into());
        }
        w
    }

    /// The layout (None: one device), checked; the options without --parallel are refused.
    pub fn resolve(&self) -> anyhow::Result<Option<ParallelConfig>> {
        let Some(name) = &self.parallel else {
            if self.given() {
                let flag = [
                    ("--world-size", self.world_size.is_some()),
                    ("--tp", self.tp.is_some()),
                    ("--gpus-per-node", self.gpus_per_node.is_some()),
                    ("--fsdp-unit", self.fsdp_unit.is_some()),
                    ("--offload", self.offload.is_some()),
                    ("--fsdp-param-dtype", self.fsdp_param_dtype.is_some()),
                    ("--fsdp-reduce-dtype", self.fsdp_reduce_dtype.is_some()),
                    ("--no-reshard-after-forward", self.no_reshard_after_forward),
                    ("--sequence-parallel", self.sequence_parallel),
                    ("--tp-plan", self.tp_plan.is_some()),
                ]
                .into_iter()
                .find_map(|(f, g)| g.then_some(f))
                .unwrap_or("--rank");
                return Err(usage(flag, "sets up a parallel job: give --parallel ddp|zero1|zero2|fsdp|hsdp|tp too"));
            }
            return Ok(None);
        };
        let names = Layout::ALL.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ");
        let layout = Layout::parse(name).ok_or_else(|| usage("--parallel", format!("'{name}' (expected {names})")))?;
        let world = self.world_size.ok_or_else(|| usage("--world-size", format!("--parallel {} needs the number of ranks", layout.name())))?;
        let mut c = ParallelConfig::new(layout, world);
        c.rank = self.rank.unwrap_or(0);
        if layout == Layout::Hsdp {
            c.gpus_per_node = self.gpus_per_node.unwrap_or(8.min(world));
        } else if self.gpus_per_node.is_some() {
            return Err(usage("--gpus-per-node", format!("sets hsdp's shard group, not {}'s", layout.name())));
        }
        c.reshard_after_forward = !self.no_reshard_after_forward;
        if let Some(t) = self.tp {
            c.tp = t;
        }
        c.sequence_parallel = self.sequence_parallel;
        c.tp_plan = match self.tp_plan.as_deref() {
            None => None,
            Some(p) => Some(crate::model::tp::TpPlan::parse(p).ok_or_else(|| usage("--tp-plan", format!("'{p}' (expected auto or torch)")))?),
        };
        match self.offload.as_deref() {
            None => {}
            Some(o) if o == OFFLOADS[0].0 => c.offload_params = true,
            Some("optimizer") => {
                return Err(usage(
                    "--offload",
                    "optimizer: FSDP2 has no optimizer-only offload (CPUOffloadPolicy moves the sharded parameters, their gradients and the step together: --offload params); DeepSpeed's ZeRO-Offload is not modelled",
                ))
            }
            Some(o) => return Err(usage("--offload", format!("'{o}' (expected {})", OFFLOADS.map(|(n, _)| n).join(", ")))),
        }
        if let Some(u) = &self.fsdp_unit {
            c.blocks_per_unit = match u.to_ascii_lowercase().as_str() {
                "block" => Some(1),
                "root" => None,
                s => match s.strip_prefix("every-").map(str::parse::<usize>) {
                    Some(Ok(n)) => Some(n),
                    _ => return Err(usage("--fsdp-unit", format!("'{u}' (expected block, every-N or root)"))),
                },
            };
        }
        c.param_dtype = self.fsdp_param_dtype.as_deref().map(|s| float_dtype("--fsdp-param-dtype", s)).transpose()?;
        c.reduce_dtype = self.fsdp_reduce_dtype.as_deref().map(|s| float_dtype("--fsdp-reduce-dtype", s)).transpose()?;
        c.validate().map_err(|(flag, msg)| usage(flag, msg))?;
        Ok(Some(c))
    }
}

/// What peft and bitsandbytes make of a model, as far as the parallel layouts care.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adapted {
    pub lora: bool,
    /// peft's `use_dora`.
    pub dora: bool,
    pub four_bit: bool,
    pub eight_bit: bool,
}

impl Adapted {
    /// The resolved model's.
    pub fn of(h: &crate::model::hf::HfConfig) -> Adapted {
        let q = h.bnb.as_ref();
        Adapted {
            lora: h.lora.is_some(),
            dora: h.lora.as_ref().is_some_and(|l| l.use_dora),
            four_bit: q.is_some_and(|q| q.four_bit().is_some()),
            eight_bit: q.is_some_and(|q| q.int8().is_some()),
        }
    }
    /// The flags', before the model resolves (fit's and compare's layout lists).
    pub fn of_flags(f: &super::hf::HfFlags) -> Adapted {
        Adapted { lora: f.lora_r.is_some(), dora: f.use_dora, four_bit: f.load_in_4bit, eight_bit: f.load_in_8bit }
    }
}

/// Why a LoRA, DoRA, 4-bit or 8-bit model cannot run under `c` (the flag to blame and the
/// message), or None where the layout is modelled for it: DDP, FSDP2 per block and ZeRO-2
/// (LoRA and QLoRA, any bnb_4bit_quant_storage), as tools/pytorch/measure_dist.py --lora and
/// --fsdp-qlora measure them, and HSDP (LoRA: --lora-layouts measures it on the llama family and
/// issue 30's models; 4-bit: --fsdp-qlora-layouts); 8-bit and DoRA under no layout yet. profile,
/// fit and compare all ask here.
pub fn adapters_refusal(c: &ParallelConfig, m: Adapted) -> Option<(&'static str, String)> {
    let Adapted { lora, dora, four_bit, eight_bit } = m;
    let what = if c.tp > 1 { "--tp" } else { "--parallel" };
    if eight_bit {
        return Some(("--load-in-8bit", format!("8-bit models under {what} are not modelled yet: profile one GPU (drop the parallel flags)")));
    }
    if dora {
        return Some(("--use-dora", format!("DoRA under {what} is not modelled yet: profile one GPU (drop the parallel flags)")));
    }
    if !lora && !four_bit {
        return None;
    }
    let what = if four_bit { "4-bit (QLoRA) models" } else { "LoRA (peft) models" };
    if c.tp > 1 || c.layout == Layout::Tp {
        return Some((if c.layout == Layout::Tp { "--parallel" } else { "--tp" }, format!("{what} under tensor parallelism are not modelled (peft's adapters on DTensor-sharded linears): use --parallel ddp, zero2 or fsdp")));
    }
    match c.layout {
        Layout::Ddp => None,
        // MixedPrecisionPolicy over the adapters: mixed_precision_adapters_refusal (it needs
        // the weights' dtype and peft's options).
        Layout::Fsdp | Layout::Zero2 | Layout::Hsdp if c.offload_params => Some(("--offload", "FSDP2's CPUOffloadPolicy over a LoRA model is not modelled: drop it".into())),
        Layout::Fsdp | Layout::Zero2 => None,
        // (dist_grid/lora_layouts.json: LoRA on a 2-D mesh; fsdp_qlora_layouts.json: 4-bit,
        // whose limits there are qlora_layout_refusal's)
        Layout::Hsdp => None,
        other => Some(("--parallel", format!("{what} under {} are not modelled (ddp, zero2 and fsdp are, hsdp too)", other.name()))),
    }
}

/// Why FSDP2's MixedPrecisionPolicy over peft's adapters is not modelled for `h` with weights
/// of `precision` (the flag to blame and the message), or None. Measured (fsdp and zero2, per
/// decoder layer; dist_grid/lora_mixed_precision.json on llama, mistral, qwen2, qwen3 and
/// lora_mixed_precision_models.json on issue 30's models; hsdp too:
/// lora_mixed_precision_layouts.json): param_dtype bf16 with reduce_dtype fp32 or unset, and
/// reduce_dtype fp32 alone, over fp32 or bf16 weights (fp32 adapters), no autocast, adapters on
/// modules (not ParamWrapper's target_parameters), without peft's modules_to_save or bias, each
/// decoder layer its own fully_shard unit.
pub fn mixed_precision_adapters_refusal(c: &ParallelConfig, h: &crate::model::hf::HfConfig, precision: crate::train::Precision) -> Option<(&'static str, String)> {
    if !(c.param_dtype.is_some() || c.reduce_dtype.is_some()) {
        return None;
    }
    let policy_flag = if c.param_dtype.is_some() { "--fsdp-param-dtype" } else { "--fsdp-reduce-dtype" };
    // FSDP-QLoRA (dist_grid/fsdp_qlora*.json) and the policy over LoRA were measured apart.
    if let Some(q) = &h.bnb {
        return Some((policy_flag, format!("FSDP2's MixedPrecisionPolicy over {} bitsandbytes weights is not measured (FSDP-QLoRA without it is: dist_grid/fsdp_qlora.json; the policy over LoRA: lora_mixed_precision.json): drop one", q.bits())));
    }
    let Some(l) = &h.lora else { return None };
    let policy = "FSDP2's MixedPrecisionPolicy over peft's adapters";
    let measured = "(measured: --fsdp-param-dtype bf16 with --fsdp-reduce-dtype fp32 or unset, or --fsdp-reduce-dtype fp32 alone, over fp32 or bf16 weights, under fsdp, zero2 and hsdp: dist_grid/lora_mixed_precision.json, lora_mixed_precision_layouts.json)";
    if let Some(d) = c.param_dtype.filter(|&d| d != DType::BF16) {
        return Some(("--fsdp-param-dtype", format!("{d} under {policy} is not measured {measured}")));
    }
    if let Some(d) = c.reduce_dtype.filter(|&d| d != DType::F32) {
        return Some(("--fsdp-reduce-dtype", format!("{d} under {policy} is not measured {measured}")));
    }
    let flag = if c.param_dtype.is_some() { "--fsdp-param-dtype" } else { "--fsdp-reduce-dtype" };
    let weights = precision.param_dtype();
    if !matches!(weights, DType::F32 | DType::BF16) {
        return Some(("--dtype", format!("{weights} weights under {policy} are not measured {measured}")));
    }
    if let Some(a) = precision.autocast() {
        return Some(("--precision", format!("{a} autocast with {policy} is not measured {measured}; drop one")));
    }
    let other = [
        (!l.target_parameters.is_empty(), "--target-parameters", "peft's ParamWrapper (target_parameters)"),
        (!l.modules_to_save.is_empty(), "--modules-to-save", "peft's modules_to_save"),
        (l.bias != crate::model::lora::LoraBias::None, "--lora-bias", "peft's trained biases (bias)"),
        (c.blocks_per_unit != Some(1), "--fsdp-unit", "fully_shard units other than each decoder layer"),
        // (the grids checkpoint off or non-reentrant; reentrant with the policy is measured over full weights only)
        (h.reentrant && c.reshard_after_forward && matches!(c.layout, Layout::Fsdp | Layout::Hsdp), "--gradient-checkpointing", "reentrant checkpointing"),
    ];
    if let Some(&(_, f, what)) = other.iter().find(|o| o.0) {
        return Some((f, format!("{what} with {policy} ({flag}) is not measured {measured}; drop one")));
    }
    None
}

/// Why peft's modules_to_save or trained biases (`--modules-to-save`, `--lora-bias`) cannot run
/// under FSDP2's other options: they are measured under ddp, zero2 and fsdp per decoder layer
/// (dist_grid/lora_extras.json), and under hsdp, other fully_shard units and reentrant
/// checkpointing under fsdp and hsdp (lora_extras_layouts.json); other units together with hsdp
/// or reentrant checkpointing are not.
pub fn adapter_extras_layout_refusal(c: &ParallelConfig, h: &crate::model::hf::HfConfig) -> Option<(&'static str, String)> {
    let l = h.lora.as_ref()?;
    let flag = if !l.modules_to_save.is_empty() { "--modules-to-save" } else if l.bias != crate::model::lora::LoraBias::None { "--lora-bias" } else { return None };
    let fully_shard = c.shards_params() && c.tp <= 1;
    let units = c.blocks_per_unit != Some(1);
    let what = [
        (units && c.layout == Layout::Hsdp, "fully_shard units other than each decoder layer (--fsdp-unit) under hsdp"),
        (units && h.reentrant && c.reshard_after_forward && matches!(c.layout, Layout::Fsdp | Layout::Hsdp), "fully_shard units other than each decoder layer (--fsdp-unit) and reentrant checkpointing"),
    ];
    let (_, what) = what.iter().find(|o| fully_shard && o.0)?;
    Some((flag, format!("peft's {} with {what} together is not measured (each is: dist_grid/lora_extras_layouts.json): drop one", if flag == "--lora-bias" { "trained biases (bias)" } else { "modules_to_save" })))
}

/// Why a 4-bit QLoRA model cannot run under hsdp or fully_shard units other than each decoder
/// layer: dist_grid/fsdp_qlora_layouts.json measures them (each alone; reentrant checkpointing
/// under hsdp too) with bnb_4bit_quant_storage the compute dtype (bf16 or fp32), after
/// prepare_model_for_kbit_training.
pub fn qlora_layout_refusal(c: &ParallelConfig, h: &crate::model::hf::HfConfig) -> Option<(&'static str, String)> {
    let q = h.bnb.as_ref()?;
    let q4 = q.four_bit()?;
    let units = c.blocks_per_unit != Some(1);
    if !c.shards_params() || c.tp > 1 || !(units || c.layout == Layout::Hsdp) {
        return None;
    }
    let what = if c.layout == Layout::Hsdp { "hsdp (--parallel hsdp)" } else { "fully_shard units other than each decoder layer (--fsdp-unit)" };
    let measured = "(measured: 4-bit stored as the compute dtype, bf16 or fp32, prepared: dist_grid/fsdp_qlora_layouts.json)";
    if q4.quant_storage != q4.compute_dtype {
        return Some(("--bnb-4bit-quant-storage", format!("{} storage with {} compute under {what} is not measured {measured}", q4.quant_storage, q4.compute_dtype)));
    }
    if !q.prepare {
        return Some(("--prepare-model-for-kbit-training", format!("4-bit weights unprepared under {what} are not measured {measured}")));
    }
    if units && c.layout == Layout::Hsdp {
        return Some(("--fsdp-unit", format!("4-bit QLoRA under hsdp with other fully_shard units is not measured {measured}: drop one")));
    }
    // (prepare_model_for_kbit_training's default is reentrant: the grid's units points checkpoint off or non-reentrant)
    if units && h.reentrant {
        return Some(("--gradient-checkpointing", format!("4-bit QLoRA with reentrant checkpointing (prepare_model_for_kbit_training's default) and other fully_shard units is not measured {measured}: use --gradient-checkpointing non-reentrant or none, or drop --fsdp-unit")));
    }
    None
}

/// The layouts compare and fit put side by side when none is named: ddp, zero1, zero2 and
/// fsdp, less those a LoRA or 4-bit model cannot run under; a model no layout takes (8-bit,
/// DoRA) is refused with [`adapters_refusal`]'s flag and reason.
pub fn default_layouts(m: Adapted) -> anyhow::Result<Vec<Layout>> {
    let all = [Layout::Ddp, Layout::Zero1, Layout::Zero2, Layout::Fsdp];
    let ok: Vec<Layout> = all.into_iter().filter(|&l| adapters_refusal(&ParallelConfig::new(l, 2), m).is_none()).collect();
    match adapters_refusal(&ParallelConfig::new(Layout::Ddp, 2), m) {
        Some((flag, why)) if ok.is_empty() => Err(usage(flag, why)),
        _ => Ok(ok),
    }
}
