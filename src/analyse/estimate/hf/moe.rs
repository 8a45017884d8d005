//! The sparse mixture-of-experts block in closed form: transformers 5.23's
//! `MixtralSparseMoeBlock`, `Qwen3MoeSparseMoeBlock` and `Qwen2MoeSparseMoeBlock` (the op
//! sequence is src/model/hf/moe_5_23.rs) in place of the dense MLP, everything else of the
//! layer being Mistral's, Qwen3's or Qwen2's. With T = B·S tokens each routed to k of E
//! experts of width I, what autograd keeps:
//! - the router: softmax (fp32) keeps its (T, E) output; topk its int64 indices; the
//!   renormalisation (Mixtral, Qwen `norm_topk_prob`) divides the top-k values by their sum
//!   and keeps both;
//! - the experts, one tensor per routed row (T·k of them; `--routing` decides which expert
//!   gets how many, never how many there are, so the sums below hold for any split):
//!   `grouped_mm` keeps the rows gathered in expert order, its output's two halves (silu and
//!   the product), the product, the down output (the weighting keeps it), the sorted routing
//!   weights, the permutation, the token ids, its inverse and the int32 offsets; `batched_mm`
//!   the repeated rows and, per row, its expert's gathered gate_up (2I×d) and down (d×I)
//!   matrices; `eager` the same per expert that was hit as a plain linear keeps, with its
//!   `torch.where` rows, its routing weights and `index_add_`'s source;
//! - Qwen2-MoE's shared expert: a dense MLP of width I_s and `sigmoid(shared_expert_gate)`.
//!
//! Mixtral keeps its routing weights in fp32 (the softmax's type) whatever the model's; the
//! Qwens cast them back to the model's. peft's LoRA on the attention's linears (and on
//! Qwen2-MoE's shared expert's) is derived: the router and the routed experts stay frozen, so
//! they keep only what their input's gradient needs (not the rows the up projection reads, nor
//! the down projection's input), and nothing in a layer whose input needs none (layer 0 with
//! the attention frozen); so is QLoRA (4-bit nn.Linear modules, the router and experts in their
//! dtype; on gpt-oss and DeepSeek-V3 too), and bf16 autocast of the three families here
//! (grouped_mm is not an autocast op; batched_mm's bmm and eager's linears keep bf16 casts),
//! with LoRA too (over fp32 weights the frozen router and shared expert keep their weights'
//! uncached casts), and LLM.int8() where profile runs it (Mixtral, Qwen3-MoE, gpt-oss: the
//! attention's 8-bit linears keep their inputs, MatMul8bitLt). peft's ParamWrapper on the
//! experts and router (`--target-parameters`) is derived in fp32 and pure bf16, here, on
//! gpt-oss and on DeepSeek-V3 ([`ExpertGrad`]: the folds train, so the block keeps what their
//! gradients need even where its input needs none; [`param_wrapper`]), and under autocast
//! (the router's fold's cast; baddbmm is no autocast op, so the folds keep the weights' type
//! and the experts' adapters are never cast, [`uncast_expert_adapters`]); the router's
//! auxiliary loss is derived ([`router_logits`]: every layer's logits held until the forward
//! returns; load_balancing_loss_func's softmaxes lie past the loss's moment).
use super::{types, Arch};
use crate::analyse::estimate::{sized, Ctx, Mode, Term, Unit};
use crate::model::hf::moe::{ExpertsImplementation, MoeConfig, MoeFamily};
use crate::model::hf::HfConfig;
use crate::model::config::MAX_BYTES;
use crate::model::{ConfigError, ModelConfig};

/// Refuses what the closed form does not derive of an MoE model, naming the flag.
pub(super) fn check(hf: &HfConfig, m: &MoeConfig) -> Result<(), ConfigError> {
    let family = m.family.model_type();
    // The router's auxiliary loss (`output_router_logits`) is derived where profile runs it
    // (Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss; with LoRA and 4-bit loads as
    // moe_grid/aux_loss_lora.json measured them, options/moe.rs refusing the rest):
    // [`router_logits`].
    // LoRA on the attention (and Qwen2-MoE's shared expert) is derived, the router and experts
    // frozen (hf.rs's layer, hf/deepseek.rs, hf/gpt_oss.rs); so is peft's ParamWrapper
    // (`--target-parameters`, named or converted by peft from --target-modules) on every family
    // in fp32, pure bf16 and under autocast (`param_wrapper`, the experts' folds).
    // QLoRA is derived: bitsandbytes quantizes the nn.Linear modules (the attention's,
    // Qwen2-MoE's shared expert's, DeepSeek-V3's dense and shared MLPs), whose MatMul4Bit keeps
    // nothing, and leaves the router and experts in their dtype (estimate.rs's storage).
    // LLM.int8() is derived where profile runs it (Mixtral, Qwen3-MoE, gpt-oss: the attention's
    // linears 8-bit, their MatMul8bitLt keeping each input); profile refuses it on Qwen2-MoE and
    // DeepSeek-V3 (options/lora_targets.rs), and so does the closed form.
    if let Some(q) = hf.bnb.as_ref().filter(|q| q.int8().is_some() && (m.shared_intermediate > 0 || m.deepseek.is_some())) {
        return Err(ConfigError::new(q.flag(), format!("a {} {family} model is not derived in closed form (4-bit is); `profile` refuses it too", q.bits())));
    }
    // peft's bias on Mixtral, Qwen3-MoE and Qwen2-MoE trains the attention's biases (where the
    // config has them) only, as on the dense layers (hf.rs's layer); on gpt-oss the attention's
    // and the router's (`mlp.router.bias`; the experts' `*_bias` are not named `*.bias`:
    // hf/gpt_oss.rs), on DeepSeek-V3 attention_bias's (hf/deepseek.rs).
    // Autocast over fp32 weights is derived for Mixtral, Qwen3-MoE, Qwen2-MoE (here), gpt-oss
    // (hf/gpt_oss.rs) and DeepSeek-V3 (hf/deepseek.rs): grouped_mm is not an autocast op (the experts run in fp32),
    // batched_mm's bmm and eager's linears/matmuls cast to the low type; the routers and the
    // shared expert run in it. Over bf16 weights nothing is cast (pure bf16's terms, save
    // DeepSeek-V3's router).
    // LoRA under autocast is derived for every family: here the frozen router's and shared
    // expert's uncached casts (the adapters' casts are cached); gpt-oss's and DeepSeek-V3's
    // frozen linears in hf/gpt_oss.rs and hf/deepseek.rs (over bf16 weights nothing frozen is
    // cast).
    Ok(())
}

/// `output_router_logits` (the router's auxiliary loss): `capture_outputs`' hook keeps every
/// router's logits, (B·S, E) in the router linear's output type (bf16 under autocast), in the
/// output's `router_logits` until the forward returns (a checkpointed layer's too: its first
/// forward records them, its recomputation nothing). `load_balancing_loss_func` runs after the
/// loss: its per-layer softmaxes (kept for backward) and counts lie past the loss's moment, so
/// the training bound leaves them out (a lower bound still: tests/estimate_moe.rs).
pub(super) fn router_logits(c: &Ctx, t: &mut Vec<Term>, hf: &HfConfig, m: &MoeConfig, layers: usize) {
    if !m.output_router_logits {
        return;
    }
    let elem = types(c, hf).lo;
    let n = layers as u64 * c.b * c.s * m.experts as u64;
    t.push(Term {
        what: "every layer's router logits (B·S, E), kept in the output's router_logits (output_router_logits) until the forward returns".into(),
        op: "mm",
        formula: format!("L·B·S·E·{elem}"),
        unit: Unit::Small,
        elements: n,
        elem,
    });
}

/// Refuses a run whose expert tensors could not be counted: the largest (batched_mm's gathered
/// (B·S·k, 2I, d) weights), 16 bytes an element, over every layer with room to spare, stays
/// below [`MAX_BYTES`] as [`ModelConfig::check_sizes`] keeps the dense ones.
pub fn check_range(cfg: &ModelConfig, b: usize, s: usize) -> Result<(), ConfigError> {
    let Some(m) = cfg.hf().and_then(|h| h.moe.as_ref()) else { return Ok(()) };
    let n = [b, s, m.top_k, 2, m.intermediate.max(m.shared_intermediate).max(m.experts), cfg.d_model, 16, 64, cfg.num_layers + 4]
        .iter()
        .try_fold(1u64, |a, &x| a.checked_mul(x as u64))
        .filter(|&n| n <= MAX_BYTES);
    match n {
        Some(_) => Ok(()),
        None => Err(ConfigError::new(
            "--context-length",
            format!("the expert tensors of {} × {} tokens routed to {} experts of width {} would have more bytes than the 2^62 vramscope can count; lower --batch-size or --context-length", b, s, m.top_k, m.intermediate),
        )),
    }
}

/// The block's sizes: T tokens, P = T·k routed rows, and the element sizes.
pub(super) struct Sizes {
    pub t: u64,
    pub p: u64,
    pub d: u64,
    pub i: u64,
    pub e: u64,
    /// The model's bytes per element (4, or 2 in pure bf16).
    pub me: u64,
    /// The routing weights' (4 for Mixtral and DeepSeek-V3, the model's for the Qwens).
    pub rw: u64,
    /// The experts' matmul outputs' (and kept operands'): the model's, or bf16 where autocast
    /// casts them (batched_mm's bmm, eager's linears; grouped_mm is not an autocast op).
    pub mm: u64,
    /// Which of the block's tensors need a gradient.
    pub g: ExpertGrad,
}

/// Which of a sparse layer's parameters peft's ParamWrapper wraps (`--target-parameters`).
#[derive(Clone, Copy)]
pub(in crate::analyse::estimate) struct Wrapped {
    pub router: bool,
    pub gate_up: bool,
    pub down: bool,
}

impl Wrapped {
    pub fn any(&self) -> bool {
        self.router || self.gate_up || self.down
    }
}

/// Which of the sparse block's tensors need a gradient: its input, the routing weights, each
/// expert weight as the experts read it (a leaf in full fine-tuning, peft's ParamWrapper fold
/// `baddbmm(W, lhs, rhs)` under `--target-parameters`, frozen otherwise).
#[derive(Clone, Copy)]
pub(in crate::analyse::estimate) struct ExpertGrad {
    pub x: bool,
    /// The router's outputs: its input needs one, or its weight is a ParamWrapper fold.
    pub router: bool,
    pub gate_up: bool,
    pub down: bool,
    /// The weight read is a fold (a tensor of its own, kept where an op keeps its weight).
    pub gate_up_fold: bool,
    pub down_fold: bool,
}

impl ExpertGrad {
    /// The gate_up output (and silu's) needs a gradient.
    pub(super) fn gate_up_out(&self) -> bool {
        self.x || self.gate_up
    }
    /// The down projection's output needs a gradient.
    pub(super) fn down_out(&self) -> bool {
        self.gate_up_out() || self.down
    }
    /// The weighted output (what index_add_/the unpermute reads) needs a gradient.
    pub(super) fn weighted(&self) -> bool {
        self.down_out() || self.router
    }
}

pub(super) fn term(what: impl Into<String>, op: &'static str, unit: Unit, formula: &str, elements: u64, elem: u64) -> Term {
    let formula = match unit {
        Unit::Small => format!("{formula}·{elem}"),
        _ if elem == 4 => format!("{formula}·4"),
        _ => format!("{formula}·{elem} = {}", sized(unit, elem)),
    };
    Term { what: what.into(), op, formula, unit, elements, elem }
}

/// The linears that read post_attention_layernorm's output (each keeps it; the experts gather
/// rows of it by index and keep the index only).
pub(super) fn norm_readers(m: &MoeConfig) -> &'static [&'static str] {
    if m.shared_intermediate > 0 {
        &["shared_expert.gate_proj", "shared_expert.up_proj", "gate (the router)", "shared_expert_gate"]
    } else {
        &["gate (the router)"]
    }
}

/// What the sparse block keeps for backward, in forward order (its input, the norm's output,
/// is counted with the norm); `x_grad`: whether that input needs a gradient. Under peft the
/// router and the routed experts are frozen: they keep what their input's gradient needs, and
/// nothing without it; Qwen2-MoE's shared expert keeps what its LoRA adapters need.
pub(super) fn block(c: &Ctx, t: &mut Vec<Term>, hf: &HfConfig, m: &MoeConfig, x_grad: bool) {
    let me = types(c, hf).model;
    let k = m.top_k as u64;
    let tokens = c.b * c.s;
    let lora = hf.lora.as_ref();
    let weights = lora.is_none();
    // The router's logits and the shared expert's linears are bf16 under autocast (the Qwens'
    // routing weights take the logits' type); grouped_mm runs the experts in the model's.
    let lo = types(c, hf).lo;
    let mm = if m.implementation == ExpertsImplementation::GroupedMm { me } else { lo };
    // peft's ParamWrapper (`--target-parameters`) on the router and the experts.
    let wrapped = |p: &str| lora.is_some_and(|l| l.targets_parameter(p));
    let (router_w, gate_up_w, down_w) = (lora.is_some_and(|l| l.targets_router()), wrapped("mlp.experts.gate_up_proj"), wrapped("mlp.experts.down_proj"));
    let g = ExpertGrad { x: x_grad, router: x_grad || router_w, gate_up: weights || gate_up_w, down: weights || down_w, gate_up_fold: gate_up_w, down_fold: down_w };
    let z = Sizes { t: tokens, p: tokens * k, d: c.d, i: m.intermediate as u64, e: m.experts as u64, me, rw: if m.family == MoeFamily::Mixtral { 4 } else { lo }, mm, g };
    let is = m.shared_intermediate as u64;
    let adapted = |p: &str| lora.is_some_and(|l| l.targets(p));
    // With fp32 weights and no dropout lora_A keeps the projection's input itself.
    let a_keeps_input = |p: &str| lora.is_none_or(|l| l.targets(p) && l.dropout == 0.0 && c.mode == Mode::Fp32);
    let a = |what: String, op, elem| term(what, op, Unit::A, "B·S·d", z.t * z.d, elem);
    let fs = |what: String, op, elem| term(format!("shared_expert {what}"), op, Unit::Fs, "B·S·I_s", z.t * is, elem);
    // Whether the shared expert's output and its gate's need a gradient.
    let (mut shared, mut gated) = (false, false);
    if is > 0 {
        // Qwen2MoeMLP on every token: silu keeps its input, the product each factor; the
        // gated product keeps down_proj's output and the sigmoid's.
        let (g, u) = (x_grad || adapted("gate_proj"), x_grad || adapted("up_proj"));
        // Under autocast over fp32 weights each frozen linear whose input needs a gradient keeps
        // its weight's uncached bf16 cast (hf.rs's frozen_cast): the shared expert's, its gate's.
        if lora.is_some() {
            let (sd, sf) = (z.d * is, "d·I_s");
            if x_grad {
                super::frozen_cast(c, t, "shared_expert.gate_proj", sf, sd);
                super::frozen_cast(c, t, "shared_expert.up_proj", sf, sd);
            }
            if g || u {
                super::frozen_cast(c, t, "shared_expert.down_proj", sf, sd);
            }
            if x_grad {
                super::frozen_cast(c, t, "shared_expert_gate", "d", z.d);
            }
        }
        if let Some(lc) = lora {
            for p in ["gate_proj", "up_proj"].into_iter().filter(|p| adapted(p)) {
                super::adapter_on(c, t, lc, &format!("shared_expert.{p}"), &a, x_grad);
            }
        }
        if g {
            t.push(fs("gate_proj output (silu keeps its input)".into(), "mm", lo));
        }
        if u {
            t.push(fs("silu(gate)".into(), "silu", lo));
        }
        if g {
            t.push(fs("up_proj output".into(), "mm", lo));
        }
        if a_keeps_input("down_proj") {
            t.push(fs("silu·up (down_proj keeps it)".into(), "mul", lo));
        }
        if let Some(lc) = lora.filter(|_| adapted("down_proj")) {
            super::adapter_on(c, t, lc, "shared_expert.down_proj", &|what, op, elem| fs(what, op, elem), g || u);
        }
        shared = g || u || adapted("down_proj");
        gated = x_grad || adapted("shared_expert_gate");
        if gated {
            t.push(term("shared_expert down_proj output (the gated product keeps it)", "mm", Unit::A, "B·S·d", z.t * z.d, lo));
        }
        if let Some(lc) = lora.filter(|_| adapted("shared_expert_gate")) {
            super::adapter_on(c, t, lc, "shared_expert_gate", &a, x_grad);
        }
    }
    if let Some(lc) = lora.filter(|l| !l.target_parameters.is_empty()) {
        param_wrapper(c, t, lc, &z, true);
    }
    if x_grad && lora.is_some() && !router_w {
        // The frozen router's linear keeps its weight's cast (under autocast over fp32 weights).
        super::frozen_cast(c, t, "router (gate)", "E·d", z.e * z.d);
    }
    if router_w && c.mode == Mode::Autocast {
        // The router's linear keeps its input's cast for the fold's gradient (the norm states
        // no reader's cast here: the other readers are frozen or keep their adapters' own).
        t.push(term("post_attention_layernorm output (fp32) cast to bf16 for gate (the router) (its linear keeps it for the fold's gradient)", "_to_copy", Unit::A, "B·S·d", z.t * z.d, 2));
    }
    if g.router {
        router(t, m, &z);
    }
    if g.x || g.router || g.gate_up || g.down {
        experts(t, m, &z);
    }
    if shared || gated {
        t.push(term("sigmoid(shared_expert_gate(x)) (B·S, 1) (the product keeps it)", "sigmoid", Unit::Small, "B·S", z.t, lo));
    }
}

/// peft's ParamWrapper (crate::model::lora_params) in the model's dtype: the router's fold
/// `W + (B @ A)·scaling` (E, d), which its linear keeps for its input's gradient (the delta's
/// mm keeps only the adapters); per wrapped expert weight, the fold's `baddbmm` keeps its
/// factors B (E, out, r) and A (E, r, in) as `.to(W.dtype)` made them: views of the adapters
/// in fp32, bf16 copies over bf16 weights (the adapters stay fp32).
pub(super) fn param_wrapper(c: &Ctx, t: &mut Vec<Term>, lc: &crate::model::lora::LoraConfig, z: &Sizes, router: bool) {
    if router && lc.targets_router() && z.g.x {
        if c.mode == Mode::Autocast {
            // The delta's mm runs in bf16 (the adapters' cached casts), `.to(W.dtype)` makes it
            // fp32 again; F.linear keeps its uncached cast of the (non-leaf) fp32 fold.
            t.push(term("router weight + ΔW, the ParamWrapper's fold (E, d), cast to bf16 (uncached; the router's linear keeps it for its input's gradient)", "_to_copy", Unit::Small, "E·d", z.e * z.d, 2));
        } else {
            t.push(term("router weight + ΔW, the ParamWrapper's fold (E, d) (the router's linear keeps it for its input's gradient)", "add", Unit::Small, "E·d", z.e * z.d, z.me));
        }
    }
    if z.me == 4 || c.mode != Mode::Pure {
        return;
    }
    let r = lc.r as u64;
    if z.g.gate_up_fold {
        let rg = lc.gate_up_rank() as u64;
        t.push(term("gate_up_proj's lora_B (E, 2I, r) and lora_A (E, r, d) cast to bf16 (the fold's baddbmm keeps them)", "_to_copy", Unit::Small, "E·r·(2I + d)", z.e * rg * (2 * z.i + z.d), z.me));
    }
    if z.g.down_fold {
        t.push(term("down_proj's lora_B (E, d, r) and lora_A (E, r, I) cast to bf16 (the fold's baddbmm keeps them)", "_to_copy", Unit::Small, "E·r·(d + I)", z.e * r * (z.i + z.d), z.me));
    }
}

/// Elements of the experts' ParamWrapper adapters (gate_up_proj's and down_proj's lora_A and
/// lora_B over the sparse layers): their factors reach `baddbmm`, no autocast op, so autocast
/// never casts (nor caches) them; the router's meet its delta's mm and are cached.
pub(in crate::analyse::estimate) fn uncast_expert_adapters(cfg: &ModelConfig) -> u64 {
    let Some((m, lc)) = cfg.hf().and_then(|h| h.moe.as_ref().zip(h.lora.as_ref())) else { return 0 };
    let (e, i, d) = (m.experts as u64, m.intermediate as u64, cfg.d_model as u64);
    let mut n = 0;
    if lc.targets_parameter("mlp.experts.gate_up_proj") {
        n += lc.gate_up_rank() as u64 * e * (d + 2 * i);
    }
    if lc.targets_parameter("mlp.experts.down_proj") {
        n += lc.r as u64 * e * (i + d);
    }
    let sparse = (0..cfg.num_layers).filter(|&l| m.deepseek.as_ref().is_none_or(|ds| ds.is_sparse(l))).count() as u64;
    n * sparse
}

/// What `--experts-implementation`'s forward keeps (shared with DeepSeek-V3's sparse block).
pub(super) fn experts(t: &mut Vec<Term>, m: &MoeConfig, z: &Sizes) {
    match m.implementation {
        ExpertsImplementation::GroupedMm => grouped_mm(t, z),
        ExpertsImplementation::BatchedMm => batched_mm(t, m, z),
        ExpertsImplementation::Eager => eager(t, m, z),
    }
}

/// Whether the router divides its top-k by their sum.
fn renormalises(m: &MoeConfig) -> bool {
    m.family == MoeFamily::Mixtral || m.norm_topk_prob
}

/// `*TopKRouter`: logits (not kept), softmax in fp32 (keeps its output), topk (keeps its
/// int64 indices), the renormalisation (keeps the values and their sum).
fn router(t: &mut Vec<Term>, m: &MoeConfig, z: &Sizes) {
    t.push(term("router softmax(logits.float()) (T, E) (softmax keeps its output)", "_softmax", Unit::Small, "B·S·E", z.t * z.e, 4));
    if renormalises(m) {
        t.push(term("router top-k probabilities, fp32 (the renormalising division keeps them)", "topk", Unit::Small, "B·S·k", z.p, 4));
        t.push(term("their sum over k, fp32 (the division keeps it)", "sum", Unit::Small, "B·S", z.t, 4));
    }
    t.push(term("router top-k expert indices, int64 (topk keeps them)", "topk", Unit::Small, "B·S·k", z.p, 8));
}

/// The gate_up output, written as its two halves: silu keeps the gate half, the product the
/// up half (both views of the one (rows, 2I) tensor); then silu's output and the product.
fn gate_up(t: &mut Vec<Term>, z: &Sizes, op: &'static str, rows: u64, down: &str) {
    let ki = |what: String, op| term(what, op, Unit::Ki, "B·S·k·I", rows * z.i, z.mm);
    if z.g.gate_up_out() {
        t.push(ki("gate_up output, its gate half (silu keeps it)".into(), op));
        t.push(ki("gate_up output, its up half (the product keeps it)".into(), op));
        t.push(ki("silu(gate)".into(), "silu"));
    }
    if z.g.down {
        t.push(ki(format!("silu·up ({down} keeps it for its weight's gradient)"), "mul"));
    }
}

/// peft's ParamWrapper folds `baddbmm(W, lhs, rhs)` as the experts read them: an op that keeps
/// its weight for its input's gradient keeps the fold (grouped_mm, eager's linears through
/// their per-expert views; under autocast those keep their casts instead); batched_mm's gather
/// keeps only its index. (baddbmm is no autocast op here: the folds are in the weights' type.)
fn folds(t: &mut Vec<Term>, z: &Sizes, gate_up: bool) {
    if gate_up && z.g.gate_up_fold && z.g.x {
        t.push(term("gate_up_proj + ΔW, the ParamWrapper's fold (E, 2I, d) (kept for the input's gradient)", "baddbmm", Unit::Small, "E·2I·d", z.e * 2 * z.i * z.d, z.me));
    }
    if !gate_up && z.g.down_fold && z.g.gate_up_out() {
        t.push(term("down_proj + ΔW, the ParamWrapper's fold (E, d, I) (kept for its input's gradient)", "baddbmm", Unit::Small, "E·d·I", z.e * z.i * z.d, z.me));
    }
}

/// `grouped_mm_experts_forward`.
fn grouped_mm(t: &mut Vec<Term>, z: &Sizes) {
    if z.g.router {
        t.push(term("perm: the routed rows sorted by expert, int64 (the routing weights' gather keeps it)", "sort", Unit::Small, "B·S·k", z.p, 8));
    }
    if z.g.x {
        t.push(term("token ids perm // k, int64 (the hidden states' gather keeps them)", "floor_divide", Unit::Small, "B·S·k", z.p, 8));
    }
    if z.g.gate_up {
        t.push(term("hidden states gathered in expert order (the grouped matmul keeps them for its weight's gradient)", "index", Unit::Ka, "B·S·k·d", z.p * z.d, z.me));
    }
    if z.g.down_out() {
        t.push(term("routing weights in expert order (the weighting keeps them)", "index", Unit::Small, "B·S·k", z.p, z.rw));
        // Either grouped matmul with a node keeps them.
        t.push(term("offsets: cumsum of tokens per expert, int32 (the grouped matmuls keep them)", "cumsum", Unit::Small, "E", z.e, 4));
    }
    folds(t, z, true);
    gate_up(t, z, "_grouped_mm", z.p, "the down grouped matmul");
    folds(t, z, false);
    if z.g.router {
        t.push(term("down grouped matmul output (the weighting keeps it)", "_grouped_mm", Unit::Ka, "B·S·k·d", z.p * z.d, z.me));
    }
    if z.g.weighted() {
        t.push(term("inv_perm, int64 (the unpermuting gather keeps it)", "index_put_", Unit::Small, "B·S·k", z.p, 8));
    }
}

/// `batched_mm_experts_forward`.
fn batched_mm(t: &mut Vec<Term>, m: &MoeConfig, z: &Sizes) {
    // The weighting keeps the routing weights as the experts get them: the renormalised fp32
    // values (Mixtral; a Qwen in fp32), the Qwens' cast to the model's type, or the top-k
    // values themselves.
    // (DeepSeek-V3's are scaled by routed_scaling_factor last.)
    let op = if m.deepseek.is_some() { "mul" } else if z.rw != 4 { "_to_copy" } else if renormalises(m) { "div" } else { "topk" };
    if z.g.down_out() {
        t.push(term("routing weights, flattened (the weighting keeps them)", op, Unit::Small, "B·S·k", z.p, z.rw));
    }
    // Under autocast each bmm keeps its bf16 casts of the gathered (fp32) operands.
    let cast = if z.mm != z.me { " cast to bf16" } else { "" };
    if z.g.gate_up {
        let op = if cast.is_empty() { "repeat_interleave" } else { "_to_copy" };
        t.push(term(format!("hidden states repeated k times{cast} (the up bmm keeps them for its weight's gradient)"), op, Unit::Ka, "B·S·k·d", z.p * z.d, z.mm));
    }
    if !z.g.router && (z.g.gate_up_fold || z.g.down_fold) {
        // The router's topk keeps its indices only when its input needs a gradient.
        t.push(term("top-k expert indices, int64 (the folds' gathers keep them)", "topk", Unit::Small, "B·S·k", z.p, 8));
    }
    let op = if cast.is_empty() { "index" } else { "_to_copy" };
    let kw = |what: String| term(what, op, Unit::Kw, "B·S·k·I·d", z.p * z.i * z.d, z.mm);
    if z.g.x {
        t.push(kw(format!("gate_up_proj[expert_ids] (B·S·k, 2I, d){cast}, its gate rows (the up bmm keeps it)")));
        t.push(kw(format!("gate_up_proj[expert_ids]{cast}, its up rows")));
    }
    gate_up(t, z, "bmm", z.p, "the down bmm");
    if z.g.gate_up_out() {
        t.push(kw(format!("down_proj[expert_ids] (B·S·k, d, I){cast} (the down bmm keeps it)")));
    }
    if z.g.router {
        t.push(term("down bmm output (the weighting keeps it)", "bmm", Unit::Ka, "B·S·k·d", z.p * z.d, z.mm));
    }
}

/// The modeling file's loop over the experts that were hit: per expert e with n_e rows (the
/// routing's split; the n_e add up to B·S·k), what its ops keep.
fn eager(t: &mut Vec<Term>, m: &MoeConfig, z: &Sizes) {
    // Any split the options accept adds up to the B·S·k routed rows (Routing::counts checks
    // it); the split itself only says how many experts the loop visits.
    let rows = z.p;
    let (hit, n_hit) = match m.routing.counts(z.t as usize, m.top_k, m.experts) {
        Ok(counts) => {
            debug_assert_eq!(counts.iter().map(|&n| n as u64).sum::<u64>(), rows);
            let n = counts.iter().filter(|&&n| n > 0).count();
            (format!("the {n} experts hit"), n as u64)
        }
        Err(_) => ("the experts hit".to_string(), 0),
    };
    let per = |what: &str| format!("{what}, over {hit} (Σ n_e = B·S·k)");
    // (index_add_ keeps its columns whenever its source needs a gradient: always here.)
    t.push(term(per("torch.where(expert_mask[e]) rows (n_e, 2) int64 (its columns index the gather, the weights and index_add_)"), "nonzero", Unit::Small, "Σ n_e·2", rows * 2, 8));
    let autocast = z.mm != z.me;
    if z.g.gate_up {
        let (what, op) = if autocast { ("hidden_states[token_idx] cast to bf16 (gate_up's linear keeps it for its weight's gradient)", "_to_copy") } else { ("hidden_states[token_idx] (gate_up's linear keeps it for its weight's gradient)", "index") };
        t.push(term(per(what), op, Unit::Ka, "B·S·k·d", rows * z.d, z.mm));
    }
    if autocast {
        // Each expert's weights are views (`gate_up_proj[e]`), not leaves: autocast does not
        // cache their casts, and each linear keeps its own for its input's gradient.
        match (z.g.x, z.g.gate_up_out()) {
            (true, _) => t.push(term(format!("gate_up_proj[e] (2I, d) and down_proj[e] (d, I) cast to bf16, per expert hit ({hit}; uncached views, the linears keep them)"), "_to_copy", Unit::Small, "hit·3I·d", n_hit * 3 * z.i * z.d, 2)),
            (false, true) => t.push(term(format!("down_proj[e] (d, I) cast to bf16, per expert hit ({hit}; uncached views, its linear keeps them)"), "_to_copy", Unit::Small, "hit·I·d", n_hit * z.i * z.d, 2)),
            (false, false) => {}
        }
    } else {
        // A fold's per-expert views keep the whole fold.
        folds(t, z, true);
    }
    gate_up(t, z, "mm", rows, "down_proj's linear");
    if !autocast {
        folds(t, z, false);
    }
    if z.g.router {
        t.push(term(per("down_proj output (the weighting keeps it)"), "mm", Unit::Ka, "B·S·k·d", rows * z.d, z.mm));
    }
    if z.g.down_out() {
        t.push(term(per("top_k_weights[token_idx, top_k_pos] (the weighting keeps it)"), "index", Unit::Small, "Σ n_e", rows, z.rw));
    }
    // Mixtral's fp32 weights promote the product to fp32: `.to(final_hidden_states.dtype)`
    // makes the copy index_add_ keeps (its source) in the model's type.
    let op = if z.rw != z.me { "_to_copy" } else { "mul" };
    t.push(term(per("weighted output in the model's type (index_add_ keeps its source)"), op, Unit::Ka, "B·S·k·d", rows * z.d, z.me));
}

/// The parameter count's formula of an MoE model (`bias_names`/`qk_norm` as the dense
/// formula writes them, `extra` their elements per layer).
pub(super) fn param_formula(cfg: &ModelConfig, hf: &HfConfig, m: &MoeConfig, bias_names: &str, qk_norm: &str, extra: u64) -> String {
    let (d, v, l) = (cfg.d_model as u64, cfg.vocab_size as u64, cfg.num_layers as u64);
    let (q, kv) = ((cfg.num_heads * cfg.head_dim()) as u64, (cfg.num_kv_heads * cfg.head_dim()) as u64);
    let (e, i, is) = (m.experts as u64, m.intermediate as u64, m.shared_intermediate as u64);
    let head = if cfg.tied_embeddings { "" } else { " + V·d (lm_head)" };
    let shared = if is > 0 { " + 3d·I_s + d (shared_expert and shared_expert_gate)" } else { "" };
    debug_assert!(hf.model_type == Arch::Mistral || hf.model_type == Arch::Qwen3 || hf.model_type == Arch::Qwen2);
    debug_assert_eq!(
        cfg.param_count(),
        v * d * if cfg.tied_embeddings { 1 } else { 2 } + l * (2 * d * q + 2 * d * kv + extra + e * d + 3 * e * i * d + if is > 0 { 3 * d * is + d } else { 0 } + 2 * d) + d
    );
    format!("V·d (embedding){head} + L·(2d·h·d_h + 2d·h_kv·d_h{bias_names} + E·d (router) + 3E·I·d (experts' gate_up_proj and down_proj){shared} + 2d{qk_norm}) + d")
}

/// The MoE symbols the block uses, with their byte values (4-byte elements).
pub(in crate::analyse::estimate) fn symbols(c: &Ctx, m: &MoeConfig, used: impl Fn(Unit) -> bool) -> Vec<(String, String, u64)> {
    let (p, i) = (c.b * c.s * m.top_k as u64, m.intermediate as u64);
    let mut out = Vec::new();
    for (u, name, formula, elements) in [
        (Unit::Fs, "fs", "B·S·I_s·4", c.b * c.s * m.shared_intermediate as u64),
        (Unit::Ka, "ka", "B·S·k·d·4", p * c.d),
        (Unit::Ki, "ki", "B·S·k·I·4", p * i),
        (Unit::Kw, "kw", "B·S·k·I·d·4", p * i * c.d),
    ] {
        if used(u) {
            out.push((name.to_string(), formula.to_string(), elements * 4));
        }
    }
    out
}

/// Qwen2-MoE's `use_sliding_window`: which layers slide (every other one below
/// max_window_layers, HfConfig::sliding_layers); None on every other model.
pub(super) fn window_layers(hf: &HfConfig) -> Option<&[bool]> {
    hf.sliding_layers.as_deref().filter(|_| hf.moe.as_ref().is_some_and(|m| m.family == MoeFamily::Qwen2Moe))
}

/// The config a Qwen2-MoE full_attention layer runs with under a window: none (its mask sees
/// no window, its sdpa no mask), as the simulation's `full_layer`.
pub(super) fn full_layer_hf(hf: &HfConfig) -> HfConfig {
    HfConfig { sliding_window: None, ..hf.clone() }
}

/// What checkpointed Qwen2-MoE layers' closures hold under a window: the mask of each layer
/// type present (eager: the full and the window's additive masks, (B, 1, S, S) in the model's
/// dtype; sdpa: the sliding layers' boolean mask once the window is not longer than the
/// context, the full layers none). A type no layer has is dropped when the model returns.
pub(super) fn window_checkpoint_masks(c: &Ctx, t: &mut Vec<Term>, hf: &HfConfig, layers: &[bool], kernel: super::Kernel, model_elem: u64) {
    for sliding in [false, true].into_iter().filter(|s| layers.contains(s)) {
        let which = if sliding { "sliding-window" } else { "full" };
        if kernel == super::Kernel::Eager {
            t.push(Term {
                what: format!("eager {which} mask (B, 1, S, S) in the model's dtype (the {which} layers' checkpoint closures hold it)"),
                op: "where",
                formula: format!("B·S²·{model_elem}"),
                unit: Unit::Small,
                elements: c.b * c.s * c.s,
                elem: model_elem,
            });
        } else if sliding && hf.sdpa_masked(c.s as usize) {
            let (rows, formula) = if hf.attention_mask { (c.b, "B·S²·1") } else { (1, "S²·1") };
            t.push(Term { what: "sdpa's boolean sliding-window mask (the sliding layers' checkpoint closures hold it)".into(), op: "logical_and", formula: formula.into(), unit: Unit::Small, elements: rows * c.s * c.s, elem: 1 });
        }
    }
}
