//! gpt-oss in closed form: transformers 5.23's `GptOssForCausalLM` (the op sequence is
//! src/model/hf/gpt_oss_5_23.rs), in fp32, pure bf16 or autocast over fp32 weights (bf16 or
//! fp16: [`attention_autocast`], the router's low logits, each experts implementation's casts)
//! or bf16 autocast over bf16 weights (pure bf16's terms: nothing is cast, and the softmaxes
//! take their input's type explicitly), eager attention (the only one it dispatches). With T = B·S tokens each routed to k of E experts of width I (P = T·k rows),
//! what autograd keeps per layer:
//! - `GptOssRMSNorm` multiplies first and casts last (`(weight * x).to(input dtype)`): the fp32
//!   x·r is kept for the weight's gradient, as OLMo-2's;
//! - q/k/v/o with biases (a bias keeps nothing); `_apply_rotary_emb` (chunk, two products per
//!   half, `cat`) keeps cos/sin only, and its `cat` makes rope(Q) and rope(K) contiguous
//!   (B, h, S, d_h), so the scores' matmul folds them without a copy;
//! - the sinks: `cat([scores, sinks])` (B, h, S, S + 1), minus its row max (`max` keeps its
//!   int64 indices), softmax (keeps its (B, h, S, S + 1) output, in the model's type), and the
//!   sink column dropped by a slice, a view the weights·V matmul keeps;
//! - the router: a biased linear (keeps the norm's output), topk (its int64 indices), softmax
//!   over the k values (its output, the routing weights);
//! - the experts' clamped SwiGLU with biases, under each `--experts-implementation`: the gate_up
//!   output (both clamps keep a strided view of it: all 2I columns), the clamped gate, its
//!   sigmoid, glu, up + 1 and their product (the down projection's input), the down output
//!   (the weighting keeps it); `grouped_mm` the sort's permutation, the token ids, the sorted
//!   expert ids (the bias gathers keep them), the gathered rows, the sorted weights, the offsets
//!   and the inverse permutation; `batched_mm` the repeated rows and each row's gathered
//!   (d, 2I) and (I, d) matrices; `eager` per expert hit its `torch.where` rows, gathered rows,
//!   weights and `index_add_`'s source.
//!
//! Sliding and full layers keep the same: both masks are (B, 1, S, S) whatever the window, and
//! a `DynamicSlidingWindowLayer` keeps a view of its whole first `cat`; it adds a 0-d int64
//! window tensor per sliding layer. Checkpointed layers' closures capture the mask of their
//! type.
//!
//! peft's LoRA on the attention (`--target-modules`; the router and the experts, plain
//! parameters, frozen): a tensor is kept only where a gradient flows, as in the dense layers
//! (super::layer): layer 0's input needs none, the norms' x·r and the experts' inputs that
//! only their weights' gradients need are not kept; LLM.int8() on the attention's linears keeps
//! each one's input (MatMul8bitLt). Under autocast over fp32 weights each frozen linear whose
//! input needs a gradient keeps its weight's uncached cast (q/k/v/o_proj, the router,
//! lm_head), and [`attention_autocast`] keeps what the gradients need; over bf16 weights
//! (`Mode::Pure`) LoRA's terms are the dense layers' (super::adapter). peft's ParamWrapper on
//! the router and the experts (`--target-parameters`) is derived: the folds train, so the
//! block keeps what their gradients need even where its input needs none (the router's fold,
//! or under autocast its cast; the experts' folds where an op keeps its weight, or under
//! autocast eager's per-expert casts; pure bf16's factor copies: [`moe::param_wrapper`]); the
//! router's auxiliary loss is derived as the other families' ([`moe::router_logits`]). peft's `bias` is derived: the
//! attention's biases (super::bias_trains) and the router's (`mlp.router.bias`, `lora_only`
//! under a ParamWrapper on its weight) make their outputs need a gradient, layer 0's too.
use super::{moe, rms_norm, t_small, types, Terms, FULL};
use crate::analyse::estimate::{vocab, Ctx, Mode, Term, Unit};
use crate::model::hf::gpt_oss::GptOssParts;
use crate::model::hf::moe::{ExpertsImplementation, MoeConfig};
use crate::model::hf::{AttnImplementation, HfConfig};
use crate::model::{Checkpoint, ConfigError, ModelConfig};

/// Refuses what the closed form does not derive of gpt-oss (beyond [`moe::check`]'s), naming the flag.
pub(super) fn check(hf: &HfConfig) -> Result<(), ConfigError> {
    if hf.attn_implementation != AttnImplementation::Eager {
        return Err(ConfigError::new("--attn-implementation", format!("{} on gpt_oss: transformers 5.23 runs gpt-oss's attention sinks eagerly only; use eager", hf.attn_implementation.name())));
    }
    Ok(())
}

/// The block's sizes: T tokens, P = T·k routed rows, I, E, the model's bytes per element.
struct Sizes {
    t: u64,
    p: u64,
    d: u64,
    i: u64,
    e: u64,
    me: u64,
    /// The routing weights' (the router's logits': bf16 under autocast).
    rw: u64,
    /// Under autocast (fp32 weights) the low type's bytes: batched_mm's bmm and eager's
    /// matmuls keep low casts of their operands; None without autocast.
    lo: Option<u64>,
    /// The experts' and router's weights train (not under peft): the sorted expert ids the
    /// bias gathers keep are kept.
    weights: bool,
    /// Which of the block's tensors need a gradient: its input, the router's outputs, the
    /// experts' weights as read (leaves in full fine-tuning, peft's ParamWrapper folds under
    /// `--target-parameters`, frozen otherwise).
    g: moe::ExpertGrad,
}

fn term(what: impl Into<String>, op: &'static str, unit: Unit, formula: &str, elements: u64, elem: u64) -> Term {
    moe::term(what, op, unit, formula, elements, elem)
}

/// What needs a gradient in a layer: everything in full fine-tuning; under peft (LoRA on the
/// attention, the router and experts frozen) what an adapter or the layer's input (not layer
/// 0's, the frozen embedding's output) makes need one.
#[derive(Clone, Copy)]
struct Grad {
    /// The weights train (no peft).
    weights: bool,
    q: bool,
    k: bool,
    v: bool,
    /// o_proj's input is kept (its weight's gradient, or lora_A's input).
    o_input: bool,
    /// The attention's output, and so the rest of the layer.
    h: bool,
}

/// One decoder layer without checkpointing, in forward order (sliding or full: the same);
/// `x_grad`: whether its input needs a gradient (under peft, not layer 0's).
fn layer(c: &Ctx, hf: &HfConfig, m: &MoeConfig, cache: bool, x_grad: bool) -> Vec<Term> {
    let (me, lo) = (types(c, hf).model, types(c, hf).lo);
    let autocast = c.mode == Mode::Autocast;
    let mut t = Vec::new();
    let rows = ("B·S", c.b * c.s);
    let lora = hf.lora.as_ref();
    let adapted = |p: &str| lora.is_some_and(|l| l.targets(p));
    // With fp32 weights and no dropout lora_A keeps the projection's input itself.
    let a_keeps_input = |p: &str| lora.is_none_or(|l| l.targets(p) && l.dropout == 0.0 && c.mode == Mode::Fp32);
    let x = lora.is_none() || x_grad;
    // peft's `bias` trains the attention's biases (`all`, or an adapted module's): a projection
    // whose bias trains gives an output that needs a gradient even where its input needs none.
    let trains = |p: &str| adapted(p) || super::bias_trains(hf, p);
    let (q, k, v) = (x || trains("q_proj"), x || trains("k_proj"), x || trains("v_proj"));
    let o = q || k || v || trains("o_proj");
    // LLM.int8()'s MatMul8bitLt on the attention's linears keeps its input for the input's gradient.
    let int8 = hf.bnb.as_ref().is_some_and(|q| q.int8().is_some());
    let g = Grad { weights: lora.is_none(), q, k, v, o_input: a_keeps_input("o_proj") || (int8 && (q || k || v)), h: x || o };
    // GptOssRMSNorm's weight is frozen under peft: x·r is not kept (weight · x keeps it for the
    // weight's gradient only).
    let norm = |input: bool, output: bool| super::NormGrad { input, weight: g.weights, output, product_fp32: true };
    let qkv = ["q_proj", "k_proj", "v_proj"];
    rms_norm(c, &mut t, "input_layernorm", Unit::A, me, rows, &qkv, norm(x, (int8 && x) || qkv.iter().any(|p| a_keeps_input(p))));
    // Under autocast a frozen linear keeps its weight's uncached cast for its input's gradient.
    let (qw, kvw) = (c.h * c.dk * c.d, c.kvh * c.dk * c.d);
    if lora.is_some() && x {
        super::frozen_cast(c, &mut t, "q_proj", "h·d_h·d", qw);
        super::frozen_cast(c, &mut t, "k_proj", "h_kv·d_h·d", kvw);
        super::frozen_cast(c, &mut t, "v_proj", "h_kv·d_h·d", kvw);
    }
    if let Some(lc) = lora {
        for p in qkv.into_iter().filter(|p| adapted(p)) {
            super::adapter(c, &mut t, lc, p, Unit::A, x);
        }
    }
    if autocast {
        attention_autocast(c, &mut t, cache, g);
    } else {
        attention(c, &mut t, me, cache, g);
    }
    if lora.is_some() && (q || k || v) {
        super::frozen_cast(c, &mut t, "o_proj", "d·h·d_h", qw);
    }
    if let Some(lc) = lora.filter(|_| adapted("o_proj")) {
        super::adapter(c, &mut t, lc, "o_proj", super::heads_unit(c, c.h), q || k || v);
    }
    // peft's ParamWrapper (`--target-parameters`) on the router and the experts: the folds
    // train, so the block keeps what their gradients need even where its input needs none
    // (layer 0 with the attention frozen).
    let wrapped = |p: &str| lora.is_some_and(|l| l.targets_parameter(p));
    let (router_w, gate_up_w, down_w) = (lora.is_some_and(|l| l.targets_router()), wrapped("mlp.experts.gate_up_proj"), wrapped("mlp.experts.down_proj"));
    // The router's own bias (`mlp.router.bias`: peft's `all`, or `lora_only` under a
    // ParamWrapper on its weight) makes the logits need a gradient; it keeps nothing itself.
    let router_b = lora.is_some_and(|l| l.trains_router_bias());
    if !(g.h || router_w || router_b || gate_up_w || down_w) {
        return t;
    }
    if c.mode != Mode::Pure && g.h {
        t.push(c.term("h = x + attention (post_attention_layernorm keeps it)", "add", Unit::A, 4));
    }
    // The router keeps the norm's output for its weight's gradient (a fold's too); the experts
    // gather its rows.
    if lora.is_some() && g.h && !router_w {
        super::frozen_cast(c, &mut t, "router", "E·d", m.experts as u64 * c.d);
    }
    rms_norm(c, &mut t, "post_attention_layernorm", Unit::A, me, rows, &["router (a biased linear; the experts gather its rows by index)"], norm(g.h, g.weights || router_w));
    let top_k = m.top_k as u64;
    let w = g.weights;
    let eg = moe::ExpertGrad { x: g.h, router: g.h || router_w || router_b, gate_up: w || gate_up_w, down: w || down_w, gate_up_fold: gate_up_w, down_fold: down_w };
    // Under autocast the router's biased linear gives bf16 logits: topk and softmax keep that type.
    let z = Sizes { t: c.b * c.s, p: c.b * c.s * top_k, d: c.d, i: m.intermediate as u64, e: m.experts as u64, me, rw: lo, lo: autocast.then_some(lo), weights: w, g: eg };
    if let Some(lc) = lora.filter(|l| !l.target_parameters.is_empty()) {
        // The router's fold (its linear keeps it for its input's gradient) and, in pure bf16,
        // the experts' folds' bf16 factors: Mixtral's terms (gpt-oss's (E, in, out) experts
        // transpose the factors, E·r·(in + out) either way).
        let mz = moe::Sizes { t: z.t, p: z.p, d: z.d, i: z.i, e: z.e, me, rw: lo, mm: me, g: eg };
        moe::param_wrapper(c, &mut t, lc, &mz, true);
    }
    let batched = m.implementation == ExpertsImplementation::BatchedMm;
    // batched_mm's fold gathers keep the top-k indices (a view); its weighting the softmax's
    // output (a view), which the softmax keeps when the logits need a gradient.
    if eg.router || (batched && (gate_up_w || down_w)) {
        t.push(term("router top-k expert indices, int64 (topk keeps them)", "topk", Unit::Small, "B·S·k", z.p, 8));
    }
    if eg.router || (batched && eg.down_out()) {
        t.push(term("routing weights: softmax over the top-k logits (softmax keeps its output)", "_softmax", Unit::Small, "B·S·k", z.p, z.rw));
    }
    match m.implementation {
        ExpertsImplementation::GroupedMm => grouped_mm(&mut t, &z),
        ExpertsImplementation::BatchedMm => batched_mm(&mut t, &z),
        ExpertsImplementation::Eager => eager(&mut t, m, &z),
    }
    if c.mode != Mode::Pure {
        t.push(c.term("layer output = h + experts (the next norm keeps it)", "add", Unit::A, 4));
    }
    t
}

/// `GptOssAttention` with `eager_attention_forward`'s sinks; `cache`: the DynamicCache's
/// copies are what the kernel reads (and keeps, with one key/value head per query head). A
/// matmul keeps each operand for the other's gradient; softmax and max keep theirs when the
/// scores need one (Q or K does).
fn attention(c: &Ctx, t: &mut Vec<Term>, me: u64, cache: bool, g: Grad) {
    let (qu, kvu) = (super::heads_unit(c, c.h), super::heads_unit(c, c.kvh));
    let repeated = c.h > c.kvh;
    let scores = g.q || g.k;
    if g.k {
        t.push(c.term("rope(Q), cat's contiguous output (the scores matmul keeps it)", "cat", qu, me));
    }
    match (repeated, cache) {
        _ if !g.q => {}
        (true, _) => t.push(c.term("K repeated to h heads (repeat_kv; the scores matmul keeps it)", "clone", qu, me)),
        (false, false) => t.push(c.term("rope(K), cat's contiguous output (the scores matmul keeps it)", "cat", kvu, me)),
        (false, true) => {}
    }
    if scores {
        t.push(c.small("max of cat([scores + mask, sinks]) over the keys: its indices, int64 (max keeps them)", "max", "B·h·S", c.b * c.h * c.s, 8));
    }
    if scores || g.v {
        t.push(c.term("softmax(cat − max) (B, h, S, S + 1), its S key columns (softmax keeps its output; weights·V keeps the sliced view)", "_softmax", Unit::S, me));
        t.push(c.small("its sink column", "_softmax", "B·h·S", c.b * c.h * c.s, me));
    }
    match (repeated, cache) {
        _ if !scores => {}
        (true, _) => t.push(c.term("V repeated to h heads (repeat_kv; weights·V keeps it)", "clone", qu, me)),
        // v_proj's output is (B, S, h_kv, d_h) underneath: folding it copies (a view when B or S is 1: the same bytes).
        (false, false) => t.push(c.term("V folded for weights·V (a copy unless B or S is 1; bmm keeps it)", "clone", kvu, me)),
        (false, true) => {}
    }
    if g.o_input {
        t.push(c.term("heads merged (transpose().contiguous(); o_proj keeps it)", "clone", qu, me));
    }
    if cache {
        let shared = if repeated { "" } else { "; the attention keeps the same tensor" };
        t.push(c.term(format!("DynamicCache keys (cat copy of rope(K){shared})"), "cat", kvu, me));
        t.push(c.term(format!("DynamicCache values (cat copy of V{shared})"), "cat", kvu, me));
    }
}

/// `GptOssAttention` under autocast over fp32 weights: q/k/v_proj give bf16, the fp32 cos/sin
/// promote rope(Q) and rope(K) back to fp32, and each `matmul` keeps its bf16 casts; the fp32
/// mask promotes the scores, so the sinks' cat, max and softmax run in fp32, and
/// `.to(value_states.dtype)` (or weights·V's cast, where the cache made V fp32) copies the
/// probabilities' key columns to bf16. The DynamicCache is made in the keys' fp32: its values'
/// cat promotes V to fp32.
fn attention_autocast(c: &Ctx, t: &mut Vec<Term>, cache: bool, g: Grad) {
    let (qu, kvu) = (super::heads_unit(c, c.h), super::heads_unit(c, c.kvh));
    let repeated = c.h > c.kvh;
    // K and V as the matmuls read them: h heads when repeated, else h_kv. Under peft a matmul
    // keeps an operand only for the other's gradient, softmax and max theirs only when the
    // scores need one (Q or K does), as in [`attention`].
    let ku = if repeated { qu } else { kvu };
    let scores = g.q || g.k;
    if g.k {
        t.push(c.term("rope(Q) (fp32) cast to bf16 (the scores matmul keeps it)", "_to_copy", qu, 2));
    }
    let k_from = match (repeated, cache) {
        (true, _) => "K repeated to h heads (repeat_kv, fp32)",
        (false, true) => "the DynamicCache's keys (fp32)",
        (false, false) => "rope(K) (fp32)",
    };
    if g.q {
        t.push(c.term(format!("{k_from} cast to bf16 (the scores matmul keeps it)"), "_to_copy", ku, 2));
    }
    if scores {
        t.push(c.small("max of cat([scores + mask, sinks]) over the keys: its indices, int64 (max keeps them)", "max", "B·h·S", c.b * c.h * c.s, 8));
        t.push(c.term("softmax(cat − max) (B, h, S, S + 1) in the mask's fp32, its S key columns (softmax keeps its output)", "_softmax", Unit::S, 4));
        t.push(c.small("its sink column", "_softmax", "B·h·S", c.b * c.h * c.s, 4));
    }
    if g.v {
        t.push(c.term("the probabilities' key columns cast to bf16 (weights·V keeps the copy)", "_to_copy", Unit::S, 2));
    }
    let (v_what, v_op) = match (repeated, cache) {
        (true, true) => ("the DynamicCache's values repeated to h heads (fp32), cast to bf16 (weights·V keeps it)", "_to_copy"),
        (false, true) => ("the DynamicCache's values (fp32) cast to bf16 (weights·V keeps it)", "_to_copy"),
        (true, false) => ("V (bf16) repeated to h heads (repeat_kv; weights·V keeps it)", "clone"),
        // v_proj's output is (B, S, h_kv, d_h) underneath: folding it copies (a view when B or S is 1: the same bytes).
        (false, false) => ("V (bf16) folded for weights·V (a copy unless B or S is 1; bmm keeps it)", "clone"),
    };
    if scores {
        t.push(c.term(v_what, v_op, ku, 2));
    }
    if g.weights {
        t.push(c.term("heads merged (transpose().contiguous(), bf16; o_proj keeps it)", "clone", qu, 2));
    }
    if cache {
        t.push(c.term("DynamicCache keys (cat copy of rope(K), fp32)", "cat", kvu, 4));
        t.push(c.term("DynamicCache values (cat of the bf16 V into the keys' fp32)", "cat", kvu, 4));
    }
}

/// `GptOssExperts._apply_gate` on the (rows, 2I) gate_up output of `elem` bytes: what it and
/// the down projection keep (`op` made the gate_up output). `cast`: the down projection is an
/// autocast matmul on an fp32 product (eager's), so it keeps its low copy instead.
fn gate(t: &mut Vec<Term>, z: &Sizes, op: &'static str, rows: u64, down: &str, elem: u64, cast: Option<u64>) {
    let ki = |what: String, op, elem| term(what, op, Unit::Ki, "B·S·k·I", rows * z.i, elem);
    if z.g.gate_up_out() {
        t.push(ki("gate_up output + bias, its gate columns [..., ::2] (its clamp keeps the view)".into(), op, elem));
        t.push(ki("gate_up output + bias, its up columns [..., 1::2] (its clamp keeps the view)".into(), op, elem));
        t.push(ki("gate.clamp(max=limit) (gate · sigmoid keeps it)".into(), "clamp", elem));
        t.push(ki("sigmoid(gate · alpha) (sigmoid keeps its output)".into(), "sigmoid", elem));
        t.push(ki("glu = gate · sigmoid ((up + 1) · glu keeps it)".into(), "mul", elem));
        t.push(ki("up.clamp(−limit, limit) + 1 (the product keeps it)".into(), "add", elem));
    }
    if z.g.down {
        match cast {
            Some(lo) => t.push(ki(format!("(up + 1) · glu cast to bf16 ({down} keeps the copy for its weight's gradient)"), "_to_copy", lo)),
            None => t.push(ki(format!("(up + 1) · glu ({down} keeps it for its weight's gradient)"), "mul", elem)),
        }
    }
}

/// `grouped_mm_experts_forward` with `has_bias` and `is_transposed`.
fn grouped_mm(t: &mut Vec<Term>, z: &Sizes) {
    let g = z.g;
    if g.router {
        t.push(term("perm: the routed rows sorted by expert, int64 (the routing weights' gather keeps it)", "sort", Unit::Small, "B·S·k", z.p, 8));
    }
    if z.weights {
        t.push(term("sorted expert ids, int64 (the gathers of gate_up_proj_bias and down_proj_bias keep them)", "sort", Unit::Small, "B·S·k", z.p, 8));
    }
    if g.x {
        t.push(term("token ids perm // k, int64 (the hidden states' gather keeps them)", "floor_divide", Unit::Small, "B·S·k", z.p, 8));
    }
    if g.gate_up {
        t.push(term("hidden states gathered in expert order (the grouped matmul keeps them)", "index", Unit::Ka, "B·S·k·d", z.p * z.d, z.me));
    }
    if g.down_out() {
        t.push(term("routing weights in expert order (the weighting keeps them)", "index", Unit::Small, "B·S·k", z.p, z.rw));
        t.push(term("offsets: cumsum of tokens per expert, int32 (the grouped matmuls keep them)", "cumsum", Unit::Small, "E", z.e, 4));
    }
    folds(t, z, true);
    // torch._grouped_mm is no autocast op: the experts run in the weights' type.
    gate(t, z, "_grouped_mm", z.p, "the down grouped matmul", z.me, None);
    folds(t, z, false);
    if g.router {
        t.push(term("down grouped matmul output + bias (the weighting keeps it)", "_grouped_mm", Unit::Ka, "B·S·k·d", z.p * z.d, z.me));
    }
    if g.weighted() {
        t.push(term("inv_perm, int64 (the unpermuting gather keeps it)", "index_put_", Unit::Small, "B·S·k", z.p, 8));
    }
}

/// peft's ParamWrapper folds `baddbmm(W, lhs, rhs)` as the experts read them: grouped_mm and
/// eager's matmuls (through their per-expert views) keep the fold for their input's gradient;
/// batched_mm's gather keeps only its index.
fn folds(t: &mut Vec<Term>, z: &Sizes, gate_up: bool) {
    if gate_up && z.g.gate_up_fold && z.g.x {
        t.push(term("gate_up_proj + ΔW, the ParamWrapper's fold (E, d, 2I) (kept for the input's gradient)", "baddbmm", Unit::Small, "E·d·2I", z.e * 2 * z.i * z.d, z.me));
    }
    if !gate_up && z.g.down_fold && z.g.gate_up_out() {
        t.push(term("down_proj + ΔW, the ParamWrapper's fold (E, I, d) (kept for its input's gradient)", "baddbmm", Unit::Small, "E·I·d", z.e * z.i * z.d, z.me));
    }
}

/// `batched_mm_experts_forward` with `has_bias` and `is_transposed` (the weighting keeps the
/// routing weights as a view of the softmax's output, the gathers the top-k indices' view).
/// Under autocast each bmm keeps bf16 casts of its gathered fp32 operands, and the fp32 bias
/// added in place keeps its output bf16.
fn batched_mm(t: &mut Vec<Term>, z: &Sizes) {
    let mm = z.lo.unwrap_or(z.me);
    let (cast, op) = if z.lo.is_some() { (" cast to bf16", "_to_copy") } else { ("", "index") };
    if z.g.gate_up {
        let rep = if z.lo.is_some() { "_to_copy" } else { "repeat_interleave" };
        t.push(term(format!("hidden states repeated k times{cast} (the up bmm keeps them)"), rep, Unit::Ka, "B·S·k·d", z.p * z.d, mm));
    }
    let kw = |what: String| term(what, op, Unit::Kw, "B·S·k·I·d", z.p * z.i * z.d, mm);
    if z.g.x {
        t.push(kw(format!("gate_up_proj[expert_ids] (B·S·k, d, 2I){cast}, its gate columns (the up bmm keeps it)")));
        t.push(kw(format!("gate_up_proj[expert_ids]{cast}, its up columns")));
    }
    gate(t, z, "bmm", z.p, "the down bmm", mm, None);
    if z.g.gate_up_out() {
        t.push(kw(format!("down_proj[expert_ids] (B·S·k, I, d){cast} (the down bmm keeps it)")));
    }
    if z.g.router {
        t.push(term("down bmm output + bias (the weighting keeps it)", "bmm", Unit::Ka, "B·S·k·d", z.p * z.d, mm));
    }
}

/// `GptOssExperts.forward`: per expert e hit with n_e rows (the n_e add up to B·S·k). Under
/// autocast each `@` is a matmul that keeps low casts of its input and of the expert's weight
/// slice (a view: cast per expert, never cached), and the fp32 bias added to its bf16 output
/// promotes the rest back to fp32.
fn eager(t: &mut Vec<Term>, m: &MoeConfig, z: &Sizes) {
    let rows = z.p;
    let (hit, n_hit) = match m.routing.counts(z.t as usize, m.top_k, m.experts) {
        Ok(counts) => {
            let n = counts.iter().filter(|&&n| n > 0).count();
            (format!("the {n} experts hit"), n as u64)
        }
        Err(_) => ("the experts hit".to_string(), 0),
    };
    let per = |what: &str| format!("{what}, over {hit} (Σ n_e = B·S·k)");
    t.push(term(per("torch.where(expert_mask[e]) rows (n_e, 2) int64 (its columns index the gather, the weights and index_add_)"), "nonzero", Unit::Small, "Σ n_e·2", rows * 2, 8));
    if z.g.gate_up {
        match z.lo {
            Some(lo) => t.push(term(per("hidden_states[token_idx] cast to bf16 (the gate_up matmul keeps it)"), "_to_copy", Unit::Ka, "B·S·k·d", rows * z.d, lo)),
            None => t.push(term(per("hidden_states[token_idx] (the gate_up matmul keeps it)"), "index", Unit::Ka, "B·S·k·d", rows * z.d, z.me)),
        }
    }
    if let Some(lo) = z.lo {
        // Each matmul keeps its weight slice's cast for its input's gradient (the folds
        // themselves are then not kept).
        match (z.g.x, z.g.gate_up_out()) {
            (true, _) => t.push(term(format!("gate_up_proj[e] (d, 2I) and down_proj[e] (I, d) cast to bf16, per expert hit ({hit}; uncached views, the matmuls keep them)"), "_to_copy", Unit::Small, "hit·3I·d", n_hit * 3 * z.i * z.d, lo)),
            (false, true) => t.push(term(format!("down_proj[e] (I, d) cast to bf16, per expert hit ({hit}; uncached views, its matmul keeps them)"), "_to_copy", Unit::Small, "hit·I·d", n_hit * z.i * z.d, lo)),
            (false, false) => {}
        }
    } else {
        // A fold's per-expert views keep the whole fold.
        folds(t, z, true);
    }
    gate(t, z, "add", rows, "the down matmul", z.me, z.lo);
    if z.lo.is_none() {
        folds(t, z, false);
    }
    if z.g.router {
        t.push(term(per("down matmul output + bias (the weighting keeps it)"), "add", Unit::Ka, "B·S·k·d", rows * z.d, z.me));
    }
    if z.g.down_out() {
        t.push(term(per("routing_weights[token_idx, top_k_pos] (the weighting keeps it)"), "index", Unit::Small, "Σ n_e", rows, z.rw));
    }
    t.push(term(per("weighted output (index_add_ keeps its source)"), "mul", Unit::Ka, "B·S·k·d", rows * z.d, z.me));
}

/// gpt-oss's terms (in place of [`super::terms`]'s Llama layer).
pub(super) fn terms(c: &Ctx, cfg: &ModelConfig, hf: &HfConfig, m: &MoeConfig, g: &GptOssParts) -> Terms {
    let me = types(c, hf).model;
    let checkpointing = cfg.checkpoint != Checkpoint::None;
    let cache = hf.use_cache && !checkpointing;
    let l = cfg.num_layers;
    let sliding = g.sliding.iter().take(l).filter(|s| **s).count() as u64;
    let block = if checkpointing {
        let mut b = vec![c.term("layer input (the checkpoint keeps it; layer 0's is the embedding output)", "add", Unit::A, me)];
        if !hf.reentrant && hf.bnb.as_ref().is_some_and(|q| q.int8().is_some()) {
            super::int8_checkpointed(c, &mut b, hf, me);
        }
        b
    } else {
        layer(c, hf, m, cache, true)
    };
    // Under peft layer 0's input (the frozen embedding's output) needs no gradient.
    // (peft's modules_to_save: a trained embedding copy makes it need one, hf.rs's terms.)
    let lora = hf.lora.is_some();
    let (embed_trains, head_trains) = hf.lora.as_ref().map_or((false, false), |l| (l.saves("embed_tokens"), l.saves("lm_head")));
    let first_block = (lora && !checkpointing && !embed_trains).then(|| layer(c, hf, m, cache, false));
    let mut outside = Vec::new();
    if !checkpointing && c.mode != Mode::Pure && (!lora || embed_trains) {
        outside.push(c.term("embedding output (layer 0's input_layernorm keeps it)", "embedding", Unit::A, 4));
    }
    // GptOssRotaryEmbedding: cos and sin of half the head, (1, S, d_h/2), in the model's type;
    // under peft without module adapters layer 0 keeps nothing for its RoPE: with no layer
    // after it nothing keeps them.
    let rope_kept = checkpointing || embed_trains || !hf.lora.as_ref().is_some_and(|l| l.targets.is_empty()) || l > 1;
    for which in ["cos", "sin"].into_iter().filter(|_| rope_kept) {
        t_small(&mut outside, &format!("RoPE {which} (1, S, d_h/2), shared by every layer's rotary products (or the checkpoints' closures)"), if which == "cos" { "cos" } else { "sin" }, "S·d_h/2", c.s * c.dk / 2, me);
    }
    if checkpointing {
        t_small(&mut outside, "position_ids (1, S) int64 (the checkpoints' closures hold it)", "arange", "S", c.s, 8);
        // Each layer's closure holds its type's mask: the full one and the window's, (B, 1, S, S) each.
        for (is, name) in [(false, "full"), (true, "sliding-window")] {
            if g.sliding.iter().take(l).any(|s| *s == is) {
                outside.push(Term {
                    what: format!("eager {name} mask (B, 1, S, S) in the model's dtype (the checkpoints' closures hold it)"),
                    op: "where",
                    formula: format!("B·S²·{me}"),
                    unit: Unit::Small,
                    elements: c.b * c.s * c.s,
                    elem: me,
                });
            }
        }
        if c.mode != Mode::Pure {
            outside.push(c.term("last layer's output (the final norm keeps it)", "add", Unit::A, 4));
        }
    }
    // Under peft the final norm's weight and lm_head are frozen: lm_head keeps only its weight,
    // but `hidden_states` stays bound until the forward returns.
    // Under autocast lm_head's cast of the output is kept only for its weight's gradient (not
    // under peft, where the frozen weight's uncached cast is kept instead).
    let output = !(lora && c.mode == Mode::Autocast) || head_trains;
    rms_norm(c, &mut outside, "norm", Unit::A, me, ("B·S", c.b * c.s), &["lm_head"], super::NormGrad { weight: !lora, output, product_fp32: true, ..FULL });
    if lora && !head_trains {
        super::frozen_cast(c, &mut outside, "lm_head", "V·d", c.v * c.d);
    }
    if c.mode == Mode::Autocast {
        // lm_head keeps its bf16 cast; the fp32 output stays bound until the forward returns.
        outside.push(c.term("final norm output (fp32), bound until the forward returns", "mul", Unit::A, 4));
    }
    if cache && sliding > 0 {
        // DynamicSlidingWindowLayer.lazy_initialization: each sliding layer's 0-d int64 window.
        outside.push(Term { what: "DynamicSlidingWindowLayer window tensors, one per sliding layer (0-d int64)".into(), op: "_to_copy", formula: format!("{sliding}·8"), unit: Unit::Small, elements: sliding, elem: 8 });
    }
    moe::router_logits(c, &mut outside, hf, m, cfg.num_layers);
    let bsv = c.b * c.s * c.v;
    let lo = types(c, hf).lo;
    let logits = vocab("logits", "mm", "B·S", bsv, lo);
    let mut loss = vec![vocab("log_softmax of logits.float(), all S rows (labels padded, shifted; cross_entropy keeps it)", "_log_softmax", "B·S", bsv, 4)];
    if lo != 4 {
        loss.push(vocab("logits.float() (an fp32 copy, dies when the loss function returns)", "_to_copy", "B·S", bsv, 4));
    }
    let (param_formula, mut cast_elements, mut cast_formula) = params(cfg, hf, m);
    if lora {
        // Autocast caches only casts of leaves that need a gradient: the adapters (not the
        // experts' ParamWrapper adapters, which meet no autocast op).
        // (and a trained lm_head copy's).
        let head = if head_trains { c.v * c.d } else { 0 };
        cast_elements = cfg.lora_param_count() + cfg.lora_bias_count() + head - moe::uncast_expert_adapters(cfg);
        cast_formula = format!("2 B × (the LoRA adapters' A and B{}) = 2 × {cast_elements}", if head_trains { " and lm_head's trainable copy" } else { "" });
    }
    Terms {
        block,
        first_block,
        first_layer: 0,
        sliding_block: None,
        outside,
        logits,
        loss,
        param_formula,
        cast_elements,
        cast_formula,
    }
}

/// The parameter count's formula, and the elements autocast casts and caches (each once per
/// region): the leaves `F.linear` reads, the attention's weights and biases, the router's
/// weight and bias, lm_head's (the tied embedding's); the sinks meet a `cat`, the experts
/// `_grouped_mm` (no autocast op) or casts of gathered or sliced views (never cached).
fn params(cfg: &ModelConfig, hf: &HfConfig, m: &MoeConfig) -> (String, u64, String) {
    let (d, v, l) = (cfg.d_model as u64, cfg.vocab_size as u64, cfg.num_layers as u64);
    let (h, hd) = (cfg.num_heads as u64, cfg.head_dim() as u64);
    let (q, kv) = (h * hd, cfg.num_kv_heads as u64 * hd);
    let (e, i) = (m.experts as u64, m.intermediate as u64);
    let (bias, bias_n) = if hf.qkv_bias { (" + h·d_h + 2h_kv·d_h + d (q/k/v/o biases)", q + 2 * kv + d) } else { ("", 0) };
    let head = if cfg.tied_embeddings { "" } else { " + V·d (lm_head)" };
    debug_assert_eq!(
        cfg.param_count(),
        v * d * if cfg.tied_embeddings { 1 } else { 2 } + l * (2 * d * q + 2 * d * kv + bias_n + h + e * d + e + e * (3 * i * d + 2 * i + d) + 2 * d) + d
    );
    let formula = format!("V·d (embedding){head} + L·(2d·h·d_h + 2d·h_kv·d_h{bias} + h (sinks) + E·d + E (router) + E·(3I·d + 2I + d) (experts' gate_up_proj, down_proj and their biases) + 2d) + d");
    let cast = l * (2 * d * q + 2 * d * kv + bias_n + e * d + e) + v * d;
    let head_w = if cfg.tied_embeddings { "V·d (the tied embedding, read by lm_head)" } else { "V·d (lm_head)" };
    let bias_w = if hf.qkv_bias { " + h·d_h + 2h_kv·d_h + d (biases)" } else { "" };
    let cast_formula = format!("2 B × (L·(2d·h·d_h + 2d·h_kv·d_h{bias_w} + E·d + E (router)) + {head_w}) = 2 × {cast}");
    (formula, cast, cast_formula)
}
