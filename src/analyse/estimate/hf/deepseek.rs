//! DeepSeek-V3 in closed form: transformers 5.23's `DeepseekV3DecoderLayer` as
//! src/model/hf/deepseek_v3_5_23.rs runs it (itself exact against PyTorch in
//! tests/deepseek_grid.rs), in fp32, pure bf16, autocast over fp32 weights (bf16 or fp16) or
//! bf16 autocast over bf16 weights (pure bf16's terms save the router's, [`sparse_block`]). With
//! T = B·S tokens, h heads of d_n + d_r (q, k) and d_v (v), latent ranks r_q and r_kv, what
//! autograd keeps of a layer:
//! - multi-head latent attention: q_a_layernorm's input (q_a_proj's output, or its fp32 copy),
//!   r and x·r, and its output (q_b_proj keeps it; q_proj's output nothing: RoPE's muls keep
//!   cos/sin, the cat nothing); kv_a_layernorm's the same over the first r_kv columns of
//!   kv_a_proj_with_mqa's output (in fp32 `.to(fp32)` returns that view, so pow and x·r keep
//!   the whole (T, r_kv + d_r) product), its output (kv_b_proj keeps it, or the DynamicCache's
//!   cat copy in its place, with the cache's copy of the roped k_pe); then the kernel: eager's
//!   scores matmul keeps the query cat and the key built by `new_empty` and two `copy_`
//!   (contiguous (B, h, S, d_n + d_r): folding them is a view), softmax its fp32 output
//!   (with its bf16 copy in pure bf16), weights·V a contiguous copy of V (a strided view of
//!   kv_b_proj's output: a view when B or S is 1, which keeps that whole output); sdpa (v's
//!   head size unlike q's: the math composite) its scaled fp32 Q and Kᵀ, softmax's output and
//!   V in fp32; o_proj keeps the merged heads;
//! - the first `first_k_dense_replace` layers' dense MLP (F_d wide), the others' sparse block:
//!   the shared experts (a dense MLP of width n_shared·I), the sigmoid router (its fp32
//!   linear keeps the input's and the weight's fp32 copies in pure bf16, sigmoid its output,
//!   the gather of the chosen scores its int64 indices, norm_topk_prob's division its operands;
//!   the group-limited choice keeps nothing past the router), and the experts as moe.rs states
//!   them with fp32 routing weights.
//!
//! peft's LoRA on the latent attention's linears (q_a_proj, q_b_proj or q_proj,
//! kv_a_proj_with_mqa, kv_b_proj, o_proj; everything else frozen): a tensor is kept only where a
//! gradient flows, as in the dense layers (super::layer): layer 0's input needs none, the latent
//! norms keep no x·r, a frozen linear keeps no input, and the MLPs and the router keep only what
//! their input's gradient needs (not down_proj's input, nor the router's fp32 input copy).
//! peft's ParamWrapper on the sparse layers' router and routed experts (`--target-parameters`):
//! moe.rs's folds, the router's linear keeping its fold (fp32) or the fold's `.float()` copy and
//! its input's (pure bf16), under autocast its uncached casts of both, and the sparse block
//! keeping what the adapters need where its input needs no gradient (layer 0 when it is
//! sparse, or the first sparse layer when the dense ones before it train nothing).
use super::moe::{self, Sizes};
use super::{rms_norm, types, Kernel};
use crate::analyse::estimate::{sized, Ctx, Mode, Term, Unit};
use crate::model::hf::deepseek_v3::DeepseekParts;
use crate::model::hf::moe::MoeConfig;
use crate::model::hf::{AttnImplementation, HfConfig, SdpaBackend};
use crate::model::config::MAX_BYTES;
use crate::model::{ConfigError, ModelConfig};

/// Refuses a run whose latent-attention or dense-layer tensors could not be counted: the
/// largest (B·S·h·(d_n + max(d_r, d_v)), B·S·F_d, B·S·(r + d_r), or a weight), 16 bytes an
/// element, over every layer with room to spare, stays below [`MAX_BYTES`] as
/// [`ModelConfig::check_sizes`] keeps the dense ones.
pub fn check_range(cfg: &ModelConfig, b: usize, s: usize) -> Result<(), ConfigError> {
    let Some(ds) = cfg.hf().and_then(|h| h.moe.as_ref()).and_then(|m| m.deepseek.as_ref()) else { return Ok(()) };
    let m = |xs: &[usize]| xs.iter().try_fold(1u64, |a, &x| a.checked_mul(x as u64));
    let heads = ds.qk_nope_head_dim.checked_add(ds.qk_rope_head_dim.max(ds.v_head_dim));
    let rank = ds.q_lora_rank.unwrap_or(0).max(ds.kv_lora_rank).checked_add(ds.qk_rope_head_dim);
    let width = [heads.and_then(|w| w.checked_mul(cfg.num_heads)), Some(ds.dense_intermediate), rank, Some(cfg.d_model)].into_iter().try_fold(0usize, |a, w| w.map(|w| a.max(w)));
    let fits = width
        .and_then(|w| {
            // (B·S or a weight's other side: d, r_q, r_kv, F_d) × the widest side.
            let other = [b.checked_mul(s)?, cfg.d_model, ds.kv_lora_rank, ds.q_lora_rank.unwrap_or(0), ds.dense_intermediate].into_iter().max()?;
            m(&[other, w, 16, cfg.num_layers.checked_add(4)?])
        })
        .is_some_and(|n| n <= MAX_BYTES);
    if fits {
        return Ok(());
    }
    Err(ConfigError::new(
        "--context-length",
        format!(
            "DeepSeek-V3's latent-attention tensors of {b} × {s} tokens over {} heads of {} + {} (v {}) would have more bytes than the 2^62 vramscope can count; lower --batch-size or --context-length",
            cfg.num_heads, ds.qk_nope_head_dim, ds.qk_rope_head_dim, ds.v_head_dim
        ),
    ))
}

/// The latent attention's sizes in elements.
struct Dims {
    bs: u64,
    h: u64,
    rq: Option<u64>,
    rkv: u64,
    nope: u64,
    rope: u64,
    v: u64,
}

fn dims(c: &Ctx, ds: &DeepseekParts) -> Dims {
    Dims {
        bs: c.b * c.s,
        h: c.h,
        rq: ds.q_lora_rank.map(|r| r as u64),
        rkv: ds.kv_lora_rank as u64,
        nope: ds.qk_nope_head_dim as u64,
        rope: ds.qk_rope_head_dim as u64,
        v: ds.v_head_dim as u64,
    }
}

/// DeepSeek-V3's own symbols: (name, formula, elements).
fn named(c: &Ctx, ds: &DeepseekParts, cfg_dense: u64) -> Vec<(&'static str, &'static str, u64)> {
    let z = dims(c, ds);
    let mut out = Vec::new();
    if let Some(r) = z.rq {
        out.push(("qr", "B·S·r_q", z.bs * r));
    }
    out.extend([
        ("ckv", "B·S·(r_kv + d_r)", z.bs * (z.rkv + z.rope)),
        ("kvr", "B·S·r_kv", z.bs * z.rkv),
        ("kr", "B·S·d_r", z.bs * z.rope),
        ("qk", "B·S·h·(d_n + d_r)", z.bs * z.h * (z.nope + z.rope)),
        ("kvb", "B·S·h·(d_n + d_v)", z.bs * z.h * (z.nope + z.v)),
        ("vh", "B·S·h·d_v", z.bs * z.h * z.v),
        ("fd", "B·S·F_d", z.bs * cfg_dense),
    ]);
    out
}

/// A term of one of [`named`]'s sizes.
fn term(c: &Ctx, ds: &DeepseekParts, what: impl Into<String>, op: &'static str, sym: &'static str, elem: u64) -> Term {
    let (_, formula, elements) = named(c, ds, ds.dense_intermediate as u64).into_iter().find(|(n, _, _)| *n == sym).expect("a DeepSeek-V3 symbol");
    let unit = Unit::Named(sym);
    let formula = if elem == 4 { format!("{formula}·4") } else { format!("{formula}·{elem} = {}", sized(unit, elem)) };
    Term { what: what.into(), op, formula, unit, elements, elem }
}

/// The symbols a run's terms use, with their byte values (4-byte elements).
pub(in crate::analyse::estimate) fn symbols(c: &Ctx, ds: &DeepseekParts, used: impl Fn(Unit) -> bool) -> Vec<(String, String, u64)> {
    let names: [(&str, &str); 8] = [
        ("qr", "B·S·r_q·4"),
        ("ckv", "B·S·(r_kv + d_r)·4"),
        ("kvr", "B·S·r_kv·4"),
        ("kr", "B·S·d_r·4"),
        ("qk", "B·S·h·(d_n + d_r)·4"),
        ("kvb", "B·S·h·(d_n + d_v)·4"),
        ("vh", "B·S·h·d_v·4"),
        ("fd", "B·S·F_d·4"),
    ];
    let values = named(c, ds, ds.dense_intermediate as u64);
    names
        .iter()
        .filter(|(n, _)| used(Unit::Named(n)))
        .filter_map(|(n, f)| values.iter().find(|v| v.0 == *n).map(|v| (n.to_string(), f.to_string(), v.2 * 4)))
        .collect()
}

/// A latent `DeepseekV3RMSNorm` (q_a_layernorm, kv_a_layernorm) on `width` columns: its input
/// (in fp32 `.to(fp32)` returns it, `input` naming what pow and x·r then keep; in pure bf16 and
/// under autocast, whose projections give bf16, an fp32 copy) and r for the input's gradient,
/// x·r (fp32, or its bf16 copy) for the weight's (frozen under peft), and its output where the
/// next linear keeps it (`output`, `elem` bytes: under autocast the linear's bf16 cast of it).
#[allow(clippy::too_many_arguments)]
fn latent_norm(c: &Ctx, ds: &DeepseekParts, t: &mut Vec<Term>, name: &str, sym: &'static str, input: (&str, &'static str), output: Option<&str>, elem: u64, g: NormFlags) {
    let bs = c.b * c.s;
    if g.input {
        if c.mode != Mode::Fp32 {
            t.push(term(c, ds, format!("{name} input cast to fp32 (pow, x·r keep it)"), "_to_copy", sym, 4));
        } else {
            t.push(term(c, ds, input.0, "mm", input.1, 4));
        }
        t.push(c.small(&format!("{name} rsqrt output r"), "rsqrt", "B·S", bs, 4));
    }
    if g.weight && c.mode == Mode::Fp32 {
        t.push(term(c, ds, format!("{name} x·r (weight·x keeps it)"), "mul", sym, 4));
    } else if g.weight {
        t.push(term(c, ds, format!("{name} x·r back in bf16 (weight·x keeps it)"), "_to_copy", sym, 2));
    }
    if let Some(output) = output {
        t.push(term(c, ds, output, "mul", sym, elem));
    }
}

/// Which of a latent norm's tensors autograd needs (its input's gradient, its weight's).
#[derive(Clone, Copy)]
struct NormFlags {
    input: bool,
    weight: bool,
}

/// What needs a gradient in a layer: everything in full fine-tuning; under peft (LoRA on the
/// latent attention's linears, everything else frozen) what an adapter or the layer's input
/// (not layer 0's, the frozen embedding's output) makes need one.
#[derive(Clone, Copy)]
struct Grad {
    /// The weights train (no peft).
    weights: bool,
    /// q_a_proj's output (q_a_layernorm's input).
    qa: bool,
    /// The queries.
    q: bool,
    /// kv_a_proj_with_mqa's output (the latent and k_pe).
    ckv: bool,
    /// kv_b_proj's output (k_nope and the values), and so the keys.
    kvb: bool,
    /// q_b_proj keeps q_a_layernorm's output (its weight's gradient, or lora_A's input).
    qb_input: bool,
    /// kv_b_proj keeps kv_a_layernorm's output.
    kvb_input: bool,
    /// o_proj keeps its input.
    o_input: bool,
}

/// V as weights·V keeps it (`elem` its type there): a contiguous copy of the strided view of
/// kv_b_proj's output, or, when B or S is 1 (the fold is a view), that whole output.
fn kept_v(c: &Ctx, ds: &DeepseekParts, t: &mut Vec<Term>, elem: u64, fp32_copy: bool) {
    if fp32_copy {
        t.push(term(c, ds, "V upcast to fp32 (a copy in (B, S, h, d_v) order; weights·V keeps it)", "_to_copy", "vh", 4));
    } else if c.b == 1 || c.s == 1 {
        t.push(term(c, ds, "kv_b_proj output, whole (weights·V keeps a view of its V columns: with B or S 1 the fold is a view)", "mm", "kvb", elem));
    } else {
        t.push(term(c, ds, "V folded for weights·V (a copy of kv_b_proj's strided V columns; bmm keeps it)", "clone", "vh", elem));
    }
}

/// `DeepseekV3Attention.forward` past input_layernorm (`kernel`: sdpa's pick where v's head
/// size equals q's; otherwise `F.scaled_dot_product_attention` runs the math composite). A
/// matmul keeps each operand for the other's gradient; softmax its output when the scores need
/// a gradient; a fused kernel keeps q, k, v, its output and logsumexp when any input needs one.
fn attention(c: &Ctx, hf: &HfConfig, ds: &DeepseekParts, t: &mut Vec<Term>, cache: bool, kernel: Kernel, g: Grad) {
    // `lo`: the projections' type, and so the attention's (bf16 under autocast, where each
    // matmul or kernel keeps its bf16 casts of the fp32 query cat and softmax output).
    let (me, lo) = (types(c, hf).model, types(c, hf).lo);
    let autocast = c.mode == Mode::Autocast;
    let lora = hf.lora.as_ref();
    let adapter = |t: &mut Vec<Term>, name: &str, sym: &'static str, x_grad: bool| {
        if let Some(lc) = lora.filter(|l| l.targets(name)) {
            super::adapter_on(c, t, lc, name, &|what, op, elem| term(c, ds, what, op, sym, elem), x_grad);
        }
    };
    if ds.q_lora_rank.is_some() {
        latent_norm(c, ds, t, "q_a_layernorm", "qr", ("q_a_proj output (q_a_layernorm's pow, x·r keep it)", "qr"), g.qb_input.then_some(if autocast { "q_a_layernorm output (fp32) cast to bf16 (q_b_proj keeps it)" } else { "q_a_layernorm output (q_b_proj keeps it)" }), lo, NormFlags { input: g.qa, weight: g.weights });
        adapter(t, "q_b_proj", "qr", g.qa);
    }
    let (kv_out, kv_elem) = if cache {
        // The cache is made in the fp32 latent's type under autocast: kv_b_proj casts its copy.
        (Some("kv_a_layernorm output's DynamicCache cat copy (the cache holds it, kv_b_proj keeps it; the norm's own output dies)"), me)
    } else if autocast {
        (g.kvb_input.then_some("kv_a_layernorm output (fp32) cast to bf16 (kv_b_proj keeps it)"), lo)
    } else {
        (g.kvb_input.then_some("kv_a_layernorm output (kv_b_proj keeps it)"), lo)
    };
    latent_norm(c, ds, t, "kv_a_layernorm", "kvr", ("kv_a_proj_with_mqa output, whole (kv_a_layernorm's pow, x·r keep a view of its first r_kv columns)", "ckv"), kv_out, kv_elem, NormFlags { input: g.ckv, weight: g.weights });
    if cache && autocast && g.kvb_input {
        t.push(term(c, ds, "the cached latent (fp32) cast to bf16 (kv_b_proj keeps it)", "_to_copy", "kvr", lo));
    }
    adapter(t, "kv_b_proj", "kvr", g.ckv);
    if cache {
        t.push(term(c, ds, "DynamicCache k_pe (cat copy of the roped (B, 1, S, d_r))", "cat", "kr", me));
    }
    // The scores need a gradient when Q or K does (K: kv_b_proj's output or k_pe, V: kv_b_proj's).
    let (scores, v) = (g.q || g.kvb, g.kvb);
    match hf.attn_implementation {
        AttnImplementation::Eager => {
            if g.kvb {
                let (what, op) = if autocast { ("query_states = cat(q_pass, rope(q_pe)) (fp32) cast to bf16 (the scores matmul keeps it)", "_to_copy") } else { ("query_states = cat(q_pass, rope(q_pe)) (the scores matmul keeps it)", "cat") };
                t.push(term(c, ds, what, op, "qk", lo));
            }
            if g.q {
                t.push(term(c, ds, "key_states (new_empty, k_nope and the expanded k_pe copied in; the scores matmul keeps it)", "empty", "qk", lo));
            }
            if scores {
                t.push(c.term("softmax(scores + mask, dtype=fp32) output (softmax keeps it)", "_softmax", Unit::S, 4));
            }
            if c.mode != Mode::Fp32 && v {
                let what = if autocast { "attention weights (fp32) cast to bf16 by weights·V (it keeps the copy)" } else { "attention weights .to(bf16) (weights·V keeps it)" };
                t.push(c.term(what, "_to_copy", Unit::S, 2));
            }
            if scores {
                kept_v(c, ds, t, lo, false);
            }
            if g.o_input {
                t.push(term(c, ds, "heads merged (transpose().contiguous(); o_proj keeps it)", "clone", "vh", lo));
            }
        }
        // A fused kernel keeps q, k, v (a view of kv_b_proj's output: all of it), its output
        // and logsumexp; the memory-efficient kernel writes (B, S, h, d) underneath, so merging
        // heads is a view; flash's output is `empty_like(q)`, q being the cat's contiguous
        // (B, h, S, d): merging copies.
        _ if ds.v_head_dim == ds.qk_head_dim() && matches!(kernel, Kernel::Fused(_)) => {
            let efficient = kernel == Kernel::Fused(SdpaBackend::Efficient);
            let name = match kernel {
                Kernel::Fused(SdpaBackend::Efficient) => "_scaled_dot_product_efficient_attention",
                Kernel::Fused(SdpaBackend::CpuFlash) => "_scaled_dot_product_flash_attention_for_cpu",
                _ => "_scaled_dot_product_flash_attention",
            };
            if scores {
                let (what, op) = if autocast { ("query_states = cat(q_pass, rope(q_pe)) (fp32) cast to bf16 (the kernel keeps it)", "_to_copy") } else { ("query_states = cat(q_pass, rope(q_pe)) (the kernel keeps it)", "cat") };
                t.push(term(c, ds, what, op, "qk", lo));
                t.push(term(c, ds, "key_states (new_empty, k_nope and the expanded k_pe copied in; the kernel keeps it)", "empty", "qk", lo));
                t.push(term(c, ds, "kv_b_proj output, whole (the kernel keeps V, a view of its V columns)", "mm", "kvb", lo));
            }
            if efficient && (scores || g.o_input) {
                t.push(term(c, ds, "attention output, (B, S, h, d_v) underneath (the kernel keeps it; merging heads is a view o_proj keeps)", name, "vh", lo));
            } else if !efficient {
                if scores {
                    t.push(term(c, ds, "attention output, (B, h, S, d_v) like q (the kernel keeps it)", name, "vh", lo));
                }
                if g.o_input {
                    t.push(term(c, ds, "heads merged (transpose().contiguous(), a copy; o_proj keeps it)", "clone", "vh", lo));
                }
            }
            if scores {
                let (rows, formula) = if efficient { (c.s.div_ceil(32) * 32, "B·h·⌈S/32⌉·32") } else { (c.s, "B·h·S") };
                t.push(c.small("attention logsumexp (fp32)", name, formula, c.b * c.h * rows, 4));
            }
        }
        // sdpa's math composite (v's head size unlike q's, whatever the backend, or the math backend).
        _ => {
            if g.kvb {
                t.push(term(c, ds, "Q·√scale in fp32 (the scores bmm keeps it)", "mul", "qk", 4));
            }
            if g.q {
                t.push(term(c, ds, "Kᵀ·√scale in fp32 (the scores bmm keeps it)", "mul", "qk", 4));
            }
            if scores {
                t.push(c.term("_safe_softmax(scores + causal mask) (fp32; softmax keeps it)", "_safe_softmax", Unit::S, 4));
                // (Under autocast the composite runs on sdpa's bf16 casts: it upcasts them itself.)
                kept_v(c, ds, t, 4, c.mode != Mode::Fp32);
            }
            if g.o_input {
                t.push(term(c, ds, "heads merged (output cast back, transpose().contiguous(); o_proj keeps it)", "clone", "vh", lo));
            }
        }
    }
    adapter(t, "o_proj", "vh", scores);
}

/// One decoder layer without checkpointing, in forward order: `sparse` for a layer at or past
/// `first_k_dense_replace`; `x_grad`: whether its input needs a gradient (under peft, not
/// layer 0's: the embedding is frozen).
#[allow(clippy::too_many_arguments)]
pub(super) fn layer(c: &Ctx, hf: &HfConfig, m: &MoeConfig, ds: &DeepseekParts, sparse: bool, cache: bool, kernel: Kernel, x_grad: bool) -> Vec<Term> {
    let (me, lo) = (types(c, hf).model, types(c, hf).lo);
    let mut t = Vec::new();
    let rows = ("B·S", c.b * c.s);
    let lora = hf.lora.as_ref();
    let adapted = |p: &str| lora.is_some_and(|l| l.targets(p));
    // peft's `bias` trains attention_bias's q_a_proj, kv_a_proj_with_mqa and o_proj biases (the
    // others have none; the router's e_score_correction_bias is a buffer): such a projection's
    // output needs a gradient even where its input needs none.
    let bias = |p: &str| ds.has_bias(p) && lora.is_some_and(|l| l.trains_bias(p));
    let trains = |p: &str| adapted(p) || bias(p);
    // With fp32 weights and no dropout lora_A keeps the projection's input itself.
    let a_keeps_input = |p: &str| lora.is_none_or(|l| l.targets(p) && l.dropout == 0.0 && c.mode == Mode::Fp32);
    let x = lora.is_none() || x_grad;
    let q_reader = if ds.q_lora_rank.is_some() { "q_a_proj" } else { "q_proj" };
    let qa = x || trains(q_reader);
    let q = if ds.q_lora_rank.is_some() { qa || adapted("q_b_proj") } else { qa };
    let ckv = x || trains("kv_a_proj_with_mqa");
    let kvb = ckv || adapted("kv_b_proj");
    let g = Grad { weights: lora.is_none(), qa, q, ckv, kvb, qb_input: a_keeps_input("q_b_proj"), kvb_input: a_keeps_input("kv_b_proj"), o_input: a_keeps_input("o_proj") };
    let norm = |input: bool, output: bool| super::NormGrad { input, weight: g.weights, output, product_fp32: false };
    rms_norm(c, &mut t, "input_layernorm", Unit::A, me, rows, &[q_reader, "kv_a_proj_with_mqa"], norm(x, a_keeps_input(q_reader) || a_keeps_input("kv_a_proj_with_mqa")));
    if let Some(lc) = lora {
        for p in [q_reader, "kv_a_proj_with_mqa"].into_iter().filter(|p| adapted(p)) {
            super::adapter(c, &mut t, lc, p, Unit::A, x);
        }
    }
    attention(c, hf, ds, &mut t, cache, kernel, g);
    let h = x || q || kvb || trains("o_proj");
    if lora.is_some() {
        // (A router that is a ParamWrapper fold keeps its own cast: sparse_block.)
        let router_w = sparse && lora.is_some_and(|l| l.targets_router());
        frozen_casts(c, &mut t, m, ds, sparse, x, g, q || kvb, h && !router_w, h);
    }
    if c.mode != Mode::Pure && h {
        t.push(c.term("h = x + attention (post_attention_layernorm keeps it)", "add", Unit::A, 4));
    }
    // Under peft no LoRA reaches the MLP's linears (hf.rs's check): they and the router are frozen.
    let readers: &[&str] = if sparse { &["shared_experts.gate_proj", "shared_experts.up_proj", "gate (the router)"] } else { &["gate_proj", "up_proj"] };
    // peft's ParamWrapper (`--target-parameters`) on the sparse layers' router and experts: in
    // fp32 the router's linear keeps its input (`.float()` returns it) for the fold's gradient.
    let wrapped = |p: &str| sparse && lora.is_some_and(|l| l.targets_parameter(p));
    let pw = moe::Wrapped { router: sparse && lora.is_some_and(|l| l.targets_router()), gate_up: wrapped("mlp.experts.gate_up_proj"), down: wrapped("mlp.experts.down_proj") };
    // (Under autocast the router's linear keeps its own cast of the norm's output: sparse_block.)
    rms_norm(c, &mut t, "post_attention_layernorm", Unit::A, me, rows, readers, norm(h, g.weights || (pw.router && me == 4 && c.mode != Mode::Autocast)));
    if !h && !pw.any() {
        return t;
    }
    if sparse {
        sparse_block(c, &mut t, m, me, lo, g.weights, h, pw, lora);
    } else {
        // DeepseekV3MLP of intermediate_size: silu keeps its input, the product each factor
        // (down_proj keeps it for its weight's gradient).
        let fd = |what: &str, op| term(c, ds, what.to_string(), op, "fd", lo);
        t.extend([fd("gate_proj output (silu keeps its input)", "mm"), fd("silu(gate)", "silu"), fd("up_proj output", "mm")]);
        if g.weights {
            t.push(fd("silu·up (down_proj keeps it)", "mul"));
        }
    }
    if c.mode != Mode::Pure {
        t.push(c.term("layer output = h + mlp (the next norm keeps it)", "add", Unit::A, 4));
    }
    t
}

/// Under autocast over fp32 weights with peft's LoRA each frozen linear whose input needs a
/// gradient keeps its weight's uncached cast (super::frozen_cast; nothing outside autocast):
/// the latent attention's q_a_proj (or q_proj) and kv_a_proj_with_mqa (the layer input `x`),
/// q_b_proj (q_a_layernorm's output, `g.qa`), kv_b_proj (the latent, `g.ckv`), o_proj (`attn`:
/// the attention output), then the dense MLP's gate/up/down_proj or the shared experts' and
/// the router (`h`).
#[allow(clippy::too_many_arguments)]
fn frozen_casts(c: &Ctx, t: &mut Vec<Term>, m: &MoeConfig, ds: &DeepseekParts, sparse: bool, x: bool, g: Grad, attn: bool, router: bool, h: bool) {
    let shapes = ds.mla_linear_shapes(c.d as usize, c.h as usize);
    let n = |slot: usize| (shapes[slot].0 * shapes[slot].1) as u64;
    let (q_name, q_formula) = if ds.q_lora_rank.is_some() { ("q_a_proj", "r_q·d") } else { ("q_proj", "h·(d_n + d_r)·d") };
    if x {
        super::frozen_cast(c, t, q_name, q_formula, n(0));
        super::frozen_cast(c, t, "kv_a_proj_with_mqa", "(r_kv + d_r)·d", n(2));
    }
    if g.qa && ds.q_lora_rank.is_some() {
        super::frozen_cast(c, t, "q_b_proj", "h·(d_n + d_r)·r_q", n(1));
    }
    if g.ckv {
        super::frozen_cast(c, t, "kv_b_proj", "h·(d_n + d_v)·r_kv", n(7));
    }
    if attn {
        super::frozen_cast(c, t, "o_proj", "d·h·d_v", n(3));
    }
    if !h {
        return;
    }
    if sparse {
        let is = m.shared_intermediate as u64;
        super::frozen_cast(c, t, "shared_experts gate_proj, up_proj, down_proj", "3·I_s·d", 3 * is * c.d);
        if router {
            super::frozen_cast(c, t, "router", "E·d", m.experts as u64 * c.d);
        }
    } else {
        super::frozen_cast(c, t, "gate_proj, up_proj, down_proj", "3·F_d·d", 3 * ds.dense_intermediate as u64 * c.d);
    }
}

/// `DeepseekV3MoE.forward`: the shared experts, the router, the experts. Under autocast
/// (`lo` 2, `me` 4) the shared MLP and the router's `F.linear` (its `.float()` casts return the
/// fp32 tensors themselves) give bf16: the sigmoid scores, their gather and the routing
/// weights stay bf16 (`/=` in place keeps the type; the sum is fp32 on CUDA).
#[allow(clippy::too_many_arguments)]
fn sparse_block(c: &Ctx, t: &mut Vec<Term>, m: &MoeConfig, me: u64, lo: u64, weights: bool, x: bool, pw: moe::Wrapped, lora: Option<&crate::model::lora::LoraConfig>) {
    let tokens = c.b * c.s;
    let k = m.top_k as u64;
    let small = |what: &str, op, formula: &str, elements, elem| Term { what: what.into(), op, formula: format!("{formula}·{elem}"), unit: Unit::Small, elements, elem };
    let is = m.shared_intermediate as u64;
    let fs = |what: &str, op| Term { what: format!("shared_experts {what}"), op, formula: if lo == 4 { "B·S·I_s·4".into() } else { format!("B·S·I_s·{lo} = {}", sized(Unit::Fs, lo)) }, unit: Unit::Fs, elements: tokens * is, elem: lo };
    // (The shared experts stay frozen: without the input's gradient they keep nothing.)
    if x {
        t.extend([fs("gate_proj output (silu keeps its input)", "mm"), fs("silu(gate)", "silu"), fs("up_proj output", "mm")]);
    }
    if weights {
        t.push(fs("silu·up (down_proj keeps it)", "mul"));
    }
    // The router's logits need a gradient when its input does or its weight is a fold.
    let rg = x || pw.router;
    // F.linear(hidden_states.float(), weight.float()): both copies, which the matmul keeps
    // (the input's for the weight's gradient); under autocast over bf16 weights F.linear casts
    // them back to bf16 (uncached: the copy is no leaf) and keeps those.
    let rl = if c.pure_autocast { 2 } else { 4 };
    if me != 4 {
        let cast = if c.pure_autocast { " cast back to bf16 by F.linear" } else { "" };
        if weights || pw.router {
            t.push(c.term(format!("router input .float(){cast} (the router's linear keeps it)"), "_to_copy", Unit::A, rl));
        }
        if x {
            let fold = if pw.router { " of the ParamWrapper's fold W + ΔW" } else { "" };
            t.push(small(&format!("router weight{fold} .float() (E, d){cast} (the router's linear keeps it)"), "_to_copy", "E·d", m.experts as u64 * c.d, rl));
        }
    } else if pw.router && c.mode == Mode::Autocast {
        // F.linear casts the fp32 input and the (non-leaf) fold, uncached, and keeps each cast
        // for the other's gradient.
        t.push(c.term("post_attention_layernorm output (fp32) cast to bf16 for gate (the router) (its linear keeps it for the fold's gradient)", "_to_copy", Unit::A, 2));
        if x {
            t.push(small("router weight + ΔW, the ParamWrapper's fold (E, d), cast to bf16 (uncached; the router's linear keeps it for its input's gradient)", "_to_copy", "E·d", m.experts as u64 * c.d, 2));
        }
    } else if pw.router && x {
        t.push(small("router weight + ΔW, the ParamWrapper's fold (E, d) (the router's linear keeps it for its input's gradient)", "add", "E·d", m.experts as u64 * c.d, 4));
    }
    // The router's scores: fp32 (its linear's fp32 operands), bf16 under autocast.
    let autocast = c.mode == Mode::Autocast || c.pure_autocast;
    let rw = if autocast { 2 } else { 4 };
    if rg {
        t.push(small("router sigmoid(logits) (T, E) (sigmoid keeps its output)", "sigmoid", "B·S·E", tokens * m.experts as u64, rw));
        t.push(small("router top-k expert indices, int64 (the gather of the chosen scores keeps them)", "topk", "B·S·k", tokens * k, 8));
    }
    if rg && m.norm_topk_prob {
        t.push(small("the gathered top-k scores (the renormalising division keeps them)", "gather", "B·S·k", tokens * k, rw));
        t.push(small("their sum + 1e-20, fp32 (the division keeps it)", "add", "B·S", tokens, 4));
    }
    // grouped_mm is no autocast op: the experts run in fp32; batched_mm's bmm and eager's linears cast.
    let mm = if autocast && m.implementation != crate::model::hf::moe::ExpertsImplementation::GroupedMm { lo } else { me };
    let g = moe::ExpertGrad { x, router: rg, gate_up: weights || pw.gate_up, down: weights || pw.down, gate_up_fold: pw.gate_up, down_fold: pw.down };
    let z = Sizes { t: tokens, p: tokens * k, d: c.d, i: m.intermediate as u64, e: m.experts as u64, me, rw, mm, g };
    if let Some(lc) = lora.filter(|_| pw.gate_up || pw.down) {
        // (The router's fold is counted above: F.linear reads its `.float()`.)
        moe::param_wrapper(c, t, lc, &z, false);
    }
    moe::experts(t, m, &z);
}

/// The parameter count's formula (the count itself is `DeepseekV3Shape::counts`).
pub(super) fn param_formula(cfg: &ModelConfig, ds: &DeepseekParts) -> String {
    let head = if cfg.tied_embeddings { "" } else { " + V·d (lm_head)" };
    let q = if ds.q_lora_rank.is_some() { "d·r_q + r_q + r_q·h·(d_n + d_r)" } else { "d·h·(d_n + d_r)" };
    let bias = if ds.attention_bias { " + r_q + r_kv + d_r + d (biases)" } else { "" };
    format!(
        "V·d (embedding){head} + L·({q} + d·(r_kv + d_r) + r_kv + r_kv·h·(d_n + d_v) + h·d_v·d{bias} + 2d) + L_dense·3d·F_d + L_sparse·(E·d (router) + 3E·I·d (experts) + 3d·I_s (shared experts)) + d"
    )
}

/// The elements autocast casts and caches, each once per region: the leaves `F.linear` reads
/// (the latent attention's weights and biases, the dense MLPs', the router's weight, whose
/// `.float()` returns it, the shared experts', lm_head's or the tied embedding's); the norms
/// meet muls, the experts `_grouped_mm` (no autocast op) or casts of gathered or sliced views.
pub(super) fn cast(cfg: &ModelConfig, m: &MoeConfig, ds: &DeepseekParts) -> (u64, String) {
    let (d, h, v, l) = (cfg.d_model as u64, cfg.num_heads as u64, cfg.vocab_size as u64, cfg.num_layers);
    let (rkv, rope, nope, dv, qk) = (ds.kv_lora_rank as u64, ds.qk_rope_head_dim as u64, ds.qk_nope_head_dim as u64, ds.v_head_dim as u64, ds.qk_head_dim() as u64);
    let ab = u64::from(ds.attention_bias);
    let q = match ds.q_lora_rank.map(|r| r as u64) {
        Some(r) => r * d + ab * r + h * qk * r,
        None => h * qk * d,
    };
    let attn = q + (rkv + rope) * d + ab * (rkv + rope) + h * (nope + dv) * rkv + d * h * dv + ab * d;
    let sparse = (0..l).filter(|&i| ds.is_sparse(i)).count() as u64;
    let dense = l as u64 - sparse;
    let n = l as u64 * attn + dense * 3 * d * ds.dense_intermediate as u64 + sparse * (m.experts as u64 * d + 3 * d * m.shared_intermediate as u64) + v * d;
    let qf = if ds.q_lora_rank.is_some() { "d·r_q + r_q·h·(d_n + d_r)" } else { "d·h·(d_n + d_r)" };
    let bias = if ds.attention_bias { " + biases" } else { "" };
    let head_w = if cfg.tied_embeddings { "V·d (the tied embedding, read by lm_head)" } else { "V·d (lm_head)" };
    (n, format!("2 B × (L·({qf} + d·(r_kv + d_r) + r_kv·h·(d_n + d_v) + h·d_v·d{bias}) + L_dense·3d·F_d + L_sparse·(E·d (router) + 3d·I_s (shared experts)) + {head_w}) = 2 × {n}"))
}

/// A layer's parameters as [`layer_dims`] gives them: (rows, cols or None) each, and the 3-D
/// ones' indices with their leading size E.
pub(in crate::analyse) type LayerDims = (Vec<(u64, Option<u64>)>, Vec<(usize, u64)>);

/// One decoder layer's parameters in `parameters()` order as (rows, cols) for matrices,
/// (n, None) for vectors, with the 3-D experts' indices and E: the attention (q_a_proj
/// [+bias], q_a_layernorm, q_b_proj, or q_proj; kv_a_proj_with_mqa [+bias], kv_a_layernorm,
/// kv_b_proj, o_proj [+bias]), the dense MLP or the experts, the router and the shared
/// experts, then the two norms.
pub(in crate::analyse) fn layer_dims(cfg: &ModelConfig, m: &MoeConfig, ds: &DeepseekParts, sparse: bool) -> LayerDims {
    let (d, h) = (cfg.d_model as u64, cfg.num_heads as u64);
    let qk = ds.qk_head_dim() as u64;
    let (rkv, rope, nope, v) = (ds.kv_lora_rank as u64, ds.qk_rope_head_dim as u64, ds.qk_nope_head_dim as u64, ds.v_head_dim as u64);
    let mut dims = Vec::new();
    let linear = |dims: &mut Vec<(u64, Option<u64>)>, rows: u64, cols: u64, bias: bool| {
        dims.push((rows, Some(cols)));
        if bias {
            dims.push((rows, None));
        }
    };
    match ds.q_lora_rank.map(|r| r as u64) {
        Some(r) => {
            linear(&mut dims, r, d, ds.attention_bias);
            dims.push((r, None));
            linear(&mut dims, h * qk, r, false);
        }
        None => linear(&mut dims, h * qk, d, false),
    }
    linear(&mut dims, rkv + rope, d, ds.attention_bias);
    dims.push((rkv, None));
    linear(&mut dims, h * (nope + v), rkv, false);
    linear(&mut dims, d, h * v, ds.attention_bias);
    let mut lead = Vec::new();
    if sparse {
        let (e, i, s) = (m.experts as u64, m.intermediate as u64, m.shared_intermediate as u64);
        lead = vec![(dims.len(), e), (dims.len() + 1, e)];
        dims.extend([(2 * i, Some(d)), (d, Some(i)), (e, Some(d)), (s, Some(d)), (s, Some(d)), (d, Some(s))]);
    } else {
        let f = ds.dense_intermediate as u64;
        dims.extend([(f, Some(d)), (f, Some(d)), (d, Some(f))]);
    }
    dims.extend([(d, None), (d, None)]);
    (dims, lead)
}
