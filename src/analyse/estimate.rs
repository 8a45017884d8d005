//! Closed-form memory of a configuration, derived the way a student writes it on paper:
//! parameters, gradients, optimizer state, and the tensors autograd keeps for backward, op by
//! op, per block, with the symbols a = B·S·d·e, f = B·S·F·e, s = B·h·S²·e. `vramscope
//! estimate` prints it beside a simulated run, so every term can be checked against the
//! allocations it predicts.
//!
//! The per-op lists follow reference-models.md and the save rules PyTorch's derivative
//! formulas have (a `mul` keeps the operand the *other* gradient needs, `exp`/`softmax`/
//! `sigmoid`/`rsqrt`/`sqrt` keep their output, `pow` and `silu` their input, matmuls both
//! operands, views and `add` nothing). They are written independently of the model code on
//! purpose: a test compares them with what the engine actually keeps.
use crate::model::{Attention, Flavour, ModelConfig};
use serde::Serialize;

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
    pub batch: usize,
    pub seq: usize,
    pub layers: usize,
    /// Symbol definitions with their byte values: ("a", "B·S·d·4", bytes).
    pub symbols: Vec<(String, String, u64)>,
    pub params: u64,
    pub param_formula: String,
    pub param_bytes: u64,
    pub grad_bytes: u64,
    pub optimizer_bytes: u64,
    pub optimizer_formula: String,
    /// Transient optimizer memory at its worst moment, with its formula.
    pub optimizer_temp_bytes: u64,
    pub optimizer_temp_formula: String,
    /// Kept for backward by one block.
    pub block: Vec<Term>,
    /// `block` as a sum of symbols (`12a + 5f + 2s + m + small`).
    pub block_symbolic: String,
    /// Kept for backward outside the blocks (embedding output, final norm).
    pub outside: Vec<Term>,
    /// The forward's output.
    pub logits: Term,
    /// The loss's (B, S, V)-sized tensors live at once when the loss is computed, the one it
    /// keeps for backward first.
    pub loss: Vec<Term>,
    /// One (B, S, d) residual-stream tensor (seed 003 part d).
    pub residual_bytes: u64,
}

impl Estimate {
    pub fn block_bytes(&self) -> u64 {
        self.block.iter().map(Term::bytes).sum()
    }
    /// Everything autograd holds when the forward returns.
    pub fn activation_bytes(&self) -> u64 {
        self.layers as u64 * self.block_bytes() + self.outside.iter().map(Term::bytes).sum::<u64>()
    }
    /// What the loss keeps for backward.
    pub fn loss_saved_bytes(&self) -> u64 {
        self.loss.first().map_or(0, Term::bytes)
    }
    /// Live when the forward has returned (autograd on): parameters, activations, logits.
    pub fn forward_bytes(&self) -> u64 {
        self.param_bytes + self.activation_bytes() + self.logits.bytes()
    }
    /// The loss's moment of a training step: no gradients yet (zero_grad set them to
    /// None), every activation, the logits and the loss's (B, S, V) tensors.
    pub fn training_loss_moment(&self) -> u64 {
        self.param_bytes + self.optimizer_bytes + self.activation_bytes() + self.logits.bytes() + self.loss.iter().map(Term::bytes).sum::<u64>()
    }
    /// The optimizer's moment: every gradient, the logits still bound by the loop, and the
    /// optimizer's temporaries.
    pub fn training_optimizer_moment(&self) -> u64 {
        self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.logits.bytes() + self.optimizer_temp_bytes
    }
    /// A lower bound of the training step's peak: the larger of the two moments (backward,
    /// where activations are released as gradients appear, can exceed both).
    pub fn training_bytes(&self) -> u64 {
        self.training_loss_moment().max(self.training_optimizer_moment())
    }
}

/// Builds the term list with the run's symbols bound.
struct Ctx {
    b: u64,
    s: u64,
    d: u64,
    h: u64,
    kvh: u64,
    dk: u64,
    f: u64,
    v: u64,
    /// Bytes per activation element (4: fp32).
    e: u64,
}

impl Ctx {
    fn term(&self, what: &str, op: &'static str, unit: Unit) -> Term {
        let (elements, formula) = match unit {
            Unit::A => (self.b * self.s * self.d, "B·S·d"),
            Unit::F => (self.b * self.s * self.f, "B·S·F"),
            Unit::S => (self.b * self.h * self.s * self.s, "B·h·S²"),
            Unit::M => (self.s * self.s, "S²"),
            Unit::Small => unreachable!("small terms give their own size"),
        };
        Term { what: what.into(), op, formula: format!("{formula}·{}", self.e), unit, elements, elem: self.e }
    }
    fn small(&self, what: &str, op: &'static str, formula: &str, elements: u64, elem: u64) -> Term {
        Term { what: what.into(), op, formula: format!("{formula}·{elem}"), unit: Unit::Small, elements, elem }
    }
    fn mask(&self, what: &str, op: &'static str, elem: u64) -> Term {
        Term { what: what.into(), op, formula: format!("S²·{elem}"), unit: Unit::M, elements: self.s * self.s, elem }
    }
}

/// The sum of a term list in symbols: `12a + 5f + 2s + m + small`.
pub fn symbolic(terms: &[Term]) -> String {
    let order = [Unit::A, Unit::F, Unit::S, Unit::M];
    let mut parts: Vec<String> = Vec::new();
    for u in order {
        let n = terms.iter().filter(|t| t.unit == u).count();
        if n > 0 {
            parts.push(if n == 1 { u.symbol().to_string() } else { format!("{n}{}", u.symbol()) });
        }
    }
    if terms.iter().any(|t| t.unit == Unit::Small) {
        parts.push(Unit::Small.symbol().into());
    }
    parts.join(" + ")
}

/// Tensors one cs336 block keeps for backward (reference-models.md §1), in forward order.
fn cs336_block(c: &Ctx, attention: Attention) -> Vec<Term> {
    let bs = c.b * c.s;
    let bhs = c.b * c.h * c.s;
    let mut t = Vec::new();
    // RMSNorm: x² (pow keeps x, the block input, counted with the previous block), mean,
    // rsqrt (keeps its output r), x·r (keeps r and x), w·(x·r) (keeps x·r).
    t.push(c.small("ln1 rsqrt output r", "rsqrt", "B·S", bs, 4));
    t.push(c.term("ln1 x·r", "mul", Unit::A));
    t.push(c.term("ln1 output (input of q/k/v_proj)", "mul", Unit::A));
    // RoPE multiplies by cos/sin, which need no gradient: the projections' outputs are not
    // kept, the rotated Q and K (the stack's output) are.
    match attention {
        Attention::Naive => {
            t.push(c.term("rope(Q)", "cat", Unit::A));
            t.push(c.term("rope(K) (Kᵀ is a strided view bmm reads)", "cat", Unit::A));
            t.push(c.mask("causal mask (bool; where keeps it)", "ge", 1));
            t.push(c.small("softmax max indices (int64)", "max", "B·h·S", bhs, 8));
            t.push(c.term("exp(scores − max)", "exp", Unit::S));
            t.push(c.small("softmax row sums", "sum", "B·h·S", bhs, 4));
            t.push(c.term("softmax weights", "div", Unit::S));
            t.push(c.term("V copied to (B·h, S, d_k) by matmul's reshape", "clone", Unit::A));
        }
        Attention::Flash => {
            // The flash primitive keeps q, k, v as given: V is the projection's transposed view.
            t.push(c.term("v_proj output", "bmm", Unit::A));
            t.push(c.term("rope(Q)", "cat", Unit::A));
            t.push(c.term("rope(K)", "cat", Unit::A));
            t.push(c.term("flash attention output", "_scaled_dot_product_flash_attention", Unit::A));
            t.push(c.small("flash logsumexp (fp32)", "_scaled_dot_product_flash_attention", "B·h·S", bhs, 4));
        }
    }
    t.push(c.term("heads merged (reshape copy; output_proj keeps it)", "clone", Unit::A));
    t.push(c.term("h = x + attn (ln2 keeps it)", "add", Unit::A));
    t.push(c.small("ln2 rsqrt output r", "rsqrt", "B·S", bs, 4));
    t.push(c.term("ln2 x·r", "mul", Unit::A));
    t.push(c.term("ln2 output (input of w1/w3)", "mul", Unit::A));
    // SwiGLU with silu written out: w1·x, sigmoid, product, w3·x, product.
    t.push(c.term("w1 output", "bmm", Unit::F));
    t.push(c.term("sigmoid(w1·x)", "sigmoid", Unit::F));
    t.push(c.term("silu = w1x·sigmoid", "mul", Unit::F));
    t.push(c.term("w3 output", "bmm", Unit::F));
    t.push(c.term("silu·w3x (input of w2)", "mul", Unit::F));
    t.push(c.term("block output = h + ffn (next block keeps it)", "add", Unit::A));
    t
}

/// Tensors one tinyllama block keeps for backward (reference-models.md §2).
fn tinyllama_block(c: &Ctx, attention: Attention) -> Vec<Term> {
    let bs = c.b * c.s;
    let bhs = c.b * c.h * c.s;
    let gqa = c.kvh < c.h;
    let mut t = Vec::new();
    // RMSNorm in the input dtype: x / sqrt(mean(x²) + eps) · w.
    t.push(c.small("attention_norm sqrt output", "sqrt", "B·S", bs, 4));
    t.push(c.term("attention_norm x / rms", "div", Unit::A));
    t.push(c.term("attention_norm output (input of q/k/v_proj)", "mul", Unit::A));
    // RoPE's cos/sin need no gradient, so the projections' outputs are not kept. Q, K, V
    // are (B, S, h, d_k) storages seen through a transpose; repeat_interleave (GQA) makes new
    // (B, h, S, d_k) K and V, and the kv-sized ones die with the function's locals.
    match attention {
        Attention::Naive => {
            t.push(c.term("rope(Q) copied to (B·h, S, d_k) by matmul's reshape", "clone", Unit::A));
            if gqa {
                t.push(c.term("K repeated to h heads", "clone", Unit::A));
                t.push(c.term("V repeated to h heads", "clone", Unit::A));
            } else {
                t.push(c.term("rope(K) copied by matmul's reshape of Kᵀ", "clone", Unit::A));
                t.push(c.term("V copied by matmul's reshape", "clone", Unit::A));
            }
            t.push(c.term("softmax output (fused softmax keeps it)", "softmax", Unit::S));
            t.push(c.term("heads merged (contiguous copy; o_proj keeps it)", "clone", Unit::A));
        }
        Attention::Flash => {
            t.push(c.term("rope(Q)", "cat", Unit::A));
            if gqa {
                t.push(c.term("K repeated to h heads", "clone", Unit::A));
                t.push(c.term("V repeated to h heads", "clone", Unit::A));
            } else {
                t.push(c.term("rope(K)", "cat", Unit::A));
                t.push(c.term("v_proj output", "mm", Unit::A));
            }
            // empty_like(q) takes q's (B, S, h, d_k) order: merging heads needs no copy.
            t.push(c.term("flash attention output (o_proj keeps it)", "_scaled_dot_product_flash_attention", Unit::A));
            t.push(c.small("flash logsumexp (fp32)", "_scaled_dot_product_flash_attention", "B·h·S", bhs, 4));
        }
    }
    t.push(c.term("h = x + attention (ffn_norm keeps it)", "add", Unit::A));
    t.push(c.small("ffn_norm sqrt output", "sqrt", "B·S", bs, 4));
    t.push(c.term("ffn_norm x / rms", "div", Unit::A));
    t.push(c.term("ffn_norm output (input of gate/up)", "mul", Unit::A));
    t.push(c.term("gate_proj output (silu keeps its input)", "mm", Unit::F));
    t.push(c.term("silu(gate)", "silu", Unit::F));
    t.push(c.term("up_proj output", "mm", Unit::F));
    t.push(c.term("silu·up (input of down_proj)", "mul", Unit::F));
    t.push(c.term("block output = h + ffn (next block keeps it)", "add", Unit::A));
    t
}

/// The closed-form estimate of `cfg` at batch `b`, sequence length `s` (fp32).
pub fn estimate(cfg: &ModelConfig, b: usize, s: usize) -> Estimate {
    let c = Ctx {
        b: b as u64,
        s: s as u64,
        d: cfg.d_model as u64,
        h: cfg.num_heads as u64,
        kvh: cfg.num_kv_heads as u64,
        dk: cfg.head_dim() as u64,
        f: cfg.d_ff as u64,
        v: cfg.vocab_size as u64,
        e: 4,
    };
    let (d, f, v, l) = (c.d, c.f, c.v, cfg.num_layers as u64);
    let kv = c.kvh * c.dk;
    let params = cfg.param_count();
    let head = if cfg.tied_embeddings { "" } else { " + V·d (lm_head)" };
    let attn_w = if kv == d { "4d²".to_string() } else { "2d² + 2d·h_kv·d_k".to_string() };
    let param_formula = format!("V·d (embedding){head} + L·({attn_w} + 3d·F + 2d) + d");
    debug_assert_eq!(params, v * d * if cfg.tied_embeddings { 1 } else { 2 } + l * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d) + d);
    let param_bytes = params * 4;
    let (optimizer_bytes, optimizer_formula) = match cfg.flavour {
        Flavour::Cs336 => (2 * param_bytes, "2·P·4 (AdamW m and v, fp32)".to_string()),
        // torch.optim.AdamW's per-parameter `step` counters live on the host (not capturable).
        Flavour::Tinyllama => (2 * param_bytes, "2·P·4 (torch AdamW exp_avg and exp_avg_sq, fp32; `step` counters stay on the host)".to_string()),
    };
    let (optimizer_temp_bytes, optimizer_temp_formula) = match cfg.flavour {
        Flavour::Cs336 => {
            // One parameter at a time: m_new, v_new, α·m, √v + eps and the update coexist.
            let largest = [v * d, f * d, d * d, kv * d].into_iter().max().unwrap_or(0);
            (5 * largest * 4, "5 × the largest parameter × 4 (m_new, v_new, α·m_new, √v_new + eps, the update)".to_string())
        }
        Flavour::Tinyllama => (param_bytes, "P × 4 (torch._foreach_sqrt over every exp_avg_sq at once)".to_string()),
    };
    let mut block = match cfg.flavour {
        Flavour::Cs336 => cs336_block(&c, cfg.attention),
        Flavour::Tinyllama => tinyllama_block(&c, cfg.attention),
    };
    block.retain(|t| t.elements > 0);
    let block_symbolic = symbolic(&block);
    let bs = c.b * c.s;
    let mut outside = vec![c.term("embedding output (block 0's input)", "embedding", Unit::A)];
    let (norm, logits, loss) = match cfg.flavour {
        Flavour::Cs336 => (
            vec![c.small("ln_final rsqrt output r", "rsqrt", "B·S", bs, 4), c.term("ln_final x·r", "mul", Unit::A), c.term("ln_final output (lm_head keeps it)", "mul", Unit::A)],
            Term { what: "logits".into(), op: "bmm", formula: "B·S·V·4".into(), unit: Unit::Small, elements: bs * v, elem: 4 },
            vec![
                // x − max, exp (kept for backward), then x − max − log(sum) and the gather.
                Term { what: "exp(logits − max) (kept for backward)".into(), op: "exp", formula: "B·S·V·4".into(), unit: Unit::Small, elements: bs * v, elem: 4 },
                Term { what: "logits − max".into(), op: "sub", formula: "B·S·V·4".into(), unit: Unit::Small, elements: bs * v, elem: 4 },
                Term { what: "log_softmax = logits − max − log Σexp".into(), op: "sub", formula: "B·S·V·4".into(), unit: Unit::Small, elements: bs * v, elem: 4 },
            ],
        ),
        Flavour::Tinyllama => {
            let n = c.b * (c.s - 1) * v;
            (
                vec![c.small("norm sqrt output", "sqrt", "B·S", bs, 4), c.term("norm x / rms", "div", Unit::A), c.term("norm output (output_proj keeps it)", "mul", Unit::A)],
                Term { what: "logits".into(), op: "mm", formula: "B·S·V·4".into(), unit: Unit::Small, elements: bs * v, elem: 4 },
                vec![
                    Term { what: "log_softmax of logits[:, :-1] (cross_entropy keeps it)".into(), op: "_log_softmax", formula: "B·(S−1)·V·4".into(), unit: Unit::Small, elements: n, elem: 4 },
                    Term { what: "logits[:, :-1].contiguous()".into(), op: "contiguous", formula: "B·(S−1)·V·4".into(), unit: Unit::Small, elements: n, elem: 4 },
                ],
            )
        }
    };
    outside.extend(norm);
    let e = c.e;
    let symbols = vec![
        ("a".to_string(), format!("B·S·d·{e}"), c.b * c.s * d * e),
        ("f".to_string(), format!("B·S·F·{e}"), c.b * c.s * f * e),
        ("s".to_string(), format!("B·h·S²·{e}"), c.b * c.h * c.s * c.s * e),
        ("m".to_string(), "S²·(1 for a bool mask)".to_string(), c.s * c.s),
    ];
    Estimate {
        flavour: cfg.flavour,
        batch: b,
        seq: s,
        layers: cfg.num_layers,
        symbols,
        params,
        param_formula,
        param_bytes,
        grad_bytes: param_bytes,
        optimizer_bytes,
        optimizer_formula,
        optimizer_temp_bytes,
        optimizer_temp_formula,
        block,
        block_symbolic,
        outside,
        logits,
        loss,
        residual_bytes: c.b * c.s * d * 4,
    }
}
