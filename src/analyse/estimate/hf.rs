//! The hf flavour's closed form: what transformers 5.23's decoder layer, final norm, LM head
//! and `ForCausalLMLoss` keep (src/model/hf/transformers_5_23.rs is the op sequence), derived
//! from PyTorch's save rules as the other flavours are, plus what the forward holds without
//! autograd saving it: the `DynamicCache`, and the mask, position ids and RoPE tables that
//! checkpointed layers' closures capture.
//!
//! Two PyTorch rules beyond the usual ones decide several terms: a batched `matmul` folds its
//! 4-D operands into 3-D ones with `reshape`, a copy when the tensor is a transposed view of a
//! (B, S, h, d_h) projection (the copy is what `bmm` keeps; the same bytes as the tensor it
//! replaces); and elementwise ops give their output their input's dim order, so the rotated Q
//! and K stay (B, S, h, d_h) underneath and a fused kernel's output (`empty_like(q)`) needs no
//! copy to merge heads.
use super::{vocab, Ctx, Mode, Term, Unit};
use crate::model::hf::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use crate::model::lora::LoraConfig;
use crate::model::{Checkpoint, ConfigError, ModelConfig};
use crate::train::Precision;

pub(crate) mod deepseek;
mod gemma;
mod gpt_oss;
pub mod moe;
mod gemma3;
mod olmo2;

/// The attention kernel the derivation follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Eager,
    /// A fused SDPA / flash-attn kernel: keeps q, k, v, its output and a logsumexp.
    Fused(SdpaBackend),
    /// SDPA's math composite.
    Math,
}

/// Whether the run's sdpa call gets a mask: only for a sliding window shorter than the
/// sequence (`_ignore_causal_mask_sdpa` drops the causal one, and an all-ones padding mask).
/// The kernel a CUDA run uses: for sdpa, PyTorch's pick for the dtype the kernel sees (bf16/
/// fp16 under autocast too: `scaled_dot_product_attention` is on autocast's lower-precision
/// list, so its inputs are cast before the backend is chosen), the mask and GQA.
pub fn kernel(cfg: &ModelConfig, hf: &HfConfig, precision: Precision, s: usize) -> Kernel {
    match hf.attn_implementation {
        AttnImplementation::Eager => Kernel::Eager,
        AttnImplementation::FlashAttention2 => Kernel::Fused(SdpaBackend::Flash),
        AttnImplementation::Sdpa => {
            let half = precision != Precision::Fp32;
            match hf.sdpa_kernel(cfg.num_heads, cfg.num_kv_heads, half, s) {
                SdpaBackend::Math => Kernel::Math,
                b => Kernel::Fused(b),
            }
        }
    }
}

/// Refuses the hf runs this closed form cannot state honestly, naming the flag to change.
pub fn check(cfg: &ModelConfig, precision: Precision, s: usize) -> Result<(), ConfigError> {
    let Some(hf) = cfg.hf() else { return Ok(()) };
    if let Some(m) = &hf.moe {
        moe::check(hf, m)?;
        if m.gpt_oss.is_some() {
            gpt_oss::check(hf)?;
        }
    }
    if hf.model_type == Arch::Gemma2 && hf.attn_implementation != AttnImplementation::Eager {
        return Err(ConfigError::new("--attn-implementation", format!("{} on gemma2: the closed form derives Gemma 2's eager attention (transformers' default for it); `profile` simulates the rest", hf.attn_implementation.name())));
    }
    check_adapters(hf, precision)?;
    if kernel(cfg, hf, precision, s) == Kernel::Fused(SdpaBackend::Cudnn) {
        return Err(ConfigError::new(
            "--sdpa-backend",
            "cuDNN attention (what PyTorch runs on an H100/H200) is not derived in closed form: its philox tensors, backward workspace and dO copy run op for op in `profile --gpu H100` (--device meta); name flash, efficient or math here",
        ));
    }
    if hf.logits_to_keep > 0 && hf.logits_to_keep < s {
        return Err(ConfigError::new(
            "--logits-to-keep",
            format!(
                "{} < context {s}: estimate derives a training step, and transformers' ForCausalLMLoss needs logits for every position (cross_entropy raises a size mismatch)",
                hf.logits_to_keep
            ),
        ));
    }
    if let Checkpoint::Every(n) = cfg.checkpoint {
        if n > 1 {
            return Err(ConfigError::new("--checkpoint", format!("every-{n}: the hf estimate derives gradient checkpointing on every layer or none")));
        }
    }
    if hf.model_type == Arch::Gemma3Text {
        return gemma3::check(cfg, &gemma::trimmed(hf, cfg.num_layers), precision, s);
    }
    if moe::window_layers(hf).is_some() {
        check_kernel(cfg, &moe::full_layer_hf(hf), precision, s, false)?;
    }
    check_kernel(cfg, hf, precision, s, false)
}

/// The attention kernels the closed form derives for `hf` (a layer's: Gemma 3's masked
/// sliding layers carry a window); `masked_efficient`: the memory-efficient kernel with the
/// window's mask is derived (Gemma 3's sliding layers, whose pick it is).
fn check_kernel(cfg: &ModelConfig, hf: &HfConfig, precision: Precision, s: usize, masked_efficient: bool) -> Result<(), ConfigError> {
    let autocast = matches!(precision, Precision::Bf16 | Precision::Fp16);
    let flag = if hf.attn_implementation == AttnImplementation::Sdpa { "--sdpa-backend" } else { "--attn-implementation" };
    match kernel(cfg, hf, precision, s) {
        Kernel::Fused(SdpaBackend::Flash) if precision == Precision::Fp32 => {
            Err(ConfigError::new(flag, "the flash kernel (sdpa flash, flash_attention_2) runs only fp16/bf16 queries; this run is fp32 (give --precision bf16 or --pure-bf16)"))
        }
        Kernel::Fused(SdpaBackend::Flash) if hf.sdpa_masked(s) && masked_efficient => Err(ConfigError::new(
            flag,
            "the sliding layers' sdpa gets the window's mask, which PyTorch's flash kernel does not take: use the memory-efficient or math backend (or auto), or --attn-implementation eager",
        )),
        Kernel::Fused(SdpaBackend::Efficient) if hf.sdpa_masked(s) && masked_efficient => Ok(()),
        Kernel::Fused(SdpaBackend::Flash | SdpaBackend::Efficient) if hf.sdpa_masked(s) => Err(ConfigError::new(
            flag,
            format!(
                "the sliding window ({}) is not longer than the context ({s}), so sdpa gets a mask; the closed form does not derive the flash/memory-efficient kernels' mask (PyTorch keeps it as attn_bias; `profile` simulates it): use --sdpa-backend math or --attn-implementation eager",
                hf.sliding_window.unwrap_or(0)
            ),
        )),
        Kernel::Fused(SdpaBackend::Efficient) if hf.sdpa_gqa(cfg.num_heads, cfg.num_kv_heads, s) => Err(ConfigError::new(
            flag,
            format!("the memory-efficient kernel has no grouped-query attention ({} key/value heads for {} query heads, enable_gqa): use flash, math or eager", cfg.num_kv_heads, cfg.num_heads),
        )),
        // (DeepSeek-V3's math composite under autocast is derived: hf/deepseek.rs.)
        Kernel::Math if autocast && hf.moe.as_ref().is_none_or(|m| m.deepseek.is_none()) => Err(ConfigError::new(
            flag,
            "autocast with SDPA's math backend (PyTorch casts to the low type, then the composite upcasts to fp32 outside autocast) is not derived: use --pure-bf16, fp32, --sdpa-backend flash/efficient or --attn-implementation eager",
        )),
        _ => Ok(()),
    }
}

/// What the closed form derives of peft and bitsandbytes: LoRA over unquantized weights in
/// fp32 or pure bf16; the rest is refused, naming its flag.
fn check_adapters(hf: &HfConfig, precision: Precision) -> Result<(), ConfigError> {
    let op_for_op = "runs op for op in profile and fit (--device meta)";
    let Some(lc) = &hf.lora else {
        return match &hf.bnb {
            Some(q) => Err(ConfigError::new(q.flag(), format!("a {} model without adapters trains nothing: add --lora-r for QLoRA", q.bits()))),
            None => Ok(()),
        };
    };
    if hf.bnb.is_some() && lc.bias != crate::model::lora::LoraBias::None {
        return Err(ConfigError::new("--lora-bias", format!("biases that train over a 4-bit model (bitsandbytes casts them to the compute dtype) are not derived in closed form; the run {op_for_op}")));
    }
    if lc.use_dora {
        // (dora_terms: peft's DoraLinearLayer over a dense weight, the base output reused.)
        let dense = matches!(hf.model_type, Arch::Llama | Arch::Mistral | Arch::Qwen2 | Arch::Qwen3) && hf.moe.is_none();
        let why = if !dense {
            Some(format!("on model_type {}", hf.model_type.name()))
        } else if hf.bnb.is_some() {
            Some("over quantized weights (dequantized every forward)".to_string())
        } else if lc.dropout > 0.0 {
            Some("with --lora-dropout above 0 (the base projection recomputed on the dropped-out input keeps an fp32 weight copy)".to_string())
        } else if !matches!(precision, Precision::Fp32 | Precision::PureBf16 | Precision::PureFp16) {
            Some(format!("under {precision}"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(ConfigError::new(
                "--use-dora",
                format!("DoRA {why} is not derived in closed form (it is on the dense llama, mistral, qwen2 and qwen3 in fp32 and pure bf16/fp16 without dropout); it {op_for_op}"),
            ));
        }
    }
    Ok(())
}

/// The terms of the hf derivation.
pub(super) struct Terms {
    pub block: Vec<Term>,
    /// Layer 0's where it keeps less than the others (peft: its input needs no gradient).
    pub first_block: Option<Vec<Term>>,
    /// The layer `first_block` is (0; DeepSeek-V3's first sparse layer where the dense layers
    /// before it train nothing).
    pub first_layer: usize,
    /// Gemma 3's sliding layers' (their indices) where their kernel sees the window's mask;
    /// DeepSeek-V3's dense layers'.
    pub sliding_block: Option<(Vec<usize>, Vec<Term>, super::OtherLayers)>,
    pub outside: Vec<Term>,
    pub logits: Term,
    pub loss: Vec<Term>,
    pub param_formula: String,
    /// Elements of the weights (and biases) linear layers read, cast once per autocast region.
    pub cast_elements: u64,
    pub cast_formula: String,
}

/// Bytes per element of a precision's tensors in the hf forward.
struct Types {
    /// The model's dtype (residual stream, RoPE tables, eager mask): fp32, or bf16 in pure bf16.
    model: u64,
    /// Linear outputs (the low type under autocast).
    lo: u64,
    /// Rotated Q and K: q_proj's output times fp32 cos under autocast promotes back to fp32.
    qk: u64,
    /// V (v_proj's output).
    v: u64,
}

fn types(c: &Ctx, hf: &HfConfig) -> Types {
    match c.mode {
        Mode::Fp32 => Types { model: 4, lo: 4, qk: 4, v: 4 },
        Mode::Pure => Types { model: 2, lo: 2, qk: 2, v: 2 },
        // OLMo-2's apply_rotary_pos_emb casts the fp32 products back to q's (bf16) type.
        Mode::Autocast if hf.model_type == Arch::Olmo2 => Types { model: 4, lo: 2, qk: 2, v: 2 },
        Mode::Autocast => Types { model: 4, lo: 2, qk: 4, v: 2 },
    }
}

/// Which of a norm's tensors autograd needs: its input's gradient (`input`), its weight's
/// (`weight`: frozen under peft), and whether its output is kept or bound (`output`).
#[derive(Clone, Copy)]
struct NormGrad {
    input: bool,
    weight: bool,
    output: bool,
    /// OLMo-2's norm: `(weight * x).to(input dtype)` keeps the fp32 x·r whatever the input.
    product_fp32: bool,
}

const FULL: NormGrad = NormGrad { input: true, weight: true, output: true, product_fp32: false };

/// transformers' `LlamaRMSNorm`: `x.to(fp32)`, `x·rsqrt(mean(x²) + eps)`, `weight·x.to(input dtype)`.
/// `x` is the norm's input (`elem` its type: the residual, or a projection for q/k_norm);
/// `rows` the elements of `r`; `readers` the linears reading the output (none for q/k_norm).
/// pow, rsqrt and x·r keep x and r only for x's gradient; weight·x keeps x·r only for the
/// weight's.
#[allow(clippy::too_many_arguments)]
fn rms_norm(c: &Ctx, t: &mut Vec<Term>, name: &str, unit: Unit, elem: u64, rows: (&str, u64), readers: &[&str], g: NormGrad) {
    let (rows_formula, rows_n) = rows;
    if g.input {
        if elem == 4 {
            // `.to(float32)` returns x itself: pow and x·r keep the input, counted where it is made.
            if readers.is_empty() {
                t.push(c.term(format!("{name} input (the projection's output; pow, x·r keep it)"), "mm", unit, 4));
            }
        } else {
            t.push(c.term(format!("{name} input cast to fp32 (pow, x·r keep it)"), "_to_copy", unit, 4));
        }
        t.push(c.small(&format!("{name} rsqrt output r"), "rsqrt", rows_formula, rows_n, 4));
    }
    if g.weight {
        if elem == 4 || g.product_fp32 {
            t.push(c.term(format!("{name} x·r (weight·x keeps it)"), "mul", unit, 4));
        } else {
            // x·r dies with `.to(input dtype)`; weight·x keeps the low copy.
            t.push(c.term(format!("{name} x·r back in {} (weight·x keeps it)", c.low_name), "_to_copy", unit, 2));
        }
    }
    if readers.is_empty() || !g.output {
        return; // q/k_norm: RoPE's muls keep cos/sin, not their input.
    }
    let short = readers.join("/");
    match c.mode {
        // One low copy per linear under autocast (only leaf weights' casts are cached).
        Mode::Autocast => {
            for r in readers {
                t.push(c.term(format!("{name} output (fp32) cast to {} for {r}", c.low_name), "_to_copy", unit, 2));
            }
        }
        _ => t.push(c.term(format!("{name} output (input of {short})"), "mul", unit, elem)),
    }
}

/// Size class of a (B, S, n_heads, d_h) tensor: `a` when it is d wide.
fn heads_unit(c: &Ctx, heads: u64) -> Unit {
    if heads * c.dk == c.d {
        Unit::A
    } else if heads == c.h {
        Unit::Q
    } else {
        Unit::Kv
    }
}

/// Which of the attention's inputs need a gradient (all in full fine-tuning; under peft, a
/// projection's output needs one when its input does or it trains), and whether o_proj keeps
/// its input (its weight's gradient, or the LoRA adapter's `lora_A`).
#[derive(Clone, Copy)]
struct AttnGrad {
    q: bool,
    k: bool,
    v: bool,
    o_input: bool,
}

/// One decoder layer's attention: the tensors its kernel keeps and the DynamicCache's. A
/// matmul keeps each operand for the other's gradient; softmax keeps its output for its
/// input's; a fused kernel keeps q, k, v, its output and logsumexp when any input needs one.
fn attention(c: &Ctx, t: &mut Vec<Term>, cfg: &ModelConfig, hf: &HfConfig, kernel: Kernel, cache: bool, g: AttnGrad) {
    // The scores QKᵀ need a gradient when Q or K does; the output when V does too.
    let scores = g.q || g.k;
    let any = scores || g.v;
    let ty = types(c, hf);
    let (qu, kvu) = (heads_unit(c, c.h), heads_unit(c, c.kvh));
    let n_rep = c.h / c.kvh;
    // Under autocast Q and K are fp32 (the fp32 cos promotes them) and get low copies; OLMo-2
    // casts them back itself.
    let ac = c.mode == Mode::Autocast && ty.qk == 4;
    // DynamicLayer.lazy_initialization makes the cache's empty tensors in the keys' dtype, so
    // under autocast the values' cat promotes the bf16 V to fp32: the attention then reads
    // fp32 values and casts them (a copy of its own).
    let promoted = cache && ac && ty.v != ty.qk;
    let phi3 = hf.model_type == Arch::Phi3;
    // transformers repeats k and v itself (repeat_kv, a copy) for eager, and for sdpa when
    // it cannot pass enable_gqa; flash_attention_2 and the fused kernels with enable_gqa read
    // the h_kv heads directly (math repeats them inside, below).
    let repeat = n_rep > 1
        && match kernel {
            Kernel::Eager => true,
            _ if hf.attn_implementation == AttnImplementation::FlashAttention2 => false,
            _ => !hf.sdpa_gqa(cfg.num_heads, cfg.num_kv_heads, c.s as usize),
        };
    // Repeating one key/value head is a view (the expand's size-1 head dim lets reshape
    // merge): a fused kernel keeps the unrepeated tensor, or under autocast its cast of the
    // view, h heads wide (`_to_copy` of an overlapping view is contiguous). Eager's and
    // math's matmuls copy it when they fold it to 3-D: the same bytes as a repeat.
    let view_repeat = repeat && c.kvh == 1 && matches!(kernel, Kernel::Fused(_));
    let repeated = repeat && !view_repeat;
    let (ku, kname) = if repeated { (qu, "K repeated to h heads (repeat_kv)") } else { (kvu, "") };
    // Whether the kernel keeps the K/V it was given (the cache's copy with the cache on)
    // rather than a tensor of its own (a repeat, a cast, a fold or scale copy).
    let (k_own, v_own);
    match kernel {
        Kernel::Eager => {
            // matmul folds q and kᵀ to 3-D: q is (B, S, h, d_h) underneath, so bmm keeps a
            // copy; under autocast a bf16 copy of each fp32 operand instead.
            if g.k {
                t.push(c.term(if ac { format!("rope(Q) cast to {} (the scores bmm keeps it)", c.low_name) } else { "rope(Q) folded for the scores bmm (a copy unless B or S is 1; bmm keeps it)".into() }, "clone", qu, if ac { 2 } else { ty.qk }));
            }
            k_own = repeated || ac || !cache;
            if k_own && g.q {
                let what = match (repeated, ac) {
                    (true, true) => format!("{kname}, cast to {} (the scores bmm keeps it)", c.low_name),
                    (true, false) => format!("{kname} (the scores bmm keeps it)"),
                    (false, true) => format!("rope(K) cast to {} (the scores bmm keeps it)", c.low_name),
                    (false, false) => "rope(K) folded for the scores bmm (a copy unless B or S is 1; bmm keeps it)".into(),
                };
                t.push(c.term(what, "clone", ku, if ac { 2 } else { ty.qk }));
            }
            // softmax(dtype=float32) keeps its fp32 output; `.to(q.dtype)` makes the bf16
            // copy weights·V keeps in pure bf16, and under autocast (fp32 Q) the matmul's cast.
            // In fp32 weights·V keeps the softmax output itself for V's gradient.
            if scores || (g.v && c.mode == Mode::Fp32) {
                t.push(c.term("softmax(scores + mask, dtype=fp32) output (softmax keeps it)", "_softmax", Unit::S, 4));
            }
            match c.mode {
                Mode::Fp32 => {}
                _ if !g.v => {}
                Mode::Pure => t.push(c.term("attention weights .to(bf16) (weights·V keeps it)", "_to_copy", Unit::S, 2)),
                Mode::Autocast => t.push(c.term(format!("attention weights cast to {} (weights·V keeps it)", c.low_name), "_to_copy", Unit::S, 2)),
            }
            v_own = repeated || !cache || promoted;
            if v_own && scores && promoted {
                let what = if repeated { format!("the cache's fp32 V repeated to h heads (repeat_kv), cast to {} (weights·V keeps it)", c.low_name) } else { format!("the cache's fp32 V cast to {} (weights·V keeps it)", c.low_name) };
                t.push(c.term(what, "_to_copy", ku, 2));
            } else if v_own && scores {
                let what = if repeated { "V repeated to h heads (repeat_kv; weights·V keeps it)" } else { "V folded for weights·V (a copy unless B or S is 1; bmm keeps it)" };
                t.push(c.term(what, "clone", ku, ty.v));
            }
            if g.o_input {
                t.push(c.term("heads merged (transpose().contiguous(); o_proj keeps it)", "clone", qu, ty.lo));
            }
        }
        Kernel::Fused(backend) => {
            let name = match (hf.attn_implementation, backend) {
                (AttnImplementation::FlashAttention2, _) => "flash_attn_func",
                (_, SdpaBackend::Efficient) => "_scaled_dot_product_efficient_attention",
                (_, SdpaBackend::CpuFlash) => "_scaled_dot_product_flash_attention_for_cpu",
                _ => "_scaled_dot_product_flash_attention",
            };
            let low = if ac { 2 } else { ty.qk };
            // The kernel keeps q, k, v as given; under autocast SDPA's own casts of fp32 Q, K.
            k_own = repeated || ac || !cache;
            v_own = repeated || !cache || promoted;
            if any {
                t.push(c.term(if ac { format!("rope(Q) cast to {} (the kernel keeps it)", c.low_name) } else { "rope(Q) (the kernel keeps it)".into() }, if ac { "_to_copy" } else { "add" }, qu, low));
                if k_own {
                    let what = match (repeated, ac) {
                        (true, true) => format!("{kname}, cast to {} (the kernel keeps it)", c.low_name),
                        (true, false) => format!("{kname} (the kernel keeps it)"),
                        (false, true) if view_repeat => format!("rope(K) repeated to h heads (repeat_kv's view of one head), cast to {} (the kernel keeps it)", c.low_name),
                        (false, true) => format!("rope(K) cast to {} (the kernel keeps it)", c.low_name),
                        (false, false) => "rope(K) (the kernel keeps it)".into(),
                    };
                    let unit = if view_repeat && ac { qu } else { ku };
                    t.push(c.term(what, if repeated { "clone" } else if ac { "_to_copy" } else { "add" }, unit, low));
                }
                if v_own && promoted {
                    let what = match (repeated, view_repeat) {
                        (true, _) => format!("the cache's fp32 V repeated to h heads (repeat_kv), cast to {} (the kernel keeps it)", c.low_name),
                        (false, true) => format!("the cache's fp32 V repeated to h heads (repeat_kv's view of one head), cast to {} (the kernel keeps it)", c.low_name),
                        (false, false) => format!("the cache's fp32 V cast to {} (the kernel keeps it)", c.low_name),
                    };
                    t.push(c.term(what, "_to_copy", if view_repeat { qu } else { ku }, 2));
                } else if v_own && !repeated && phi3 {
                    // Phi-3's V is a view of the fused qkv_proj product: the kernel keeps it all.
                    t.push(c.term("qkv_proj output, its q rows (the kernel keeps V, a view of the whole product)", "mm", qu, ty.v));
                    t.push(c.term("qkv_proj output, its k rows", "mm", kvu, ty.v));
                    t.push(c.term("qkv_proj output, its v rows (V)", "mm", kvu, ty.v));
                } else if v_own {
                    let what = if repeated { "V repeated to h heads (repeat_kv; the kernel keeps it)" } else { "v_proj output (the kernel keeps it)" };
                    t.push(c.term(what, if repeated { "clone" } else { "mm" }, ku, ty.v));
                }
            }
            // empty_like(q): (B, S, h, d_h) underneath, so merging heads is a view (Phi-3's
            // copies, below: o_proj then keeps the copy, the kernel its output only when it
            // has a node).
            let merge_copies = phi3 && backend != SdpaBackend::Efficient;
            if any || (g.o_input && !merge_copies) {
                t.push(c.term("attention output (o_proj keeps it too)", name, qu, low));
            }
            if merge_copies && g.o_input {
                // Phi-3's rope(Q) is a cat's output, contiguous as (B, h, S, d_h), and so is
                // the flash kernels' empty_like(q): merging heads (transpose().contiguous())
                // copies. The memory-efficient kernel writes (B, S, h, d_h) whatever q is.
                t.push(c.term("heads merged (a copy: the output is (B, h, S, d_h) like Phi-3's rope cat; o_proj keeps it)", "clone", qu, low));
            }
            if any {
                let (rows, formula) = if backend == SdpaBackend::Efficient { (c.s.div_ceil(32) * 32, "B·h·⌈S/32⌉·32") } else { (c.s, "B·h·S") };
                t.push(c.small("attention logsumexp (fp32)", name, formula, c.b * c.h * rows, 4));
                if hf.sdpa_masked(c.s as usize) {
                    // convert_boolean_attn_mask: where(mask, 0, -inf) at (B, 1, S, S) in the
                    // query's dtype, saved by the kernel's node; CUDA's memory-efficient kernel
                    // first pads the keys to a multiple of 16 (preprocess_mask's pad_bias, a
                    // copy; [`check`] lets it through for Gemma 3 only).
                    if backend == SdpaBackend::Efficient {
                        t.push(c.small("sdpa's float mask, keys padded to 16 (convert_boolean_attn_mask, pad_bias; the kernel keeps it)", "where", "B·S·⌈S/16⌉·16", c.b * c.s * c.s.div_ceil(16) * 16, low));
                    } else {
                        t.push(c.small("sdpa's float mask (convert_boolean_attn_mask; the kernel keeps it)", "where", "B·S²", c.b * c.s * c.s, low));
                    }
                }
            }
        }
        Kernel::Math => {
            // fp32 and pure bf16 only ([`check`]): bf16 inputs are upcast to fp32 copies; GQA
            // is repeated inside (repeat_interleave); q and kᵀ are each scaled (new tensors the
            // scores bmm keeps); softmax keeps its output; weights·V keeps V in fp32.
            if g.k {
                t.push(c.term("Q·√scale in fp32 (the scores bmm keeps it, folded contiguous)", "mul", qu, 4));
            }
            if g.q {
                t.push(c.term("Kᵀ·√scale in fp32, h heads (the scores bmm keeps it)", "mul", qu, 4));
            }
            if any {
                t.push(c.term("softmax(scores + causal mask) (fp32; softmax keeps it)", "_softmax", Unit::S, 4));
            }
            let v_fp32_same = c.mode == Mode::Fp32 && (n_rep <= 1 || repeated);
            v_own = !(v_fp32_same && cache && !repeated);
            k_own = true;
            if v_own && scores {
                let what = match (n_rep > 1, repeated, c.mode == Mode::Pure) {
                    (true, false, _) => "V repeat_interleave'd to h heads in fp32 (weights·V keeps it)",
                    (true, true, true) => "V repeated (repeat_kv), upcast to fp32 (weights·V keeps it)",
                    (true, true, false) => "V repeated to h heads (repeat_kv; weights·V keeps it)",
                    (false, _, true) => "V upcast to fp32 (weights·V keeps it)",
                    (false, _, false) => "V folded for weights·V (a copy unless B or S is 1; bmm keeps it)",
                };
                let unit = if n_rep > 1 { qu } else { kvu };
                t.push(c.term(what, "clone", unit, 4));
            }
            if g.o_input {
                t.push(c.term("heads merged (output cast back, transpose().contiguous(); o_proj keeps it)", "clone", qu, ty.model));
            }
        }
    }
    if cache {
        // DynamicLayer.update: cat([k]) / cat([v]) on the first call, copies the attention
        // then reads. The cache holds them until the output is dropped.
        let shared = |own: bool| if own { "" } else { "; the attention keeps the same tensor" };
        t.push(c.term(format!("DynamicCache keys (cat copy of rope(K){})", shared(k_own)), "cat", kvu, ty.qk));
        let values = if promoted { format!("DynamicCache values (cat of V promoted to the keys' fp32{})", shared(v_own)) } else { format!("DynamicCache values (cat copy of V{})", shared(v_own)) };
        t.push(c.term(values, "cat", kvu, if promoted { ty.qk } else { ty.v }));
        if hf.sliding_window.is_some() && hf.gemma.is_none() {
            // (Gemma's are counted outside, one per sliding layer.)
            // DynamicSlidingWindowLayer.lazy_initialization moves its 0-d int64 window tensor
            // to the device at the layer's first update; the cache keeps it.
            t.push(Term { what: "DynamicSlidingWindowLayer's window tensor (0-d int64 on the device)".into(), op: "_to_copy", formula: "1·8".into(), unit: Unit::Small, elements: 1, elem: 8 });
        }
    }
}

/// peft's LoRA `Linear.forward` on projection `name` (its input `unit`-sized, needing a
/// gradient when `x_grad`), past the frozen base matmul (which keeps only its weight):
/// `x.to(fp32)` (a copy over bf16 weights), dropout (a bool mask kept for x's gradient when
/// p > 0), `lora_A` keeping its input, `lora_B` keeping A's (B, S, r) output, then the scaled
/// sum (`mul` by a number and `add` keep nothing). Under fp32 weights with no dropout
/// `lora_A` keeps the projection's input itself, counted where it is made. Under autocast
/// `lora_A` is an autocast op: it keeps its own low-precision cast of what it reads (the fp32
/// input, its dropout, or the fp32 copy of a low-precision input, which dies with forward),
/// and A's output is low-precision; the adapters' casts are cached (leaves that need a
/// gradient), the frozen weights' are not (each dies after its matmul).
/// The gated MLP's factors `act(gate_proj(x)) * up_proj(x)` keeps, in the order they are made:
/// the activation keeps its input (the gate projection's output) and the product each factor for
/// the other's gradient — the gate side's when `gate` needs a gradient, `act(gate)` when `up`
/// does. `act` is (its name, its aten op).
fn gated_mlp_factors(c: &Ctx, t: &mut Vec<Term>, gate: bool, up: bool, act: (&str, &'static str), lo: u64) {
    if gate {
        t.push(c.term(format!("gate_proj output ({} keeps its input)", act.0), "mm", Unit::F, lo));
    }
    if up {
        t.push(c.term(format!("{}(gate)", act.0), act.1, Unit::F, lo));
    }
    if gate {
        t.push(c.term("up_proj output", "mm", Unit::F, lo));
    }
}

fn adapter(c: &Ctx, t: &mut Vec<Term>, lc: &LoraConfig, name: &str, unit: Unit, x_grad: bool) {
    adapter_on(c, t, lc, name, &|what: String, op, elem| c.term(what, op, unit, elem), x_grad);
}

/// What peft's `DoraLinearLayer.forward` (dense weight, no dropout: the base output reused)
/// adds to a projection's saved tensors, on top of LoRA's (lora_A keeps x, lora_B A's output):
/// `magnitude / weight_norm` keeps the (detached) row norms; `(mag_norm_scale - 1) * base`
/// keeps the base output (minus its bias: a copy of the same size) for the magnitude's
/// gradient, and `mag_norm_scale - 1` when the base output needs a gradient (`base_grad`: its
/// input does, or its bias trains);
/// `mag_norm_scale * lora_result` keeps both. The eye, the dense update, the weight's fp32
/// copy and its sum die with the forward (`lora_weight` is used detached only). Only for the
/// llama family in fp32 and pure 2-byte weights ([`check_adapters`]): the norms, scales and
/// lora_result are in the adapters' fp32, the base output in the weights' type.
fn dora_terms(c: &Ctx, t: &mut Vec<Term>, lc: &LoraConfig, hf: &HfConfig, name: &str, x_grad: bool) {
    if !lc.use_dora {
        return;
    }
    let base_grad = x_grad || bias_trains(hf, name);
    let (unit, formula, out) = match name {
        "q_proj" => (heads_unit(c, c.h), "h·d_h", c.h * c.dk),
        "k_proj" | "v_proj" => (heads_unit(c, c.kvh), "h_kv·d_h", c.kvh * c.dk),
        "gate_proj" | "up_proj" => (Unit::F, "F", c.f),
        _ => (Unit::A, "d", c.d),
    };
    let lo = if c.mode == Mode::Pure { 2 } else { 4 };
    t.push(c.small(&format!("{name} DoRA weight_norm, (out,) fp32 (magnitude / weight_norm keeps it)"), "linalg_vector_norm", formula, out, 4));
    t.push(c.small(&format!("{name} DoRA mag_norm_scale, (1, out) fp32 (its product with lora_result keeps it)"), "div", formula, out, 4));
    if base_grad {
        t.push(c.small(&format!("{name} DoRA mag_norm_scale − 1, (1, out) fp32 (its product with the base output keeps it)"), "add", formula, out, 4));
    }
    t.push(c.term(format!("{name} base output (DoRA's (mag_norm_scale − 1)·base keeps it)"), "mm", unit, lo));
    t.push(c.term(format!("{name} DoRA lora_result = lora_B(lora_A(x)) in fp32 (mag_norm_scale·lora_result keeps it)"), "mm", unit, 4));
}

/// [`adapter`] on an input whose terms `input(what, op, elem)` makes (an MoE block's sizes).
fn adapter_on(c: &Ctx, t: &mut Vec<Term>, lc: &LoraConfig, name: &str, input: &dyn Fn(String, &'static str, u64) -> Term, x_grad: bool) {
    let dropout = lc.dropout > 0.0;
    if dropout && x_grad {
        t.push(input(format!("{name} lora_dropout mask (bool; dropout keeps it)"), "native_dropout", 1));
    }
    // peft casts the input to the adapters' fp32 (dropout runs on that copy), and under
    // autocast lora_A casts it to the low type, which it keeps: over fp32 or bf16 weights.
    let autocast = c.mode == Mode::Autocast || c.pure_autocast;
    if autocast {
        let what = if dropout { "lora_dropout output" } else { "input" };
        t.push(input(format!("{name} {what} cast to {} (lora_A keeps it)", c.low_name), "_to_copy", 2));
    } else if dropout {
        t.push(input(format!("{name} lora_dropout output in fp32 (lora_A keeps it)"), "native_dropout", 4));
    } else if c.mode == Mode::Pure {
        t.push(input(format!("{name} input .to(fp32) (lora_A keeps it)"), "_to_copy", 4));
    }
    // fp32 (the adapters' type, bf16 weights or not), low-precision under autocast.
    let a_elem = if autocast { 2 } else { 4 };
    t.push(c.small(&format!("{name} lora_A output (lora_B keeps it)"), "mm", "B·S·r", c.b * c.s * lc.r as u64, a_elem));
}

/// Under autocast a frozen weight's low-precision cast is not cached (only leaves that need
/// a gradient are), but the matmul keeps it for its input's gradient: one per projection
/// whose input needs one. `name` has `rows` × `cols` (`formula`).
fn frozen_cast(c: &Ctx, t: &mut Vec<Term>, name: &str, formula: &str, elements: u64) {
    if c.mode == Mode::Autocast {
        t.push(c.small(&format!("{name} weight cast to {} (uncached: frozen; the matmul keeps it for its input's gradient)", c.low_name), "_to_copy", formula, elements, 2));
    }
}

/// Whether projection `p`'s bias trains under peft's `bias` (`all`: every `*.bias`;
/// `lora_only`: an adapted module's): its output then needs a gradient even where its input
/// needs none and its weight is frozen (addmm's bias gradient keeps nothing).
pub(super) fn bias_trains(hf: &HfConfig, p: &str) -> bool {
    let has = match p {
        "q_proj" | "k_proj" | "v_proj" => hf.qkv_bias,
        "o_proj" => hf.o_bias,
        _ => hf.mlp_bias,
    };
    has && hf.lora.as_ref().is_some_and(|l| l.trains_bias(p))
}

/// One decoder layer without checkpointing, in forward order; `x_grad`: whether its input
/// needs a gradient (always in full fine-tuning; under peft, not layer 0's: the embedding is
/// frozen).
fn layer(c: &Ctx, cfg: &ModelConfig, hf: &HfConfig, kernel: Kernel, cache: bool, x_grad: bool) -> Vec<Term> {
    let ty = types(c, hf);
    let mut t = Vec::new();
    let rows = ("B·S", c.b * c.s);
    let lora = hf.lora.as_ref();
    // A projection's output needs a gradient when its input does or it trains (its weight in
    // full fine-tuning; under peft its adapter or its bias).
    // Phi-3's fused linears (peft wraps them whole): q/k/v are qkv_proj, gate/up gate_up_proj.
    let phi3 = hf.model_type == Arch::Phi3;
    let module = |p: &str| -> String {
        match p {
            "q_proj" | "k_proj" | "v_proj" if phi3 => "qkv_proj".into(),
            "gate_proj" | "up_proj" if phi3 => "gate_up_proj".into(),
            _ => p.into(),
        }
    };
    let trains = |p: &str| lora.is_none_or(|l| l.targets(&module(p))) || bias_trains(hf, p);
    let adapted = |p: &str| lora.is_some_and(|l| l.targets(&module(p)));
    // Under peft with fp32 weights and no dropout, lora_A keeps the projection's input itself.
    let a_keeps_input = |p: &str| lora.is_none_or(|l| l.targets(&module(p)) && l.dropout == 0.0 && c.mode == Mode::Fp32);
    // LLM.int8()'s MatMul8bitLt keeps its input (a view of it) for the input's gradient:
    // the frozen base matmul then keeps what a full fine-tune's would.
    let int8 = hf.bnb.as_ref().is_some_and(|q| q.int8().is_some());
    let frozen_norm = |input: bool, readers: &[&str]| match lora {
        None => FULL,
        // (An MoE layer's post-attention norm feeds no 8-bit linear: the router and experts stay unquantized.)
        Some(_) => NormGrad { input, weight: false, output: (int8 && input && !readers.is_empty()) || readers.iter().any(|r| a_keeps_input(r)), product_fp32: false },
    };
    let xg = lora.is_none() || x_grad;
    let qkv = ["q_proj", "k_proj", "v_proj"];
    // Phi-3's fused linears read each norm's output once (one autocast copy each).
    let qkv_readers: &[&str] = if phi3 { &["qkv_proj"] } else { &qkv };
    rms_norm(c, &mut t, "input_layernorm", Unit::A, ty.model, rows, qkv_readers, frozen_norm(xg, &qkv));
    let (q, k, v) = (xg || trains("q_proj"), xg || trains("k_proj"), xg || trains("v_proj"));
    let (qw, kvw) = (c.h * c.dk * c.d, c.kvh * c.dk * c.d);
    if lora.is_some() && xg && phi3 {
        frozen_cast(c, &mut t, "qkv_proj", "(h + 2h_kv)·d_h·d", qw + 2 * kvw);
    } else if lora.is_some() && xg {
        frozen_cast(c, &mut t, "q_proj", "h·d_h·d", qw);
        frozen_cast(c, &mut t, "k_proj", "h_kv·d_h·d", kvw);
        frozen_cast(c, &mut t, "v_proj", "h_kv·d_h·d", kvw);
    }
    if let Some(lc) = lora {
        for p in qkv_readers.iter().copied().filter(|p| adapted(p)) {
            adapter(c, &mut t, lc, p, Unit::A, xg);
            dora_terms(c, &mut t, lc, hf, p, xg);
        }
    }
    if hf.model_type == Arch::Qwen3 {
        // q_norm / k_norm on the (B, S, h, d_h) views of the projections, before RoPE.
        let (qu, kvu) = (heads_unit(c, c.h), heads_unit(c, c.kvh));
        let g = |input| if lora.is_some() { NormGrad { input, weight: false, output: false, product_fp32: false } } else { FULL };
        rms_norm(c, &mut t, "q_norm", qu, ty.lo, ("B·S·h", c.b * c.s * c.h), &[], g(q));
        rms_norm(c, &mut t, "k_norm", kvu, ty.lo, ("B·S·h_kv", c.b * c.s * c.kvh), &[], g(k));
    }
    // RoPE multiplies by cos/sin, which need no gradient: the products keep cos/sin (counted
    // once, outside), not the projections. Biases need nothing kept.
    attention(c, &mut t, cfg, hf, kernel, cache, AttnGrad { q, k, v, o_input: a_keeps_input("o_proj") || (int8 && (q || k || v)) });
    let o = q || k || v || trains("o_proj");
    if lora.is_some() && (q || k || v) {
        frozen_cast(c, &mut t, "o_proj", "d·h·d_h", qw);
    }
    if let Some(lc) = lora.filter(|_| adapted("o_proj")) {
        adapter(c, &mut t, lc, "o_proj", heads_unit(c, c.h), q || k || v);
        dora_terms(c, &mut t, lc, hf, "o_proj", q || k || v);
    }
    let h = xg || o;
    if c.mode != Mode::Pure && h {
        t.push(c.term("h = x + attention (post_attention_layernorm keeps it)", "add", Unit::A, 4));
    }
    let gate_up = ["gate_proj", "up_proj"];
    let gate_up_readers: &[&str] = match &hf.moe {
        Some(m) => moe::norm_readers(m),
        None if phi3 => &["gate_up_proj"],
        None => &gate_up,
    };
    // The linears whose LoRA may keep the norm's output: Qwen2-MoE's shared expert's (the
    // router and the routed experts take no module adapter).
    let adaptable: &[&str] = match &hf.moe {
        Some(m) if m.shared_intermediate > 0 => &["gate_proj", "up_proj", "shared_expert_gate"],
        Some(_) => &[],
        None => &gate_up,
    };
    let mut post_norm = frozen_norm(h, adaptable);
    // peft's ParamWrapper on the router: its linear keeps its input for the fold's gradient
    // (under autocast its own cast of it: moe::block).
    post_norm.output |= lora.is_some_and(|l| l.targets_router()) && c.mode != Mode::Autocast;
    rms_norm(c, &mut t, "post_attention_layernorm", Unit::A, ty.model, rows, gate_up_readers, post_norm);
    if let Some(m) = &hf.moe {
        // The sparse block in place of the MLP (under peft: LoRA on the shared expert only).
        moe::block(c, &mut t, hf, m, h);
        if c.mode != Mode::Pure {
            t.push(c.term("layer output = h + moe block (the next norm keeps it)", "add", Unit::A, 4));
        }
        return t;
    }
    if lora.is_some() && h && phi3 {
        frozen_cast(c, &mut t, "gate_up_proj", "2F·d", 2 * c.f * c.d);
    } else if lora.is_some() && h {
        frozen_cast(c, &mut t, "gate_proj", "F·d", c.f * c.d);
        frozen_cast(c, &mut t, "up_proj", "F·d", c.f * c.d);
    }
    if let Some(lc) = lora {
        for p in gate_up_readers.iter().copied().filter(|p| adapted(p)) {
            adapter(c, &mut t, lc, p, Unit::A, h);
            dora_terms(c, &mut t, lc, hf, p, h);
        }
    }
    let (gate, up) = (h || trains("gate_proj"), h || trains("up_proj"));
    gated_mlp_factors(c, &mut t, gate, up, ("silu", "silu"), ty.lo);
    if a_keeps_input("down_proj") || (int8 && (gate || up)) {
        t.push(c.term("silu·up (input of down_proj)", "mul", Unit::F, ty.lo));
    }
    if lora.is_some() && (gate || up) {
        frozen_cast(c, &mut t, "down_proj", "d·F", c.d * c.f);
    }
    if let Some(lc) = lora.filter(|_| adapted("down_proj")) {
        adapter(c, &mut t, lc, "down_proj", Unit::F, gate || up);
        dora_terms(c, &mut t, lc, hf, "down_proj", gate || up);
    }
    if c.mode != Mode::Pure && (h || gate || up || trains("down_proj")) {
        // In pure bf16 the bf16 residual is read only by the norms' upcasts and the adds.
        t.push(c.term("layer output = h + mlp (the next norm keeps it)", "add", Unit::A, 4));
    }
    t
}

pub(super) fn terms(c: &Ctx, cfg: &ModelConfig, hf: &HfConfig, precision: Precision) -> Terms {
    if let Some((m, g)) = hf.moe.as_ref().and_then(|m| m.gpt_oss.as_ref().map(|g| (m, g))) {
        return gpt_oss::terms(c, cfg, hf, m, g);
    }
    let hf = &gemma::trimmed(hf, cfg.num_layers);
    let ty = types(c, hf);
    let s = c.s as usize;
    let kernel = kernel(cfg, hf, precision, s);
    let checkpointing = cfg.checkpoint != Checkpoint::None;
    // Checkpointed layers (training mode) turn the cache off; otherwise use_cache builds it.
    let cache = hf.use_cache && !checkpointing;
    // Qwen2-MoE's use_sliding_window: its full layers see no window (moe::full_layer_hf).
    let window = moe::window_layers(hf);
    let full_hf = window.map(|_| moe::full_layer_hf(hf));
    let block = if checkpointing {
        // Non-reentrant and reentrant alike keep only each layer's input (layer 0's is the
        // embedding output); everything else is recomputed in backward.
        let mut b = vec![c.term("layer input (the checkpoint keeps it; layer 0's is the embedding output)", "add", Unit::A, ty.model)];
        if !hf.reentrant && hf.bnb.as_ref().is_some_and(|q| q.int8().is_some()) {
            int8_checkpointed(c, &mut b, hf, ty.model);
        }
        b
    } else if hf.model_type == Arch::Olmo2 {
        olmo2::layer(c, cfg, hf, kernel, cache, true)
    } else if let Some(g) = hf.gemma.as_ref().filter(|_| hf.model_type == Arch::Gemma3Text) {
        // The full layers' (or every layer's, where no mask sets the sliding ones apart).
        let lh = gemma3::layer_hf(hf, gemma3::masked(hf, g, !g.sliding.contains(&false), s));
        gemma::layer(c, cfg, &lh, self::kernel(cfg, &lh, precision, s), cache, true)
    } else if hf.model_type == Arch::Gemma2 {
        gemma::layer(c, cfg, hf, kernel, cache, true)
    } else if let Some((m, ds)) = deepseek_parts(hf) {
        deepseek::layer(c, hf, m, ds, true, cache, kernel, true)
    } else if let Some(fh) = &full_hf {
        layer(c, cfg, fh, self::kernel(cfg, fh, precision, s), cache, true)
    } else {
        layer(c, cfg, hf, kernel, cache, true)
    };
    // Gemma 3's sliding layers where the window's mask reaches their kernel.
    let sliding_block = hf.gemma.as_ref().filter(|g| !checkpointing && hf.model_type == Arch::Gemma3Text && g.sliding.contains(&false) && gemma3::masked(hf, g, true, s)).map(|g| {
        let lh = gemma3::layer_hf(hf, true);
        let layers = g.sliding.iter().enumerate().filter(|(_, s)| **s).map(|(i, _)| i).collect();
        (layers, gemma::layer(c, cfg, &lh, self::kernel(cfg, &lh, precision, s), cache, true), super::OtherLayers::Sliding)
    });
    // DeepSeek-V3's first_k_dense_replace layers (checkpointed, every layer keeps its input only).
    // peft's ParamWrapper without module adapters trains nothing in them: none of their inputs
    // needs a gradient, nor the first sparse layer's (`first_block`, at that layer).
    let lora = hf.lora.is_some();
    // peft's modules_to_save: forward runs a trainable copy of the module (ModulesToSaveWrapper;
    // the original stays, frozen). The embedding's copy makes its output need a gradient, so
    // layer 0 keeps what every layer keeps; lm_head's keeps its input for its weight's gradient.
    let (embed_trains, head_trains) = match hf.lora.as_ref() {
        Some(l) => (l.saves("embed_tokens"), l.saves("lm_head")),
        None => (false, false),
    };
    let frozen_dense = !checkpointing && !embed_trains && hf.lora.as_ref().is_some_and(|l| l.targets.is_empty()) && deepseek_parts(hf).is_some_and(|(_, ds)| ds.first_k_dense > 0);
    let sliding_block = sliding_block.or_else(|| {
        let (m, ds) = deepseek_parts(hf).filter(|(_, ds)| !checkpointing && ds.first_k_dense > 0)?;
        let layers = (0..ds.first_k_dense.min(cfg.num_layers)).collect();
        Some((layers, deepseek::layer(c, hf, m, ds, false, cache, kernel, !frozen_dense), super::OtherLayers::Dense))
    });
    // Qwen2-MoE's sliding layers (the window's mask, and with the cache a
    // DynamicSlidingWindowLayer and its window tensor).
    let sliding_block = sliding_block.or_else(|| {
        let layers: Vec<usize> = window.filter(|_| !checkpointing)?.iter().enumerate().filter(|(_, s)| **s).map(|(i, _)| i).collect();
        (!layers.is_empty()).then(|| (layers, layer(c, cfg, hf, kernel, cache, true), super::OtherLayers::Sliding))
    });
    // Under peft layer 0's input (the frozen embedding's output) needs no gradient: what its
    // ops keep for it alone is not kept. Checkpointed layers keep their input either way.
    let first_layer = match deepseek_parts(hf) {
        Some((_, ds)) if frozen_dense && ds.first_k_dense < cfg.num_layers => ds.first_k_dense,
        _ => 0,
    };
    let first_block = (lora && !checkpointing && !embed_trains).then(|| match hf.gemma.as_ref() {
        // Gemma: layer 0's type decides its kernel (Gemma 3's sliding layers may see a mask).
        Some(g) => {
            let lh = if hf.model_type == Arch::Gemma3Text { gemma3::layer_hf(hf, gemma3::masked(hf, g, g.sliding[0], s)) } else { hf.clone() };
            gemma::layer(c, cfg, &lh, self::kernel(cfg, &lh, precision, s), cache, false)
        }
        // DeepSeek-V3: layer 0 is dense unless first_k_dense_replace is 0.
        None => match deepseek_parts(hf) {
            Some((m, ds)) => deepseek::layer(c, hf, m, ds, ds.first_k_dense == first_layer, cache, kernel, false),
            None if hf.model_type == Arch::Olmo2 => olmo2::layer(c, cfg, hf, kernel, cache, false),
            // Qwen2-MoE's window: layer 0's type decides.
            None => match full_hf.as_ref().filter(|_| window.is_some_and(|w| !w[0])) {
                Some(fh) => layer(c, cfg, fh, self::kernel(cfg, fh, precision, s), cache, false),
                None => layer(c, cfg, hf, kernel, cache, false),
            },
        },
    });
    let mut outside = Vec::new();
    let olmo2 = hf.model_type == Arch::Olmo2;
    let gemma = hf.model_type.is_gemma();
    // (OLMo-2's layers count their own input: layer 0's q/k/v_proj keep the embedding output.)
    if !checkpointing && c.mode != Mode::Pure && (!lora || embed_trains) && !olmo2 {
        outside.push(c.term("embedding output (layer 0's input_layernorm keeps it)", "embedding", Unit::A, 4));
    }
    // LlamaRotaryEmbedding: cos and sin (1, S, d_h) in the model's dtype, built once per
    // forward and shared by every layer's RoPE muls (or captured by checkpointed layers).
    // Gemma 3: a pair per layer type present, each shared by that type's layers.
    let pairs: Vec<&str> = match hf.gemma.as_ref().filter(|_| hf.model_type == Arch::Gemma3Text) {
        Some(g) => g.types().into_iter().map(|sliding| if sliding { " of the sliding layers (rope_local_base_freq)" } else { " of the full layers" }).collect(),
        None => vec![""],
    };
    // Under peft without module adapters the first layer that trains (layer 0, or DeepSeek-V3's
    // first sparse layer) keeps nothing for its RoPE: with no layer after it nothing keeps cos/sin.
    let rope_kept = checkpointing || embed_trains || !hf.lora.as_ref().is_some_and(|l| l.targets.is_empty()) || first_layer + 1 < cfg.num_layers;
    for pair in pairs.into_iter().filter(|_| rope_kept) {
        for which in ["cos", "sin"] {
            // (Olmo2RotaryEmbedding returns them in fp32 whatever the model's dtype.)
            let elem = if olmo2 { 4 } else { ty.model };
            t_small(&mut outside, &format!("RoPE {which}{pair} (1, S, d_h), shared by every layer's RoPE (its muls or the checkpoints' closures keep it)"), if which == "cos" { "cos" } else { "sin" }, "S·d_h", c.s * c.dk, elem);
        }
    }
    if checkpointing {
        // The layers' kwargs live in each checkpoint's closure until its backward.
        t_small(&mut outside, "position_ids (1, S) int64 (the checkpoints' closures hold it)", "arange", "S", c.s, 8);
        match kernel {
            _ if hf.gemma.is_some() => gemma::checkpoint_masks(c, &mut outside, hf, hf.gemma.as_ref().expect("Gemma's fields"), ty.model),
            _ if window.is_some() => moe::window_checkpoint_masks(c, &mut outside, hf, window.expect("checked"), kernel, ty.model),
            Kernel::Eager => {
                outside.push(Term {
                        what: "eager additive mask (B, 1, S, S) in the model's dtype (the checkpoints' closures hold it)".into(),
                        op: "where",
                        formula: format!("B·S²·{}", ty.model),
                        unit: Unit::Small,
                        elements: c.b * c.s * c.s,
                        elem: ty.model,
                    });
            }
            _ if hf.sdpa_masked(s) => {
                let rows = if hf.attention_mask { c.b } else { 1 };
                let formula = if hf.attention_mask { "B·S²·1" } else { "S²·1" };
                outside.push(Term { what: "sdpa's boolean sliding-window mask (the checkpoints' closures hold it)".into(), op: "logical_and", formula: formula.into(), unit: Unit::Small, elements: rows * c.s * c.s, elem: 1 });
            }
            _ => {}
        }
    }
    if (checkpointing || olmo2) && c.mode != Mode::Pure {
        outside.push(c.term("last layer's output (the final norm keeps it)", "add", Unit::A, 4));
    }
    // Under peft the final norm's weight and lm_head are frozen: lm_head keeps only its
    // weight, but `hidden_states` stays bound until the forward returns.
    // Under autocast lm_head's cast of the output is not kept; the fp32 output, bound, is below.
    // (A trained copy of lm_head keeps the output, under autocast its low cast, as in full fine-tuning.)
    let g = if lora { NormGrad { input: true, weight: false, output: c.mode != Mode::Autocast || head_trains, product_fp32: false } } else { NormGrad { product_fp32: olmo2, ..FULL } };
    if gemma {
        gemma::norm_with(c, &mut outside, "norm", ty.model, &["lm_head"], g);
    } else {
        rms_norm(c, &mut outside, "norm", Unit::A, ty.model, ("B·S", c.b * c.s), &["lm_head"], g);
    }
    if let Some(g) = hf.gemma.as_ref().filter(|_| cache) {
        // DynamicSlidingWindowLayer.lazy_initialization: each sliding layer's 0-d int64 window.
        let n = g.sliding.iter().filter(|s| **s).count() as u64;
        outside.push(Term { what: "DynamicSlidingWindowLayer window tensors, one per sliding layer (0-d int64)".into(), op: "_to_copy", formula: format!("{n}·8"), unit: Unit::Small, elements: n, elem: 8 });
    }
    if lora && !head_trains {
        frozen_cast(c, &mut outside, "lm_head", "V·d", c.v * c.d);
    }
    if c.mode == Mode::Autocast {
        // lm_head saves its low-precision cast; the fp32 output itself stays bound
        // (`hidden_states`, `outputs.last_hidden_state`) until LlamaForCausalLM.forward returns.
        outside.push(c.term("final norm output (fp32), bound until the forward returns", "mul", Unit::A, 4));
    }
    if let Some(m) = hf.moe.as_ref() {
        moe::router_logits(c, &mut outside, hf, m, cfg.num_layers);
    }
    let bsv = c.b * c.s * c.v;
    let logits = vocab("logits", "mm", "B·S", bsv, ty.lo);
    // ForCausalLMLoss: logits.float() (itself in fp32), labels padded with −100 and shifted
    // (no logits slice: all S rows), cross_entropy's fp32 log_softmax kept for backward.
    let mut loss = vec![vocab("log_softmax of logits.float(), all S rows (labels padded, shifted; cross_entropy keeps it)", "_log_softmax", "B·S", bsv, 4)];
    if ty.lo != 4 {
        loss.push(vocab("logits.float() (an fp32 copy, dies when the loss function returns)", "_to_copy", "B·S", bsv, 4));
    }
    if hf.gemma.as_ref().is_some_and(|g| g.final_logit_softcapping.is_some()) {
        // final_logit_softcapping after lm_head (logits / c, tanh, · c; the logits above are
        // the capped ones): tanh keeps its output until the loss's backward.
        loss.push(vocab("tanh(logits / final_logit_softcapping) (tanh keeps its output)", "tanh", "B·S", bsv, ty.lo));
    }
    let (d, f, v, l) = (c.d, c.f, c.v, cfg.num_layers as u64);
    let (q, kv) = (c.h * c.dk, c.kvh * c.dk);
    let mut biases = 0;
    let mut bias_names = String::new();
    if hf.qkv_bias {
        biases += q + 2 * kv;
        bias_names.push_str(" + h·d_h + 2h_kv·d_h (q/k/v biases)");
    }
    if hf.o_bias {
        biases += d;
        bias_names.push_str(" + d (o_proj bias)");
    }
    if hf.mlp_bias {
        biases += 2 * f + d;
        bias_names.push_str(" + 2F + d (mlp biases)");
    }
    let (qk_norm, qk_norm_n) = match hf.model_type {
        Arch::Qwen3 | Arch::Gemma3Text => (" + 2d_h (q_norm, k_norm)", 2 * c.dk),
        Arch::Olmo2 => (" + h·d_h + h_kv·d_h (q_norm, k_norm over the whole projections)", q + kv),
        _ => ("", 0),
    };
    let head = if cfg.tied_embeddings { "" } else { " + V·d (lm_head)" };
    // Gemma: four norms per layer.
    let (norms, norms_n) = if gemma { ("4d", 4 * d) } else { ("2d", 2 * d) };
    let param_formula = match &hf.moe {
        Some(m) if m.deepseek.is_some() => deepseek::param_formula(cfg, m.deepseek.as_ref().expect("checked")),
        Some(m) => moe::param_formula(cfg, hf, m, &bias_names, qk_norm, biases + qk_norm_n),
        None => {
            debug_assert_eq!(
                cfg.param_count(),
                v * d * if cfg.tied_embeddings { 1 } else { 2 } + l * (2 * d * q + 2 * d * kv + biases + 3 * d * f + norms_n + qk_norm_n) + d
            );
            format!("V·d (embedding){head} + L·(2d·h·d_h + 2d·h_kv·d_h{bias_names} + 3d·F + {norms}{qk_norm}) + d")
        }
    };
    // F.linear casts weight and bias under autocast; norm weights meet only muls. An MoE
    // layer's linears are the attention's, the router's and Qwen2-MoE's shared expert's (and
    // its gate): grouped_mm, not an autocast op, reads the experts in their fp32.
    let mlp_cast = match &hf.moe {
        Some(m) => m.experts as u64 * d + if m.shared_intermediate > 0 { 3 * d * m.shared_intermediate as u64 + d } else { 0 },
        None => 3 * d * f,
    };
    let cast_elements = l * (2 * d * q + 2 * d * kv + mlp_cast + biases) + v * d;
    let head_w = if cfg.tied_embeddings { "V·d (the tied embedding, read by lm_head)" } else { "V·d (lm_head)" };
    let bias_cast = if biases > 0 { " + biases" } else { "" };
    let mlp_w = match &hf.moe {
        Some(m) if m.shared_intermediate > 0 => "E·d (router) + 3d·I_s + d (shared expert, its gate)",
        Some(_) => "E·d (router)",
        None => "3d·F",
    };
    let cast_formula = format!("2 B × (L·(2d·h·d_h + 2d·h_kv·d_h + {mlp_w}{bias_cast}) + {head_w}) = 2 × {cast_elements}");
    // DeepSeek-V3's latent attention and dense layers read other linears.
    let (cast_elements, cast_formula) = match deepseek_parts(hf) {
        Some((m, ds)) => deepseek::cast(cfg, m, ds),
        None => (cast_elements, cast_formula),
    };
    // Autocast caches only casts of leaves that need a gradient: under peft the adapters and
    // the biases that train; each frozen weight's cast dies after its matmul.
    let (cast_elements, cast_formula) = if lora {
        // (The experts' ParamWrapper adapters meet no autocast op: moe::uncast_expert_adapters.)
        // (A trained lm_head copy is a leaf that needs a gradient: its cast is cached. The
        // embedding lookup is no autocast op.)
        let head = if head_trains { c.v * c.d } else { 0 };
        let n = cfg.lora_param_count() + cfg.lora_bias_count() + head - moe::uncast_expert_adapters(cfg);
        let biases = match (cfg.lora_bias_count() > 0, head_trains) {
            (true, true) => ", the biases that train and lm_head's trainable copy",
            (true, false) => " and the biases that train",
            (false, true) => " and lm_head's trainable copy (V·d)",
            (false, false) => "",
        };
        if olmo2 && checkpointing && !embed_trains {
            // enable_input_require_grads makes the frozen embedding's output a leaf that needs a
            // gradient: OLMo-2's layer 0 projections read it directly, and its cast is cached.
            let n = n + c.b * c.s * c.d;
            (n, format!("2 B × (the LoRA adapters' A and B{biases} + B·S·d: the embedding output, a leaf under checkpointing, read by layer 0's q/k/v_proj) = 2 × {n}"))
        } else {
            (n, format!("2 B × (the LoRA adapters' A and B{biases}) = 2 × {n}"))
        }
    } else {
        (cast_elements, cast_formula)
    };
    Terms { block, first_block, first_layer, sliding_block, outside, logits, loss, param_formula, cast_elements, cast_formula }
}

/// MatMul8bitLt keeps its input as a ctx attribute, not a saved tensor: the non-reentrant
/// checkpoint's saved-tensor hooks never see it, so each 8-bit projection's input outlives the
/// forward (q/k/v share theirs, gate/up theirs; OLMo-2's q/k/v read the layer input, which the
/// checkpoint keeps already; an MoE layer's 8-bit linears are its attention's).
pub(super) fn int8_checkpointed(c: &Ctx, b: &mut Vec<Term>, hf: &HfConfig, model: u64) {
    let why = "(MatMul8bitLt's ctx keeps it, out of the non-reentrant checkpoint's reach)";
    let attention_only = hf.moe.is_some();
    let (qkv_in, mlp_in, act) = match hf.model_type {
        Arch::Olmo2 => (None, "h = x + post_attention_layernorm(attention)", "silu"),
        Arch::Gemma2 | Arch::Gemma3Text => (Some("input_layernorm"), "pre_feedforward_layernorm output", "gelu"),
        _ => (Some("input_layernorm"), "post_attention_layernorm output", "silu"),
    };
    if let Some(norm) = qkv_in {
        b.push(c.term(format!("{norm} output, q/k/v_proj's input {why}"), "mul", Unit::A, model));
    }
    b.push(c.term(format!("attention output, o_proj's input {why}"), "clone", heads_unit(c, c.h), model));
    if attention_only {
        return; // An MoE layer's 8-bit linears are the attention's (gpt-oss's: hf/gpt_oss.rs).
    }
    b.push(c.term(format!("{mlp_in}, gate/up_proj's input {why}"), if hf.model_type == Arch::Olmo2 { "add" } else { "mul" }, Unit::A, model));
    b.push(c.term(format!("{act}·up, down_proj's input {why}"), "mul", Unit::F, model));
}

/// DeepSeek-V3's MoE options and its own parts.
fn deepseek_parts(hf: &HfConfig) -> Option<(&crate::model::hf::moe::MoeConfig, &crate::model::hf::deepseek_v3::DeepseekParts)> {
    hf.moe.as_ref().and_then(|m| m.deepseek.as_ref().map(|ds| (m, ds)))
}

fn t_small(t: &mut Vec<Term>, what: &str, op: &'static str, formula: &str, elements: u64, elem: u64) {
    t.push(Term { what: what.into(), op, formula: format!("{formula}·{elem}"), unit: Unit::Small, elements, elem });
}

/// The kernel's name for the printed header.
pub fn kernel_name(hf: &HfConfig, k: Kernel) -> String {
    match k {
        Kernel::Eager => "eager".into(),
        Kernel::Math => "sdpa, math backend".into(),
        Kernel::Fused(_) if hf.attn_implementation == AttnImplementation::FlashAttention2 => "flash_attention_2".into(),
        Kernel::Fused(b) => format!("sdpa, {b} kernel"),
    }
}

/// The kernels of a run for the printed header: Gemma 3's per layer type where they differ.
pub fn kernels_name(cfg: &ModelConfig, hf: &HfConfig, precision: Precision, s: usize) -> String {
    let hf = &gemma::trimmed(hf, cfg.num_layers);
    match hf.gemma.as_ref().filter(|_| hf.model_type == Arch::Gemma3Text) {
        Some(g) => {
            let ks = gemma3::kernels(cfg, hf, g, precision, s);
            if ks.windows(2).all(|w| w[0].1 == w[1].1) {
                return kernel_name(hf, ks[0].1);
            }
            let each = ks.iter().map(|(sliding, k)| format!("{} layers {}", if *sliding { "sliding" } else { "full" }, kernel_name(hf, *k)));
            each.collect::<Vec<_>>().join(", ") + " (the window's mask)"
        }
        None => kernel_name(hf, kernel(cfg, hf, precision, s)),
    }
}
