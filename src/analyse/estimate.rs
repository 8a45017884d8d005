//! Closed-form memory of a configuration, derived the way a student writes it on paper:
//! parameters, gradients, optimizer state, and the tensors autograd keeps for backward, op by
//! op, per block, with the symbols a = B·S·d·4, f = B·S·F·4, s = B·h·S²·4 (a bf16/fp16
//! tensor of the same shape is ½a), in fp32, autocast bf16/fp16 or pure bf16. `vramscope
//! estimate` prints it beside a simulated run, so every term can be checked against the
//! allocations it predicts.
//!
//! The per-op lists follow reference-models.md and the save rules PyTorch's derivative
//! formulas have (a `mul` keeps the operand the *other* gradient needs, `exp`/`softmax`/
//! `sigmoid`/`rsqrt`/`sqrt` keep their output, `pow` and `silu` their input, matmuls both
//! operands, views and `add` nothing). They are written independently of the model code on
//! purpose: a test compares them with what the engine actually keeps.
use crate::model::{Attention, Flavour, ModelConfig};
use crate::train::optim::OptimConfig;
use crate::train::Precision;
use serde::Serialize;

pub mod generate;
pub mod generate_peak;
pub mod hf;

/// The size class a term belongs to, for the symbolic per-block sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// a = B·S·d elements: the residual stream and everything shaped like it.
    A,
    /// f = B·S·F elements: the feed-forward hidden tensors.
    F,
    /// s = B·h·S² elements: attention scores and probabilities.
    S,
    /// m = S² elements: a causal mask.
    M,
    /// q = B·S·h·d_h elements (hf, where h·d_h ≠ d): per-head query tensors.
    Q,
    /// kv = B·S·h_kv·d_h elements (hf, grouped-query attention): per-head keys and values.
    Kv,
    /// ka = B·S·k·d elements (mixture of experts): the routed rows, every token once per
    /// expert it goes to, d wide.
    Ka,
    /// ki = B·S·k·I elements (mixture of experts): the routed rows one expert wide (I).
    Ki,
    /// kw = B·S·k·I·d elements (batched_mm): one expert's I×d matrix gathered per routed row.
    Kw,
    /// fs = B·S·I_s elements (Qwen2-MoE): the shared expert's hidden tensors.
    Fs,
    /// A family's own size, named by its symbol (DeepSeek-V3's latent attention: hf/deepseek.rs
    /// lists them with their values).
    Named(&'static str),
    /// Per-row statistics and indices (B·S or B·h·S elements): small.
    Small,
}

impl Unit {
    fn symbol(self) -> &'static str {
        match self {
            Unit::A => "a",
            Unit::F => "f",
            Unit::S => "s",
            Unit::M => "m",
            Unit::Q => "q",
            Unit::Kv => "kv",
            Unit::Ka => "ka",
            Unit::Ki => "ki",
            Unit::Kw => "kw",
            Unit::Fs => "fs",
            Unit::Named(s) => s,
            Unit::Small => "small",
        }
    }
}

/// One tensor of the derivation.
#[derive(Clone, Debug, Serialize)]
pub struct Term {
    /// What it is (`q_proj output`).
    pub what: String,
    /// The op that made it (`bmm`, `exp`, …).
    pub op: &'static str,
    /// Its size as a formula (`B·S·d·4`).
    pub formula: String,
    pub unit: Unit,
    pub elements: u64,
    /// Bytes per element.
    pub elem: u64,
}

impl Term {
    pub fn bytes(&self) -> u64 {
        self.elements * self.elem
    }
}

/// The whole derivation for one (config, batch, sequence length).
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub flavour: Flavour,
    pub precision: Precision,
    pub batch: usize,
    pub seq: usize,
    pub layers: usize,
    /// Symbol definitions with their byte values: ("a", "B·S·d·4", bytes). They are fp32
    /// sizes; a 2-byte (bf16/fp16) tensor of the same shape is written ½a.
    pub symbols: Vec<(String, String, u64)>,
    pub params: u64,
    pub param_formula: String,
    /// Bytes per parameter element (4 fp32, 2 pure bf16).
    pub param_elem: u64,
    pub param_bytes: u64,
    pub grad_bytes: u64,
    pub optimizer_bytes: u64,
    pub optimizer_formula: String,
    /// Transient optimizer memory at its worst moment, with its formula.
    pub optimizer_temp_bytes: u64,
    pub optimizer_temp_formula: String,
    /// The optimizer (and gradient clipping) the optimizer terms are for.
    pub optimizer: OptimConfig,
    /// The autocast region's low-precision weight copies, kept until backward.
    pub autocast_cache_bytes: u64,
    pub autocast_cache_formula: String,
    /// Kept for backward by one block.
    pub block: Vec<Term>,
    /// `block` as a sum of symbols (`10a + 5f + 2s + m + small`; `4a + 9·½a + …`).
    pub block_symbolic: String,
    /// The same in 4-byte symbols (`8.5a + 2.5f + 1.5s + m + small`).
    pub block_fp32_units: String,
    /// Block 0's, where it keeps less than the others (peft: its input needs no gradient);
    /// the other `layers − 1` keep `block` (or `sliding_block`'s).
    pub first_block: Option<Vec<Term>>,
    /// The layer `first_block` is: 0, or DeepSeek-V3's first sparse layer where peft trains
    /// nothing in the first_k_dense_replace dense layers before it (they keep `sliding_block`).
    pub first_block_layer: usize,
    /// Gemma 3 under sdpa once the window masks its sliding layers: what those layers keep
    /// (their kernel sees the mask), `block` being the full layers'.
    pub sliding_block: Option<SlidingBlock>,
    /// Kept for backward outside the blocks (embedding output, final norm).
    pub outside: Vec<Term>,
    /// The forward's output.
    pub logits: Term,
    /// The loss's (B, S, V)-sized tensors live at once when the loss is computed, the one it
    /// keeps for backward first.
    pub loss: Vec<Term>,
    /// Bytes per residual-stream element (4, or 2 in pure bf16).
    pub residual_elem: u64,
    /// One (B, S, d) residual-stream tensor (seed 003 part d).
    pub residual_bytes: u64,
}

/// The sliding layers' block where it differs from the full layers' (or DeepSeek-V3's dense
/// layers' beside its sparse ones).
#[derive(Clone, Debug, Serialize)]
pub struct SlidingBlock {
    /// The sliding layers' indices (block 0 is `first_block` where there is one).
    pub layers: Vec<usize>,
    pub block: Vec<Term>,
    pub symbolic: String,
    pub kind: OtherLayers,
}

/// Which layers keep [`SlidingBlock`]'s block instead of `block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OtherLayers {
    /// Gemma 3's sliding layers whose kernel sees the window's mask (`block`: the full layers').
    Sliding,
    /// DeepSeek-V3's first `first_k_dense_replace` layers, a dense MLP (`block`: the sparse ones').
    Dense,
}

impl OtherLayers {
    /// (these layers, the others, why they differ).
    pub fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            OtherLayers::Sliding => ("sliding", "full", "their kernel sees the window's mask"),
            OtherLayers::Dense => ("dense", "sparse", "first_k_dense_replace: a dense MLP in place of the experts"),
        }
    }
}

impl Estimate {
    pub fn block_bytes(&self) -> u64 {
        self.block.iter().map(Term::bytes).sum()
    }
    /// Everything autograd holds when the forward returns.
    pub fn activation_bytes(&self) -> u64 {
        self.blocks_bytes() + self.outside.iter().map(Term::bytes).sum::<u64>()
    }
    /// The L blocks together (block 0 its own where it differs).
    pub fn blocks_bytes(&self) -> u64 {
        let (block, first) = (self.block_bytes(), self.first_block.as_ref().map(|b| b.iter().map(Term::bytes).sum::<u64>()));
        let sliding = self.sliding_block.as_ref().map(|s| (s, s.block.iter().map(Term::bytes).sum::<u64>()));
        (0..self.layers)
            .map(|i| match (i, first, &sliding) {
                (i, Some(f), _) if i == self.first_block_layer => f,
                (_, _, Some((s, bytes))) if s.layers.contains(&i) => *bytes,
                _ => block,
            })
            .sum()
    }
    /// What the loss keeps for backward.
    pub fn loss_saved_bytes(&self) -> u64 {
        self.loss.first().map_or(0, Term::bytes)
    }
    /// Live when the forward has returned (autograd on): parameters, activations, the
    /// autocast cache, logits.
    pub fn forward_bytes(&self) -> u64 {
        self.param_bytes + self.activation_bytes() + self.autocast_cache_bytes + self.logits.bytes()
    }
    /// The loss's moment of a training step: no gradients yet (zero_grad set them to
    /// None), every activation, the autocast cache, the logits and the loss's (B, S, V) tensors.
    pub fn training_loss_moment(&self) -> u64 {
        self.param_bytes + self.optimizer_bytes + self.activation_bytes() + self.autocast_cache_bytes + self.logits.bytes() + self.loss.iter().map(Term::bytes).sum::<u64>()
    }
    /// The optimizer's moment: every gradient, the logits still bound by the loop (the
    /// reference scripts; the hf Trainer's `compute_loss` drops them before backward), and
    /// the optimizer's temporaries.
    pub fn training_optimizer_moment(&self) -> u64 {
        self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.logits_held_through_step() + self.optimizer_temp_bytes
    }
    /// The logits' bytes while backward and the optimizer run (0 for hf: the Trainer drops them).
    pub fn logits_held_through_step(&self) -> u64 {
        if self.flavour == Flavour::Hf { 0 } else { self.logits.bytes() }
    }
    /// A lower bound of the training step's peak: the larger of the two moments (backward,
    /// where activations are released as gradients appear, can exceed both).
    pub fn training_bytes(&self) -> u64 {
        self.training_loss_moment().max(self.training_optimizer_moment())
    }
}

/// How the run computes, as far as the saved tensors are concerned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Fp32,
    /// `torch.autocast`: matmul-class ops output the low type, the fp32 list and the
    /// residual stream stay fp32, and every matmul input that is fp32 gets a low copy.
    Autocast,
    /// `model.to(torch.bfloat16)`: everything bf16 except where the model casts up itself.
    Pure,
}

/// Builds the term list with the run's symbols bound.
/// The memory-efficient kernel's aten op, as the terms name it.
const EFFICIENT: &str = "_scaled_dot_product_efficient_attention";

struct Ctx {
    b: u64,
    s: u64,
    d: u64,
    h: u64,
    kvh: u64,
    dk: u64,
    f: u64,
    v: u64,
    mode: Mode,
    /// Bytes per element of what matmul-class ops output (4 fp32, 2 bf16/fp16).
    low: u64,
    /// Name of the low type (`bf16`, `fp16`, `fp32`).
    low_name: &'static str,
    /// bf16 weights under bf16 autocast (the Trainer's bf16=True on a bf16 model): `Mode::Pure`
    /// save for what casts to fp32 itself and meets an autocast op. transformers' dense and
    /// MoE layers upcast only where they downcast again before any matmul-class op (RMSNorm,
    /// the eager softmax, the routers' softmax, the loss's `.float()`), so only DeepSeek-V3's
    /// router and peft's fp32 adapters (their inputs' and weights' bf16 casts) read this.
    pure_autocast: bool,
}

/// `½a`-style name of a term's size in the 4-byte symbols.
fn sized(unit: Unit, elem: u64) -> String {
    match (unit, elem) {
        (Unit::Small, _) | (Unit::M, _) => String::new(),
        (u, 4) => u.symbol().to_string(),
        (u, 2) => format!("½{}", u.symbol()),
        (u, e) => format!("{e}/4·{}", u.symbol()),
    }
}

impl Ctx {
    fn term(&self, what: impl Into<String>, op: &'static str, unit: Unit, elem: u64) -> Term {
        let (elements, formula) = match unit {
            Unit::A => (self.b * self.s * self.d, "B·S·d"),
            Unit::F => (self.b * self.s * self.f, "B·S·F"),
            Unit::S => (self.b * self.h * self.s * self.s, "B·h·S²"),
            Unit::M => (self.s * self.s, "S²"),
            Unit::Q => (self.b * self.s * self.h * self.dk, "B·S·h·d_h"),
            Unit::Kv => (self.b * self.s * self.kvh * self.dk, "B·S·h_kv·d_h"),
            Unit::Small | Unit::Ka | Unit::Ki | Unit::Kw | Unit::Fs | Unit::Named(_) => unreachable!("small and expert terms give their own size (hf/moe.rs)"),
        };
        let formula = if elem == 4 { format!("{formula}·4") } else { format!("{formula}·{elem} = {}", sized(unit, elem)) };
        Term { what: what.into(), op, formula, unit, elements, elem }
    }
    fn small(&self, what: &str, op: &'static str, formula: &str, elements: u64, elem: u64) -> Term {
        Term { what: what.into(), op, formula: format!("{formula}·{elem}"), unit: Unit::Small, elements, elem }
    }
    fn mask(&self, what: &str, op: &'static str, elem: u64) -> Term {
        Term { what: what.into(), op, formula: format!("S²·{elem}"), unit: Unit::M, elements: self.s * self.s, elem }
    }
    /// Whether `F.scaled_dot_product_attention` runs the memory-efficient kernel: fp32 inputs
    /// (CUDA's flash kernel takes half types only; `Tensor::sdpa_causal`).
    fn efficient_sdpa(&self) -> bool {
        self.mode == Mode::Fp32
    }
    /// Bytes of the residual stream and of what follows type promotion from it.
    fn resid(&self) -> u64 {
        if self.mode == Mode::Pure { 2 } else { 4 }
    }
    /// A norm's output as the projections that read it keep it: itself (fp32, pure bf16),
    /// or under autocast one low copy per matmul, since only weight casts are cached.
    /// `short` names the readers together (`q/k/v_proj`).
    fn norm_output(&self, t: &mut Vec<Term>, norm: &str, cs336: bool, readers: &[&str], short: &str) {
        match self.mode {
            Mode::Fp32 => t.push(self.term(format!("{norm} output (input of {short})"), "mul", Unit::A, 4)),
            Mode::Autocast => {
                for r in readers {
                    t.push(self.term(format!("{norm} output cast to {} for {r}", self.low_name), "_to_copy", Unit::A, 2));
                }
            }
            Mode::Pure if cs336 => t.push(self.term(format!("{norm} output back in bf16 (input of {short})"), "_to_copy", Unit::A, 2)),
            Mode::Pure => t.push(self.term(format!("{norm} output (input of {short})"), "mul", Unit::A, 2)),
        }
    }
    /// cs336's RMSNorm computes in fp32: under pure bf16 its input is cast up, and the copy
    /// (which pow and x·r keep) replaces the bf16 block input nobody keeps.
    fn cs336_norm(&self, t: &mut Vec<Term>, norm: &str, readers: &[&str], short: &str) {
        if self.mode == Mode::Pure {
            t.push(self.term(format!("{norm} input cast to fp32 (pow, x·r keep it)"), "_to_copy", Unit::A, 4));
        }
        t.push(self.small(&format!("{norm} rsqrt output r"), "rsqrt", "B·S", self.b * self.s, 4));
        t.push(self.term(format!("{norm} x·r"), "mul", Unit::A, 4));
        self.norm_output(t, norm, true, readers, short);
    }
    /// tinyllama's RMSNorm computes in its input's type (fp32 under autocast: the residual).
    fn tinyllama_norm(&self, t: &mut Vec<Term>, norm: &str, readers: &[&str], short: &str) {
        let r = self.resid();
        t.push(self.small(&format!("{norm} sqrt output"), "sqrt", "B·S", self.b * self.s, r));
        t.push(self.term(format!("{norm} x / rms"), "div", Unit::A, r));
        self.norm_output(t, norm, false, readers, short);
    }
}

/// `fixed`, with the named units the terms use inserted before `s` in their first use's order.
fn units_in_order(terms: &[Term], fixed: &[Unit]) -> Vec<Unit> {
    let mut named: Vec<Unit> = Vec::new();
    for t in terms {
        if matches!(t.unit, Unit::Named(_)) && !named.contains(&t.unit) {
            named.push(t.unit);
        }
    }
    let at = fixed.iter().position(|u| *u == Unit::S).unwrap_or(fixed.len());
    fixed[..at].iter().copied().chain(named).chain(fixed[at..].iter().copied()).collect()
}

/// The sum of a term list in symbols: `10a + 5f + 2s + m + small`, with 2-byte tensors as
/// `½a` (`4a + 9·½a + …`).
pub fn symbolic(terms: &[Term]) -> String {
    let order = units_in_order(terms, &[Unit::A, Unit::Q, Unit::Kv, Unit::F, Unit::Fs, Unit::Ka, Unit::Ki, Unit::Kw, Unit::S, Unit::M]);
    let mut parts: Vec<String> = Vec::new();
    for u in order {
        let mut elems: Vec<u64> = terms.iter().filter(|t| t.unit == u).map(|t| if u == Unit::M { 4 } else { t.elem }).collect();
        elems.sort_unstable_by(|a, b| b.cmp(a));
        elems.dedup();
        for e in elems {
            let n = terms.iter().filter(|t| t.unit == u && (u == Unit::M || t.elem == e)).count();
            let sym = if u == Unit::M { "m".to_string() } else { sized(u, e) };
            parts.push(match (n, e) {
                (1, _) => sym,
                (n, 4) => format!("{n}{sym}"),
                (n, _) => format!("{n}·{sym}"),
            });
        }
    }
    if terms.iter().any(|t| t.unit == Unit::Small) {
        parts.push(Unit::Small.symbol().into());
    }
    parts.join(" + ")
}

/// The same sum collapsed to 4-byte symbols (`8.5a + 2.5f + 1.5s + m + small`).
pub fn symbolic_fp32_units(terms: &[Term]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for u in units_in_order(terms, &[Unit::A, Unit::Q, Unit::Kv, Unit::F, Unit::Fs, Unit::Ka, Unit::Ki, Unit::Kw, Unit::S]) {
        let quarters: u64 = terms.iter().filter(|t| t.unit == u).map(|t| t.elem).sum();
        if quarters > 0 {
            let n = quarters as f64 / 4.0;
            parts.push(if n == 1.0 { u.symbol().to_string() } else { format!("{n}{}", u.symbol()) });
        }
    }
    if terms.iter().any(|t| t.unit == Unit::M) {
        parts.push("m".into());
    }
    if terms.iter().any(|t| t.unit == Unit::Small) {
        parts.push(Unit::Small.symbol().into());
    }
    parts.join(" + ")
}

/// Tensors one cs336 block keeps for backward (reference-models.md §1), in forward order.
fn cs336_block(c: &Ctx, attention: Attention) -> Vec<Term> {
    let bhs = c.b * c.h * c.s;
    let (lo, ac, pure) = (c.low, c.mode == Mode::Autocast, c.mode == Mode::Pure);
    let mut t = Vec::new();
    // RMSNorm: x² (pow keeps x, the block input, counted with the previous block), mean,
    // rsqrt (keeps its output r), x·r (keeps r and x), w·(x·r) (keeps x·r).
    c.cs336_norm(&mut t, "ln1", &["q_proj", "k_proj", "v_proj"], "q/k/v_proj");
    // RoPE multiplies by cos/sin, which need no gradient: the q/k projections' outputs are
    // not kept, the rotated Q and K (the stack's output) are; V is the projection's output,
    // read through a transposed view. Under autocast the fp32 RoPE buffer promotes Q and K
    // back to fp32, and the matmul that reads them keeps low copies instead.
    t.push(c.term("v_proj output", "bmm", Unit::A, lo));
    // RoPE gathers cos/sin by position (`cache[:, pos_ids]`): a (2, S, d_k/2) copy per call
    // in the buffer's type (fp32, bf16 in pure bf16), which `cos * x1` and friends keep.
    let rope_elem = if pure { 2 } else { 4 };
    for which in ["Q", "K"] {
        t.push(c.small(&format!("RoPE cos/sin gathered for {which} (the muls keep them)"), "index", "2·S·d_k/2", c.s * c.dk, rope_elem));
    }
    let qk = |t: &mut Vec<Term>, extra: &str| {
        if ac {
            t.push(c.term(format!("rope(Q) (fp32: fp32 RoPE buffer) cast to {}{extra}", c.low_name), "_to_copy", Unit::A, 2));
            t.push(c.term(format!("rope(K) cast to {}{extra}", c.low_name), "_to_copy", Unit::A, 2));
        } else {
            t.push(c.term("rope(Q)", "cat", Unit::A, lo));
            t.push(c.term(format!("rope(K){extra}"), "cat", Unit::A, lo));
        }
    };
    match attention {
        Attention::Naive => {
            qk(&mut t, if ac { "" } else { " (Kᵀ is a strided view bmm reads)" });
            t.push(c.mask("causal mask (bool; where keeps it)", "ge", 1));
            t.push(c.small("softmax max indices (int64)", "max", "B·h·S", bhs, 8));
            // exp is on autocast's fp32 list; in pure bf16 nothing casts up.
            let e = if pure { 2 } else { 4 };
            t.push(c.term("exp(scores − max)", "exp", Unit::S, e));
            t.push(c.small("softmax row sums", "sum", "B·h·S", bhs, e));
            if ac {
                // The fp32 quotient is not kept (div keeps its inputs); weights·V keeps its cast.
                t.push(c.term(format!("softmax weights (fp32) cast to {}", c.low_name), "_to_copy", Unit::S, 2));
            } else {
                t.push(c.term("softmax weights", "div", Unit::S, lo));
            }
        }
        Attention::Flash => {
            // The fused primitive keeps q, k, v as given.
            qk(&mut t, "");
            if c.efficient_sdpa() {
                // fp32: the memory-efficient kernel, whose (B, S, h, d) output makes merging the
                // heads a view.
                t.push(c.term("memory-efficient attention output (output_proj keeps it)", EFFICIENT, Unit::A, lo));
                t.push(c.small("logsumexp (fp32; rows padded to 32)", EFFICIENT, "B·h·⌈S/32⌉·32", c.b * c.h * c.s.div_ceil(32) * 32, 4));
            } else {
                t.push(c.term("flash attention output", "_scaled_dot_product_flash_attention", Unit::A, lo));
                t.push(c.small("flash logsumexp (fp32)", "_scaled_dot_product_flash_attention", "B·h·S", bhs, 4));
            }
        }
    }
    if attention == Attention::Naive || !c.efficient_sdpa() {
        t.push(c.term("heads merged (reshape copy; output_proj keeps it)", "clone", Unit::A, lo));
    }
    // In pure bf16 the bf16 residual is read only by the norm's upcast and the adds, which
    // keep nothing: the norm's fp32 copy is counted instead.
    if !pure {
        t.push(c.term("h = x + attn (ln2 keeps it)", "add", Unit::A, 4));
    }
    c.cs336_norm(&mut t, "ln2", &["w1", "w3"], "w1/w3");
    // SwiGLU with silu written out: w1·x, sigmoid, product, w3·x, product.
    t.push(c.term("w1 output", "bmm", Unit::F, lo));
    t.push(c.term("sigmoid(w1·x)", "sigmoid", Unit::F, lo));
    t.push(c.term("silu = w1x·sigmoid", "mul", Unit::F, lo));
    t.push(c.term("w3 output", "bmm", Unit::F, lo));
    t.push(c.term("silu·w3x (input of w2)", "mul", Unit::F, lo));
    if !pure {
        t.push(c.term("block output = h + ffn (next block keeps it)", "add", Unit::A, 4));
    }
    t
}

/// Tensors one tinyllama block keeps for backward (reference-models.md §2).
fn tinyllama_block(c: &Ctx, attention: Attention) -> Vec<Term> {
    let bhs = c.b * c.h * c.s;
    let gqa = c.kvh < c.h;
    let (lo, ac, r) = (c.low, c.mode == Mode::Autocast, c.resid());
    let mut t = Vec::new();
    // RMSNorm in the input dtype: x / sqrt(mean(x²) + eps) · w.
    c.tinyllama_norm(&mut t, "attention_norm", &["q_proj", "k_proj", "v_proj"], "q/k/v_proj");
    // RoPE's cos/sin need no gradient (and follow Q's type), so the q/k projections' outputs
    // are not kept: the rotated Q and K (the stack's output, (B, S, h, d_k) seen through a
    // transpose) and the v_proj output are; repeat_interleave (GQA) makes new (B, h, S, d_k)
    // K and V, and the kv-sized ones die with the function's locals.
    t.push(c.term("rope(Q)", "cat", Unit::A, lo));
    if gqa {
        t.push(c.term("K repeated to h heads", "clone", Unit::A, lo));
        t.push(c.term("V repeated to h heads", "clone", Unit::A, lo));
    } else {
        t.push(c.term("rope(K)", "cat", Unit::A, lo));
        t.push(c.term("v_proj output", "mm", Unit::A, lo));
    }
    match attention {
        Attention::Naive => {
            // scores + the fp32 additive mask is fp32 under autocast too; softmax keeps its output.
            t.push(c.term("softmax output (fused softmax keeps it)", "softmax", Unit::S, 4));
            if ac {
                t.push(c.term(format!("softmax output cast to {} for probs·V", c.low_name), "_to_copy", Unit::S, 2));
            }
            t.push(c.term("heads merged (contiguous copy; o_proj keeps it)", "clone", Unit::A, lo));
        }
        Attention::Flash if c.efficient_sdpa() => {
            // fp32: the memory-efficient kernel; its output is (B, S, h, d_k) too.
            t.push(c.term("memory-efficient attention output (o_proj keeps it)", EFFICIENT, Unit::A, lo));
            t.push(c.small("logsumexp (fp32; rows padded to 32)", EFFICIENT, "B·h·⌈S/32⌉·32", c.b * c.h * c.s.div_ceil(32) * 32, 4));
        }
        Attention::Flash => {
            // empty_like(q) takes q's (B, S, h, d_k) order: merging heads needs no copy.
            t.push(c.term("flash attention output (o_proj keeps it)", "_scaled_dot_product_flash_attention", Unit::A, lo));
            t.push(c.small("flash logsumexp (fp32)", "_scaled_dot_product_flash_attention", "B·h·S", bhs, 4));
        }
    }
    t.push(c.term("h = x + attention (ffn_norm keeps it)", "add", Unit::A, r));
    c.tinyllama_norm(&mut t, "ffn_norm", &["gate_proj", "up_proj"], "gate/up");
    t.push(c.term("gate_proj output (silu keeps its input)", "mm", Unit::F, lo));
    t.push(c.term("silu(gate)", "silu", Unit::F, lo));
    t.push(c.term("up_proj output", "mm", Unit::F, lo));
    t.push(c.term("silu·up (input of down_proj)", "mul", Unit::F, lo));
    t.push(c.term("block output = h + ffn (next block keeps it)", "add", Unit::A, r));
    t
}

/// A (B, S, V)-sized tensor of the loss.
fn vocab(what: &str, op: &'static str, rows: &str, elements: u64, elem: u64) -> Term {
    Term { what: what.into(), op, formula: format!("{rows}·V·{elem}"), unit: Unit::Small, elements, elem }
}

/// Refuses shapes whose byte counts could not be represented ([`ModelConfig::check_sizes`]):
/// within it every sum [`estimate`] forms fits a u64, so nothing it prints can wrap.
pub fn check_range(cfg: &ModelConfig, b: usize, s: usize) -> Result<(), crate::model::ConfigError> {
    cfg.check_sizes(b, s, "--context-length")?;
    hf::moe::check_range(cfg, b, s)?;
    hf::deepseek::check_range(cfg, b, s)
}

/// The closed-form estimate of `cfg` at batch `b`, sequence length `s`, in `precision`, with
/// the flavour's reference optimizer (callers check the shape with [`check_range`] first).
pub fn estimate(cfg: &ModelConfig, precision: Precision, b: usize, s: usize) -> Estimate {
    estimate_with(cfg, precision, b, s, &OptimConfig::reference(cfg.flavour))
}

/// [`estimate`] with a given optimizer and gradient clipping.
pub fn estimate_with(cfg: &ModelConfig, precision: Precision, b: usize, s: usize, optim: &OptimConfig) -> Estimate {
    let mode = match precision {
        Precision::Fp32 => Mode::Fp32,
        Precision::Bf16 | Precision::Fp16 => Mode::Autocast,
        // bf16 autocast on bf16 weights: pure bf16 save for what a model casts to fp32 itself
        // (Ctx::pure_autocast); pure fp16 weights: pure bf16's bytes (no op here picks its
        // output type or kernel by which 2-byte float it reads). Both derived for the hf
        // models, refused by options/estimate.rs for cs336 and tinyllama; kept total here so
        // the closed form stays a plain function.
        Precision::PureBf16 | Precision::PureFp16 | Precision::PureBf16Autocast => Mode::Pure,
    };
    let (low, low_name) = match precision {
        Precision::Fp32 => (4, "fp32"),
        Precision::Fp16 | Precision::PureFp16 => (2, "fp16"),
        Precision::Bf16 | Precision::PureBf16 | Precision::PureBf16Autocast => (2, "bf16"),
    };
    let c = Ctx {
        b: b as u64,
        s: s as u64,
        d: cfg.d_model as u64,
        h: cfg.num_heads as u64,
        kvh: cfg.num_kv_heads as u64,
        dk: cfg.head_dim() as u64,
        f: cfg.d_ff as u64,
        v: cfg.vocab_size as u64,
        mode,
        low,
        low_name,
        pure_autocast: precision == Precision::PureBf16Autocast,
    };
    let (d, f, v, l) = (c.d, c.f, c.v, cfg.num_layers as u64);
    let kv = c.kvh * c.dk;
    let params = cfg.param_count();
    let head = if cfg.tied_embeddings { "" } else { " + V·d (lm_head)" };
    let attn_w = if kv == d { "4d²".to_string() } else { "2d² + 2d·h_kv·d_k".to_string() };
    // The hf flavour's own terms (transformers' layer, loss, biases, head_dim, Qwen3's norms).
    let hf_terms = cfg.hf().map(|h| hf::terms(&c, cfg, h, precision));
    let param_formula = match &hf_terms {
        Some(t) => t.param_formula.clone(),
        None => {
            debug_assert_eq!(params, v * d * if cfg.tied_embeddings { 1 } else { 2 } + l * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d) + d);
            format!("V·d (embedding){head} + L·({attn_w} + 3d·F + 2d) + d")
        }
    };
    // Parameters, and so gradients and optimizer state, are fp32 except in pure bf16.
    let pe: u64 = if mode == Mode::Pure { 2 } else { 4 };
    let mut param_bytes = params * pe;
    let mut grad_bytes = param_bytes;
    let mut params = params;
    let mut param_formula = param_formula;
    let (optimizer_bytes, optimizer_formula, optimizer_temp_bytes, optimizer_temp_formula) = match cfg.hf().and_then(|h| h.lora.as_ref()) {
        // peft: the base weights are frozen; the adapters are fp32 whatever the weights' type
        // (autocast_adapter_dtype), and with `bias` the chosen biases train in theirs.
        Some(lc) => {
            let (adapters, biases) = (cfg.lora_param_count(), cfg.lora_bias_count());
            // peft's modules_to_save: a trainable copy (V·d) of each named module in the
            // original's type beside the frozen original.
            let saved = cfg.modules_to_save_count();
            let trainable = lora_trainable(cfg, lc, pe);
            params += adapters + saved;
            param_bytes += adapters * 4 + saved * pe;
            if let Some(q) = cfg.hf().and_then(|h| h.bnb.as_ref()) {
                let (bytes, formula) = quantized_storage(cfg, q, pe);
                param_bytes = bytes + adapters * 4 + saved * pe;
                param_formula = formula;
            }
            grad_bytes = trainable.bytes;
            let bnb = cfg.hf().is_some_and(|h| h.bnb.is_some());
            param_formula += if bnb { " + L·Σ over adapted projections r·(in + out)·4 (LoRA A and B, fp32)" } else { " + L·Σ over adapted projections r·(in + out) (LoRA A and B, fp32)" };
            for m in &lc.modules_to_save {
                param_formula += &format!(" + V·d ({m}'s trainable copy, modules_to_save)");
            }
            if biases > 0 {
                param_formula += &format!("; trainable: the adapters and {biases} bias elements");
            }
            // (peft's ParamWrapper adapters come after every layer's module adapters in the
            // simulated registration, modules_to_save's embedding copy before them: no per-layer
            // order; options/estimate.rs refuses the optimizers that need one.)
            let order = (biases == 0 && lc.target_parameters.is_empty() && saved == 0 && !lc.use_dora).then(|| super::optimizer_estimate::ParamSizes::adapters(&lora_matrices(cfg, lc), cfg.num_layers as u64));
            super::optimizer_estimate::trainable_terms(&trainable, order.as_ref(), optim)
        }
        None => super::optimizer_estimate::optimizer_terms(cfg, pe, optim),
    };
    // Every weight a matmul-class op reads is cast once per region and kept until backward;
    // the embedding lookup is not an autocast op, norm weights meet only muls.
    let cast_elements = l * (2 * d * d + 2 * d * kv + 3 * d * f) + v * d;
    let head_w = if cfg.tied_embeddings { "V·d (the tied embedding, read by output_proj)" } else { "V·d (lm_head)" };
    let (autocast_cache_bytes, autocast_cache_formula) = match mode {
        Mode::Autocast if hf_terms.is_some() => hf_terms.as_ref().map(|t| (2 * t.cast_elements, t.cast_formula.clone())).unwrap_or_default(),
        Mode::Autocast => (2 * cast_elements, format!("2 B × (L·({attn_w} + 3d·F) + {head_w}) = 2 × {cast_elements}")),
        Mode::Fp32 => (0, "0 B (fp32: nothing is cast)".to_string()),
        Mode::Pure if c.pure_autocast && cfg.hf().is_some_and(|h| h.lora.is_some()) => {
            // peft's fp32 adapters are the only leaves autocast casts (and caches); the experts'
            // ParamWrapper adapters reach no autocast op.
            let n = cfg.lora_param_count() - hf::moe::uncast_expert_adapters(cfg);
            (2 * n, format!("2 B × (the LoRA adapters' A and B, fp32 leaves over bf16 weights) = 2 × {n}"))
        }
        Mode::Pure if c.pure_autocast => (0, "0 B (bf16 weights: autocast has no fp32 leaf to cast and cache)".to_string()),
        Mode::Pure => (0, format!("0 B (pure {low_name}: the weights already are {low_name}, no autocast region)")),
    };
    let first_block = hf_terms.as_ref().and_then(|t| t.first_block.clone()).map(|mut b| {
        b.retain(|t| t.elements > 0);
        b
    });
    let first_block_layer = hf_terms.as_ref().map_or(0, |t| t.first_layer);
    let sliding_block = hf_terms.as_ref().and_then(|t| t.sliding_block.clone()).map(|(layers, mut block, kind)| {
        block.retain(|t| t.elements > 0);
        let symbolic = symbolic(&block);
        SlidingBlock { layers, block, symbolic, kind }
    });
    let mut block = match (&hf_terms, cfg.flavour) {
        (Some(t), _) => t.block.clone(),
        (None, Flavour::Cs336) => cs336_block(&c, cfg.attention),
        (None, _) => tinyllama_block(&c, cfg.attention),
    };
    block.retain(|t| t.elements > 0);
    let block_symbolic = symbolic(&block);
    let block_fp32_units = symbolic_fp32_units(&block);
    let bs = c.b * c.s;
    let mut outside = Vec::new();
    // In pure bf16 cs336 the embedding output is read only by ln1's upcast and the add.
    if hf_terms.is_none() && !(cfg.flavour == Flavour::Cs336 && mode == Mode::Pure) {
        outside.push(c.term("embedding output (block 0's input)", "embedding", Unit::A, c.resid()));
    }
    let ln = |name: &str, rows: &str| -> Vec<Term> {
        let mut t = Vec::new();
        match cfg.flavour {
            Flavour::Cs336 => c.cs336_norm(&mut t, name, &[rows], rows),
            _ => c.tinyllama_norm(&mut t, name, &[rows], rows),
        }
        t
    };
    let (norm, logits, loss) = match (hf_terms, cfg.flavour) {
        (Some(t), _) => (t.outside, t.logits, t.loss),
        (None, Flavour::Cs336) => {
            let n = bs * v;
            let loss = if mode == Mode::Autocast {
                // exp and log are on the fp32 list: exp reads an fp32 copy of the low-precision
                // logits − max, and logits − max − log Σexp promotes to fp32.
                vec![
                    vocab("exp(logits − max) (fp32, kept for backward)", "exp", "B·S", n, 4),
                    vocab(&format!("logits − max ({low_name})"), "sub", "B·S", n, 2),
                    // The copy dies with exp; log_softmax, the same size, comes after it.
                    vocab("fp32 copy for exp / then log_softmax (fp32)", "_to_copy/sub", "B·S", n, 4),
                ]
            } else {
                // x − max, exp (kept for backward), then x − max − log(sum) and the gather.
                vec![
                    vocab("exp(logits − max) (kept for backward)", "exp", "B·S", n, low),
                    vocab("logits − max", "sub", "B·S", n, low),
                    vocab("log_softmax = logits − max − log Σexp", "sub", "B·S", n, low),
                ]
            };
            (ln("ln_final", "lm_head"), vocab("logits", "bmm", "B·S", n, low), loss)
        }
        (None, _) => {
            let n = c.b * (c.s - 1) * v;
            let mut loss = vec![
                // log_softmax is on the fp32 list: fp32 output under autocast.
                vocab("log_softmax of logits[:, :-1] (cross_entropy keeps it)", "_log_softmax", "B·(S−1)", n, if mode == Mode::Autocast { 4 } else { low }),
                vocab("logits[:, :-1].contiguous()", "contiguous", "B·(S−1)", n, low),
            ];
            if mode == Mode::Autocast {
                loss.push(vocab("its fp32 copy for log_softmax (dies with the op)", "_to_copy", "B·(S−1)", n, 4));
            }
            (ln("norm", "output_proj"), vocab("logits", "mm", "B·S", bs * v, low), loss)
        }
    };
    outside.extend(norm);
    let mut symbols = vec![
        ("a".to_string(), "B·S·d·4".to_string(), c.b * c.s * d * 4),
        ("f".to_string(), "B·S·F·4".to_string(), c.b * c.s * f * 4),
        ("s".to_string(), "B·h·S²·4".to_string(), c.b * c.h * c.s * c.s * 4),
        ("m".to_string(), "S²·(1 for a bool mask)".to_string(), c.s * c.s),
    ];
    if cfg.flavour == Flavour::Hf {
        // No S² bool mask is kept; per-head sizes get their own symbols where they are not a.
        symbols.pop();
        let used = |u: Unit| block.iter().chain(&outside).chain(sliding_block.iter().flat_map(|b| &b.block)).any(|t| t.unit == u);
        if used(Unit::Q) {
            symbols.push(("q".into(), "B·S·h·d_h·4".into(), c.b * c.s * c.h * c.dk * 4));
        }
        if used(Unit::Kv) {
            symbols.push(("kv".into(), "B·S·h_kv·d_h·4".into(), c.b * c.s * c.kvh * c.dk * 4));
        }
        if let Some(m) = cfg.hf().and_then(|h| h.moe.as_ref()) {
            // The experts' own symbols replace the dense MLP's f.
            symbols.retain(|(name, _, _)| name != "f");
            symbols.extend(hf::moe::symbols(&c, m, used));
            if let Some(ds) = &m.deepseek {
                symbols.extend(hf::deepseek::symbols(&c, ds, used));
            }
        }
    }
    Estimate {
        flavour: cfg.flavour,
        precision,
        batch: b,
        seq: s,
        layers: cfg.num_layers,
        symbols,
        params,
        param_formula,
        param_elem: pe,
        param_bytes,
        grad_bytes,
        optimizer_bytes,
        optimizer_formula,
        optimizer_temp_bytes,
        optimizer_temp_formula,
        optimizer: optim.clone(),
        autocast_cache_bytes,
        autocast_cache_formula,
        block,
        block_symbolic,
        block_fp32_units,
        first_block,
        first_block_layer,
        sliding_block,
        outside,
        logits,
        loss,
        residual_elem: c.resid(),
        residual_bytes: c.b * c.s * d * c.resid(),
    }
}

/// A peft model's trainable parameters ([`ModelConfig::lora_param_count`]'s adapters in fp32,
/// [`ModelConfig::lora_bias_count`]'s biases in the weights' `pe` bytes): bytes, tensors, the
/// largest.
fn lora_trainable(cfg: &ModelConfig, lc: &crate::model::lora::LoraConfig, pe: u64) -> super::optimizer_estimate::Trainable {
    let r = lc.r as u64;
    let (mut count, mut largest) = (0u64, 0u64);
    for (name, (i, o, bias)) in lora_shapes(cfg) {
        if lc.targets(name) {
            // (DoRA: lora_magnitude_vector, out elements, besides A and B.)
            count += 2 + u64::from(lc.use_dora);
            largest = largest.max(r * i).max(r * o);
        }
        if bias && lc.trains_bias(name) {
            count += 1;
            largest = largest.max(o);
        }
    }
    let l = cfg.num_layers as u64;
    let mut count = count * l;
    // gpt-oss's router bias (`mlp.router.bias`, E), one per layer where it trains.
    if let Some(m) = cfg.hf().and_then(|h| h.moe.as_ref()).filter(|m| m.gpt_oss.is_some() && lc.trains_router_bias()) {
        count += l;
        largest = largest.max(m.experts as u64);
    }
    // peft's ParamWrapper: a lora_A and lora_B per wrapped parameter of every sparse layer
    // (DeepSeek-V3's first_k_dense_replace layers have none).
    if let Some(m) = cfg.hf().and_then(|h| h.moe.as_ref()).filter(|_| !lc.target_parameters.is_empty()) {
        let sparse = (0..cfg.num_layers).filter(|&i| m.deepseek.as_ref().is_none_or(|ds| ds.is_sparse(i))).count() as u64;
        let (e, i, d, rg) = (m.experts as u64, m.intermediate as u64, cfg.d_model as u64, lc.gate_up_rank() as u64);
        let wrapped = [
            (lc.targets_router(), r * d, e * r),
            (lc.targets_parameter("mlp.experts.gate_up_proj"), rg * e * d, 2 * i * rg * e),
            (lc.targets_parameter("mlp.experts.down_proj"), r * e * i, d * r * e),
        ];
        for (_, a, b) in wrapped.into_iter().filter(|w| w.0) {
            count += 2 * sparse;
            if sparse > 0 {
                largest = largest.max(a).max(b);
            }
        }
    }
    // modules_to_save's copies: V·d each, in the weights' type.
    let saved = lc.modules_to_save.len() as u64;
    if saved > 0 {
        count += saved;
        largest = largest.max(cfg.vocab_size as u64 * cfg.d_model as u64);
    }
    super::optimizer_estimate::Trainable { bytes: cfg.lora_param_count() * 4 + cfg.lora_bias_count() * pe + cfg.modules_to_save_count() * pe, count, largest }
}

/// A 4-bit or 8-bit model's parameters in bytes (bitsandbytes' storage beside the
/// unquantized parameters of `pe` bytes: fp32 after prepare_model_for_kbit_training, else
/// the load type), with the formula. 4-bit (`Linear4bit`), per quantized projection of
/// n = rows·cols weights: n/2 packed bytes and its quant_state: an absmax per 64-weight block
/// (fp32, or uint8 with double quantization plus an fp32 scale per 256 blocks, its own
/// 256-entry fp32 map and an fp32 offset) and the 16-entry fp32 code; biases in the compute
/// dtype. 8-bit (`Linear8bitLt`): n int8 weights and an fp32 SCB per row; biases in `pe`.
fn quantized_storage(cfg: &ModelConfig, bnb: &crate::model::bnb::Bnb, pe: u64) -> (u64, String) {
    use crate::engine::ops::quant::{BLOCKSIZE, NESTED_BLOCKSIZE};
    use crate::model::hf::Arch;
    let h = cfg.hf().expect("4-bit is an hf model's");
    let (d, f, v, hd) = (cfg.d_model as u64, cfg.d_ff as u64, cfg.vocab_size as u64, cfg.head_dim() as u64);
    let (qd, kv) = (cfg.num_heads as u64 * hd, cfg.num_kv_heads as u64 * hd);
    let (bs, nbs) = (BLOCKSIZE as u64, NESTED_BLOCKSIZE as u64);
    let four_bit = bnb.four_bit();
    let storage = |(rows, cols): (u64, u64)| {
        let n = rows * cols;
        match four_bit {
            Some(q) => {
                let blocks = n.div_ceil(bs);
                let state = if q.double_quant { blocks + blocks.div_ceil(nbs) * 4 + 256 * 4 + 4 } else { blocks * 4 };
                // quantize_4bit's ((n + 1) // (itemsize · 2), 1) of bnb_4bit_quant_storage
                let item = q.quant_storage.size() as u64;
                (n + 1) / (2 * item) * item + state + 16 * 4
            }
            None => n + rows * 4,
        }
    };
    // Phi-3 quantizes its fused qkv_proj and gate_up_proj whole (one quant_state each).
    // An MoE layer's nn.Linear modules are the attention's (and Qwen2-MoE's shared expert's):
    // replace_with_bnb_linear leaves the router and the 3-D experts in their dtype.
    let phi3 = h.model_type == Arch::Phi3;
    let moe = h.moe.as_ref();
    let attention = [(qd, d), (kv, d), (kv, d), (d, qd)];
    let shapes: Vec<(u64, u64)> = match moe {
        Some(m) if m.shared_intermediate > 0 => {
            let s = m.shared_intermediate as u64;
            attention.into_iter().chain([(s, d), (s, d), (d, s), (1, d)]).collect()
        }
        Some(_) => attention.to_vec(),
        None if phi3 => vec![(qd + 2 * kv, d), (d, qd), (2 * f, d), (d, f)],
        None => attention.into_iter().chain([(f, d), (f, d), (d, f)]).collect(),
    };
    let mut biases = 0;
    if h.qkv_bias {
        biases += qd + 2 * kv;
    }
    if h.o_bias {
        biases += d;
    }
    if h.mlp_bias {
        biases += 2 * f + d;
    }
    // Each layer's norms: two (four on Gemma) of d, and the q/k norms (over d_h on Qwen3 and
    // Gemma 3, over the whole projections on OLMo-2).
    let (norms, norms_formula) = match h.model_type {
        Arch::Qwen3 => (2 * d + 2 * hd, "2d + 2d_h"),
        Arch::Olmo2 => (2 * d + qd + kv, "2d + h·d_h + h_kv·d_h"),
        Arch::Gemma2 => (4 * d, "4d"),
        Arch::Gemma3Text => (4 * d + 2 * hd, "4d + 2d_h"),
        _ => (2 * d, "2d"),
    };
    let l = cfg.num_layers as u64;
    // DeepSeek-V3's layers differ: the latent attention's linears (q_a/q_b or q_proj,
    // kv_a_proj_with_mqa, kv_b_proj, o_proj; attention_bias on q_a, kv_a and o), then the dense
    // layers' MLP or the sparse layers' shared experts' MLP.
    let layer_shapes = |i: usize| -> (Vec<(u64, u64)>, u64) {
        let Some((m, ds)) = moe.and_then(|m| m.deepseek.as_ref().map(|ds| (m, ds))) else { return (shapes.clone(), biases) };
        let mla = ds.mla_linear_shapes(cfg.d_model, cfg.num_heads);
        let mut out: Vec<(u64, u64)> = mla.iter().filter(|(i, o)| i * o > 0).map(|&(i, o)| (o as u64, i as u64)).collect();
        let (fm, dense) = if ds.is_sparse(i) { (m.shared_intermediate as u64, false) } else { (ds.dense_intermediate as u64, true) };
        debug_assert!(dense || !ds.is_sparse(i) || fm == m.shared_intermediate as u64);
        out.extend([(fm, d), (fm, d), (d, fm)]);
        let b = if ds.attention_bias { ds.q_lora_rank.unwrap_or(0) as u64 + (ds.kv_lora_rank + ds.qk_rope_head_dim) as u64 + d } else { 0 };
        (out, b)
    };
    let per_layer: Vec<(Vec<(u64, u64)>, u64)> = (0..cfg.num_layers).map(layer_shapes).collect();
    let stored: u64 = per_layer.iter().flat_map(|(sh, _)| sh.iter().copied().map(storage)).sum();
    let all_biases: u64 = per_layer.iter().map(|(_, b)| b).sum();
    let all_quantized: u64 = per_layer.iter().flat_map(|(sh, _)| sh.iter().map(|(r, c)| r * c)).sum();
    // (An MoE model's router and experts stay unquantized: every parameter but the quantized
    // weights and the biases.)
    let unquantized = if moe.is_some() { cfg.param_count() - all_quantized - all_biases } else { v * d * if cfg.tied_embeddings { 1 } else { 2 } + l * norms + d };
    let bias_bytes = all_biases * four_bit.map_or(pe, |q| q.compute_dtype.size() as u64);
    let bytes = stored + unquantized * pe + bias_bytes;
    let quantized = match four_bit {
        Some(q) if q.double_quant => "⌈n/2⌉ packed + ⌈n/64⌉ (uint8 absmax) + ⌈n/16384⌉·4 + 1028 (double quant) + 64 code",
        Some(_) => "⌈n/2⌉ packed + ⌈n/64⌉·4 (fp32 absmax) + 64 code",
        None => "n int8 + rows·4 (SCB)",
    };
    let head = if cfg.tied_embeddings { "" } else { " + V·d (lm_head)" };
    debug_assert_eq!(cfg.param_count(), all_quantized + all_biases + unquantized);
    let sum = if moe.is_some_and(|m| m.deepseek.is_some()) { "Σ over every layer's" } else { "L·Σ over the" };
    let projections = match moe {
        Some(m) if m.deepseek.is_some() => "latent attention's linears and each layer's dense or shared-expert MLP",
        Some(m) if m.shared_intermediate > 0 => "8 linears (q/k/v/o_proj, the shared expert's gate/up/down_proj and shared_expert_gate)",
        Some(_) => "4 attention projections",
        None if phi3 => "4 projections (qkv_proj, o_proj, gate_up_proj, down_proj)",
        None => "7 projections",
    };
    let rest = match moe {
        Some(_) => format!("the other parameters (embedding{head}, norms, router, experts) = {unquantized} elements"),
        None => format!("V·d (embedding){head} + L·({norms_formula}) + d"),
    };
    let formula = format!(
        "{sum} {projections} of n = rows·cols weights ({quantized}) + ({rest})·{pe}{}",
        if biases == 0 { "" } else if four_bit.is_some() { " + biases in the compute dtype" } else { " + biases" }
    );
    (bytes, formula)
}

/// One layer's linears in module order (`lora::layer_linears`: Phi-3's fused qkv_proj and
/// gate_up_proj, after o_proj), each (name, (in, out, has a bias)).
fn lora_shapes(cfg: &ModelConfig) -> Vec<(&'static str, (u64, u64, bool))> {
    let h = cfg.hf().expect("LoRA is an hf model's");
    let (d, f, hd) = (cfg.d_model as u64, cfg.d_ff as u64, cfg.head_dim() as u64);
    let (q, kv) = (cfg.num_heads as u64 * hd, cfg.num_kv_heads as u64 * hd);
    let (qkv_out, gate_out) = if h.model_type == crate::model::hf::Arch::Phi3 { (q + 2 * kv, 2 * f) } else { (q, f) };
    // Per slot of lora::SLOTS (Qwen2-MoE's shared expert in 4-7: gate/up/down_proj, I_s wide,
    // and shared_expert_gate, d → 1; none has a bias).
    let mut shapes = [(d, qkv_out, h.qkv_bias), (d, kv, h.qkv_bias), (d, kv, h.qkv_bias), (q, d, h.o_bias), (d, gate_out, h.mlp_bias), (d, f, h.mlp_bias), (f, d, h.mlp_bias), (0, 0, false)];
    if let Some(s) = h.moe.as_ref().filter(|m| m.deepseek.is_none() && m.shared_intermediate > 0).map(|m| m.shared_intermediate as u64) {
        shapes[4..].copy_from_slice(&[(d, s, false), (d, s, false), (s, d, false), (d, 1, false)]);
    }
    // DeepSeek-V3's latent attention (lora::MLA_Q_LORA's slots; attention_bias's biases on
    // q_a_proj, kv_a_proj_with_mqa and o_proj).
    if let Some(ds) = h.moe.as_ref().and_then(|m| m.deepseek.as_ref()) {
        let mla = ds.mla_linear_shapes(cfg.d_model, cfg.num_heads);
        return crate::model::lora::linears_of(h).iter().map(|&(slot, name)| (name, (mla[slot].0 as u64, mla[slot].1 as u64, ds.has_bias(name)))).collect();
    }
    crate::model::lora::linears_of(h).iter().map(|&(slot, name)| (name, shapes[slot])).collect()
}

/// One layer's adapter matrices in `parameters()` order: (r, in) for lora_A and (out, r) for
/// lora_B of each adapted projection, in module order.
fn lora_matrices(cfg: &ModelConfig, lc: &crate::model::lora::LoraConfig) -> Vec<(u64, u64)> {
    let r = lc.r as u64;
    lora_shapes(cfg).into_iter().filter(|(t, _)| lc.targets(t)).flat_map(|(_, (i, o, _))| [(r, i), (o, r)]).collect()
}
