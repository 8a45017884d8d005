//! Which parallel layouts issue 30's models run under: DDP, ZeRO-1, ZeRO-2 and FSDP2 per decoder
//! layer for the dense families (phi3, olmo2, gemma2, gemma3_text; and transformers' own
//! tensor-parallel plan alone, --tp-plan auto, tests/tp_hf_grid.rs, with Mixtral's,
//! Qwen3-MoE's, Qwen2-MoE's and DeepSeek-V3's, tests/tp_hf_moe_grid.rs) and the MoE models (mixtral,
//! qwen3_moe, qwen2_moe, gpt_oss, deepseek_v3), as tools/pytorch/measure_dist.py --families /
//! --moe / --gpt-oss-deepseek measures them (tests/dist_models_grid.rs), and peft's LoRA (ddp,
//! zero2, fsdp) and 4-bit QLoRA (ddp) of them, with peft's ParamWrapper (target_parameters) on
//! the MoE models' experts and routers too, as --lora-models measures them (4-bit QLoRA under
//! fsdp and zero2, adapters on nn.Linear modules, but DeepSeek-V3: --fsdp-qlora-models)
//! (tests/dist_lora_models_grid.rs); Qwen2-MoE's sliding window (use_sliding_window) as
//! --qwen2-moe-sliding measures it (full weights); and, each alone over full weights, the
//! router's auxiliary loss (--aux-loss), fully_shard units other than each layer and hsdp
//! (--units; over peft's LoRA too, --lora-layouts; over 4-bit QLoRA, --fsdp-qlora-layouts),
//! FSDP2's MixedPrecisionPolicy under fsdp and
//! zero2 (--mixed-precision; over peft's adapters too, --lora-mixed-precision-models; with hsdp
//! or with the router's loss over full weights, --mixed-precision-pairs; with hsdp over peft's
//! LoRA, --lora-mixed-precision-layouts), and reentrant
//! checkpointing under fsdp and hsdp (--reentrant; over peft's LoRA too, --lora-layouts). The
//! rest is refused, naming the flag and why.
use crate::model::hf::HfConfig;
use crate::parallel::{Layout, ParallelConfig};

/// Why `c` is not modelled for `hf` (the flag to blame and the message), or None. Llama,
/// Mistral, Qwen2 and Qwen3 are never refused here.
pub fn refusal(c: &ParallelConfig, hf: &HfConfig) -> Option<(&'static str, String)> {
    let moe = hf.moe.as_ref();
    let name = moe.map_or(hf.model_type.name(), |m| m.family.model_type());
    if !hf.model_type.is_family() && moe.is_none() {
        return None;
    }
    if c.tp > 1 || c.layout == Layout::Tp {
        let flag = if c.layout == Layout::Tp { "--parallel" } else { "--tp" };
        // torch 2.15 has no expert-parallel API: fully_shard's shard_placement_fn can put a
        // parameter on another mesh, and transformers' own DistributedConfig(ep_size) applies
        // its base_model_ep_plan; neither is modelled, so there is no --ep.
        const NO_EP: &str = "torch 2.15 has no expert-parallel API (only fully_shard's per-parameter mesh, shard_placement_fn; transformers' DistributedConfig(ep_size) is its own recipe), so vramscope has no --ep";
        // tests/tp_hf_moe_grid.rs measures Mixtral's, Qwen3-MoE's, Qwen2-MoE's and DeepSeek-V3's
        // plans (--parallel tp).
        if name == "gpt_oss" {
            return Some((flag, format!("tensor parallelism of {name} is not measured: transformers 5.23's GptOssConfig has no base_model_tp_plan (tp_plan=\"auto\" shards only lm_head; the MoE styles, packed_colwise gate_up and rowwise down under moe_tp_experts, are measured on mixtral, qwen3_moe, qwen2_moe and deepseek_v3); {NO_EP}; use --parallel ddp, zero1, zero2 or fsdp")));
        }
        // tests/tp_hf_grid.rs measures transformers' plan (--tp-plan auto) alone over the
        // tensor-parallel ranks, full fine-tuning and forward.
        if c.layout != Layout::Tp {
            let ep = if moe.is_some() { format!(" ({NO_EP})") } else { String::new() };
            return Some(("--tp", format!("transformers' tensor-parallel plan for {name} under FSDP2 on a 2-D mesh (--parallel {} --tp) is not measured{ep}; use --parallel tp (tensor parallelism alone) or ddp, zero1, zero2 or fsdp", c.layout.name())));
        }
        if hf.lora.is_some() || hf.bnb.is_some() {
            let f = if hf.lora.is_some() { "--lora-r" } else { hf.bnb.as_ref().map_or("--load-in-4bit", |q| q.flag()) };
            return Some((f, format!("peft's adapters and bitsandbytes weights of {name} under transformers' tensor-parallel plan are not measured; use --parallel ddp, or profile one GPU")));
        }
        return None;
    }
    // dist_grid/qwen2_moe_sliding.json measures the window under ddp, zero1, zero2 and fsdp
    // with full weights; not with peft's adapters or bitsandbytes weights.
    if name == "qwen2_moe" && hf.sliding_layers.is_some() && (hf.lora.is_some() || hf.bnb.is_some()) {
        let flag = if hf.lora.is_some() { "--lora-r" } else { hf.bnb.as_ref().map_or("--load-in-4bit", |q| q.flag()) };
        return Some((flag, format!("{name}'s sliding window (use_sliding_window) with peft's adapters or bitsandbytes weights under a parallel layout is not measured yet (full weights are: dist_grid/qwen2_moe_sliding.json); profile one GPU")));
    }
    // dist_lora_models_grid.rs measures peft's LoRA (ddp, zero2, fsdp) and 4-bit QLoRA (ddp) on
    // every family and MoE model, on the targets' modules (an MoE model's are its attention's,
    // and Qwen2-MoE's shared expert's) and (LoRA) through ParamWrapper on the experts' 3-D
    // weights and the router's, prepared 4-bit weights; modules_to_save and bias as
    // --lora-extras measures them (dist_grid/lora_extras.json); the layouts' own limits on
    // adapters are parallel::adapters_refusal's and bias_dtype_refusal's.
    // (The eager loop's ParamWrapper points matched once CPU baddbmm's ISA-dependent operand
    // copies were left out of the measurement as CPU scratch, as CPU bmm's are.)
    if let Some(q) = &hf.bnb {
        if hf.lora.is_none() || q.four_bit().is_none() {
            return Some((q.flag(), format!("bitsandbytes weights of {name} under a parallel layout are measured only as 4-bit QLoRA (with --lora-r) under ddp; profile one GPU")));
        }
        if !q.prepare {
            return Some(("--prepare-model-for-kbit-training", format!("4-bit {name} under a parallel layout is measured after prepare_model_for_kbit_training only; profile one GPU")));
        }
        // FSDP-QLoRA (fsdp, zero2) is measured on the llama family (dist_grid/fsdp_qlora.json)
        // and on the families and MoE models but DeepSeek-V3 (fsdp_qlora_models.json; peft's
        // ParamWrapper over 4-bit weights is refused under any layout, lora_targets.rs).
        if c.shards_params() {
            if name == "deepseek_v3" {
                return Some(("--load-in-4bit", format!("4-bit QLoRA of {name} under FSDP2 (--parallel {}) is not measured (the other models' is: dist_grid/fsdp_qlora_models.json); use --parallel ddp", c.layout.name())));
            }
        }
    }
    // Reentrant checkpointing under FSDP2 resharding after forward (transformers checkpoints
    // the layer's forward, so FSDP2's hooks run outside it, once) is measured per decoder
    // layer under fsdp and hsdp with full weights (dist_grid/reentrant.json) and with the
    // router's loss (aux_loss.json) and with FSDP2's MixedPrecisionPolicy under fsdp
    // (reentrant_mixed_precision.json); reentrant under zero2 with adapters too (lora_models.json).
    // (A 4-bit model's reentrant checkpointing under FSDP2 is measured on the llama family:
    // dist_grid/fsdp_qlora.json.)
    // With peft's adapters (LoRA; ParamWrapper measured on grouped_mm experts, the eager loop is
    // refused above) under fsdp and hsdp: lora_layouts.json.
    // (4-bit under hsdp too: fsdp_qlora_layouts.json)
    if hf.reentrant && matches!(c.layout, Layout::Fsdp | Layout::Hsdp) && c.reshard_after_forward {
        let other = [
            // (with the policy under fsdp over full weights: reentrant_mixed_precision.json)
            ((c.param_dtype.is_some() || c.reduce_dtype.is_some()) && (c.layout == Layout::Hsdp || hf.lora.is_some()), "FSDP2's MixedPrecisionPolicy"),
            (c.blocks_per_unit != Some(1), "fully_shard units other than each decoder layer"),
            (name == "qwen2_moe" && hf.sliding_layers.is_some(), "Qwen2-MoE's sliding window"),
        ];
        if let Some((_, what)) = other.iter().find(|o| o.0) {
            return Some(("--gradient-checkpointing", format!("reentrant checkpointing of {name} under FSDP2 resharding after forward (--parallel {}) together with {what} is not measured (reentrant checkpointing alone is: dist_grid/reentrant.json); use non-reentrant, or drop one", c.layout.name())));
        }
    }
    // Measured beyond ddp, zero1, zero2 and fsdp per decoder layer, each alone and with full
    // weights: the router's loss (dist_grid/aux_loss.json; under ddp with adapters and 4-bit
    // loads too: aux_loss_lora.json), FSDP2's MixedPrecisionPolicy under
    // fsdp and zero2 (mixed_precision.json; over peft's adapters too:
    // lora_mixed_precision_models.json), other fully_shard units and hsdp (units.json; over
    // peft's adapters too: lora_layouts.json).
    if c.offload_params {
        // On CPU the offloaded shards and the device are one memory (FSDP2's .to(device) of a
        // CPU shard is a no-op), so no fixture can tell what CPUOffloadPolicy moves.
        return Some(("--offload", format!("FSDP2's CPUOffloadPolicy over {name} is not measured (a CPU run cannot tell the host's shards from the device's copies): drop it")));
    }
    let mp_flag = if c.param_dtype.is_some() { "--fsdp-param-dtype" } else { "--fsdp-reduce-dtype" };
    // (option on, flag, what, its full-weights fixture, measured over peft's adapters too)
    let options = [
        (name == "qwen2_moe" && hf.sliding_layers.is_some(), "--model", "Qwen2-MoE's sliding window (use_sliding_window)", "qwen2_moe_sliding.json", false),
        // over peft's adapters: lora_mixed_precision_models.json (its own limits are
        // parallel::mixed_precision_adapters_refusal's)
        (c.param_dtype.is_some() || c.reduce_dtype.is_some(), mp_flag, "FSDP2's MixedPrecisionPolicy", "mixed_precision.json", true),
        (moe.is_some_and(|m| m.output_router_logits), "--output-router-logits", "the router's auxiliary loss", "aux_loss.json", false),
        // over peft's adapters: lora_layouts.json (every-2 and the root alone; hsdp); over 4-bit
        // QLoRA: fsdp_qlora_layouts.json
        (c.layout == Layout::Hsdp, "--parallel", "hsdp (FSDP2 on a 2-D mesh)", "units.json", true),
        (c.blocks_per_unit != Some(1), "--fsdp-unit", "fully_shard on units other than each decoder layer", "units.json", true),
    ];
    let on: Vec<_> = options.iter().filter(|o| o.0).collect();
    // The policy with hsdp and with the router's loss, over full weights, is measured too
    // (mixed_precision_pairs.json); no other pair.
    let measured_pair = on.len() == 2 && on[0].1 == mp_flag && matches!(on[1].1, "--parallel" | "--output-router-logits");
    if on.len() > 2 {
        let (&&(_, flag, what, _, _), rest) = on.split_last().expect("more than two");
        let others: Vec<&str> = rest.iter().map(|o| o.2).collect();
        return Some((flag, format!("{what} together with {} over {name} under a parallel layout is not measured (each alone is, and the policy with hsdp or with the router's loss: dist_grid/mixed_precision_pairs.json): drop one", others.join(" and "))));
    }
    if let [&(_, _, what, file, _), &(_, flag2, what2, _, _)] = on.as_slice() {
        if !measured_pair {
            return Some((flag2, format!("{what2} together with {what} over {name} under a parallel layout is not measured (each alone is: dist_grid/{file}): drop one")));
        }
        // The policy with hsdp over peft's LoRA: lora_mixed_precision_layouts.json (its limits
        // are parallel::mixed_precision_adapters_refusal's).
        let hsdp_lora = on[1].1 == "--parallel" && hf.bnb.is_none();
        if (hf.lora.is_some() && !hsdp_lora) || hf.bnb.is_some() {
            return Some((flag2, format!("{what2} together with {what} over {name} with peft's adapters or bitsandbytes weights under a parallel layout is not measured (full weights are: dist_grid/mixed_precision_pairs.json; LoRA with the policy under hsdp: lora_mixed_precision_layouts.json): drop one, or profile one GPU")));
        }
    }
    if let [&(_, flag, what, file, with_adapters)] = on.as_slice() {
        // 4-bit QLoRA (stored as a float type) under hsdp and other units:
        // fsdp_qlora_layouts.json (its limits are parallel::qlora_layout_refusal's).
        let qlora_measured = with_adapters && matches!(flag, "--parallel" | "--fsdp-unit");
        // The router's loss with LoRA or a 4-bit load under ddp: dist_grid/aux_loss_lora.json
        // (what one GPU refuses with it, moe::apply has refused already).
        let aux_ddp = flag == "--output-router-logits" && c.layout == Layout::Ddp && hf.bnb.as_ref().is_none_or(|q| q.four_bit().is_some());
        if !aux_ddp && ((hf.bnb.is_some() && !qlora_measured) || (hf.lora.is_some() && !with_adapters)) {
            let ddp = if flag == "--output-router-logits" { "; under ddp adapters and 4-bit loads are too: aux_loss_lora.json): use --parallel ddp, drop it" } else { "): drop it" };
            return Some((flag, format!("{what} over {name} with peft's adapters or bitsandbytes weights under a parallel layout (--parallel {}) is not measured (full weights are: dist_grid/{file}{ddp}, or profile one GPU", c.layout.name())));
        }
    }
    None
}

/// FSDP2 (fsdp, zero2 and hsdp) asserts one original dtype over a `fully_shard` unit's trainable
/// parameters (`FSDPParamGroup._init_mp_dtypes`): peft's trained biases (`--lora-bias`) in the
/// weights' bf16 or fp16 beside the fp32 adapters of a decoder layer make PyTorch raise "FSDP
/// expects uniform original parameter dtype" (measured on gpt-oss and Qwen2-MoE: measure_dist.py
/// --lora-extras), and so do peft's modules_to_save copies (in the weights' dtype) where the root
/// is the only unit (`--fsdp-unit root`: the adapters are the root's too), so no step runs.
pub fn bias_dtype_refusal(c: &ParallelConfig, cfg: &crate::model::ModelConfig, weights: crate::engine::DType) -> Option<(&'static str, String)> {
    let fully_shard = matches!(c.layout, Layout::Fsdp | Layout::Zero2 | Layout::Hsdp);
    if !fully_shard || weights == crate::engine::DType::F32 {
        return None;
    }
    let raises = "raises \"FSDP expects uniform original parameter dtype\" in PyTorch";
    if cfg.lora_bias_count() > 0 {
        return Some(("--lora-bias", format!("trains {weights} biases beside peft's fp32 adapters in one fully_shard unit: FSDP2 (--parallel {}) {raises}; use fp32 weights, --lora-bias none, or --parallel ddp", c.layout.name())));
    }
    let saves = cfg.hf().and_then(|h| h.lora.as_ref()).is_some_and(|l| !l.modules_to_save.is_empty());
    if saves && c.blocks_per_unit.is_none() {
        return Some(("--modules-to-save", format!("trains {weights} copies (modules_to_save) beside peft's fp32 adapters in the root, the only fully_shard unit (--fsdp-unit root): FSDP2 (--parallel {}) {raises}; use fp32 weights, or --fsdp-unit block or every-N", c.layout.name())));
    }
    None
}
