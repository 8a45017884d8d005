//! The LLaMA-style decoder in its three flavours (cs336, tinyllama, hf), built from engine
//! primitives op for op (the op sequence decides which tensors exist and what autograd keeps).
pub mod config;
pub mod hf;
pub mod cs336;
pub mod init;
pub mod lora;
pub mod lora_params;
pub mod dora;
pub mod bnb;
pub mod presets;
pub mod py;
pub mod tinyllama;
pub mod tp;
pub mod vllm_0_33;
pub mod vllm_gpt_oss;
pub mod vllm_hybrid;
pub mod vllm_mla;

pub use config::{Attention, Checkpoint, ConfigError, Flavour, ModelConfig};

use crate::engine::{autocast, runtime};
use crate::engine::{DType, Device, Tensor};
use crate::record::Category;
use std::cell::RefCell;
use std::rc::Rc;

pub type RopeCache = Rc<RefCell<Vec<(usize, usize, DType, Tensor, Tensor)>>>;

/// A trainable tensor with its module path.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub tensor: Tensor,
}

/// One decoder block's weights (names differ per flavour; roles do not). Tensor clones are
/// handles, so a block's recompute closure (activation checkpointing) can own a copy.
#[derive(Clone)]
pub struct Layer {
    pub attn_norm: Tensor,
    /// q, k, v (`--fused-qkv`: one `qkv_proj`, rows q then k then v).
    pub qkv: Projection,
    pub o: Tensor,
    pub ffn_norm: Tensor,
    /// gate, up (`--fused-gate-up`: one `gate_up_proj`, rows gate then up).
    pub gate_up: Projection,
    pub down: Tensor,
    /// The hf flavour's biases and q/k norms (None for the others).
    pub hf: Option<Rc<hf::modeling::HfLayer>>,
}

impl Layer {
    /// Every parameter of the block (peft's adapters included), in no particular order.
    pub fn weights(&self) -> Vec<&Tensor> {
        let mut w = vec![&self.attn_norm];
        w.extend(self.qkv.weights());
        w.extend([&self.o, &self.ffn_norm]);
        w.extend(self.gate_up.weights());
        w.push(&self.down);
        if let Some(h) = &self.hf {
            w.extend(h.qkv_bias.iter().flatten());
            w.extend(h.o_bias.iter());
            w.extend(h.mlp_bias.iter().flatten());
            w.extend(h.qk_norm.iter().flatten());
            w.extend(h.router.iter());
            w.extend(h.shared_expert.iter().flatten());
            // Gemma's post-norms, gpt-oss's sinks and biases, DeepSeek-V3's latent attention and
            // shared MLP: parameters of the decoder layer (FSDP2's block unit holds them).
            w.extend(h.post_norms.iter().flatten());
            w.extend(h.gpt_oss.iter().flat_map(|g| [&g.sinks, &g.router_bias, &g.gate_up_bias, &g.down_bias]));
            if let Some(ds) = &h.deepseek {
                if let Some((a, a_bias, a_norm, b)) = &ds.q_lora {
                    w.extend([a, a_norm, b]);
                    w.extend(a_bias.iter());
                }
                w.extend(ds.q_proj.iter());
                w.extend([&ds.kv_a, &ds.kv_a_norm, &ds.kv_b]);
                w.extend(ds.kv_a_bias.iter());
                w.extend(ds.shared.iter().flatten());
            }
            // peft's adapters belong to the layer's modules (FSDP2 shards them with it), the
            // ParamWrapper's on the experts and router too.
            w.extend(h.lora.iter().flatten().flat_map(|a| [&a.a, &a.b]));
            w.extend(h.param_lora.iter().flat_map(|p| [&p.router, &p.gate_up, &p.down]).flatten().flat_map(|a| [&a.a, &a.b]));
        }
        w
    }
}

/// Projections of one input: separate weights, or one fused weight whose output is split
/// into views of the given widths (`qkv.split(...)`, `gate_up.chunk(2, -1)`).
#[derive(Clone)]
pub enum Projection {
    Separate(Vec<(&'static str, Tensor)>),
    Fused(&'static str, Tensor, Vec<usize>),
}

impl Projection {
    /// The weights in registration order.
    pub fn weights(&self) -> Vec<&Tensor> {
        match self {
            Projection::Separate(ws) => ws.iter().map(|(_, w)| w).collect(),
            Projection::Fused(_, w, _) => vec![w],
        }
    }

    /// Each projection of `x`, passed through `post` as soon as it exists (separate) or
    /// after the one product is split (fused), as the Python writes it.
    pub(crate) fn apply(&self, x: &Tensor, lin: fn(&str, &Tensor, &Tensor) -> Tensor, mut post: impl FnMut(usize, Tensor) -> Tensor) -> Vec<Tensor> {
        match self {
            Projection::Separate(ws) => ws.iter().enumerate().map(|(i, (n, w))| post(i, lin(n, x, w))).collect(),
            Projection::Fused(n, w, sizes) => {
                let parts = lin(n, x, w).split_with_sizes(sizes, -1);
                parts.into_iter().enumerate().map(|(i, t)| post(i, t)).collect()
            }
        }
    }

    /// As [`Projection::apply`], also handing back the fused product itself (None when
    /// separate), for a model that binds it to a local (`qkv = self.qkv_proj(x)`): the
    /// caller keeps it, so its storage lives as long as that Python local does.
    pub(crate) fn apply_bound(&self, x: &Tensor, lin: fn(&str, &Tensor, &Tensor) -> Tensor, mut post: impl FnMut(usize, Tensor) -> Tensor) -> (Option<Tensor>, Vec<Tensor>) {
        match self {
            Projection::Separate(_) => (None, self.apply(x, lin, post)),
            Projection::Fused(n, w, sizes) => {
                let whole = lin(n, x, w);
                let parts = whole.split_with_sizes(sizes, -1);
                (Some(whole), parts.into_iter().enumerate().map(|(i, t)| post(i, t)).collect())
            }
        }
    }
}

/// What runs around a module's forward: FSDP2's `fully_shard` hooks (all-gather before,
/// reshard after, and the autograd nodes that fire its backward hooks). A unit is a decoder
/// block or the root (the whole model, as `fully_shard(model)` wraps it last).
pub trait ModuleHooks {
    /// Before block `block` runs on `x`; returns the input the block sees.
    fn block_pre_forward(&self, block: usize, x: Tensor) -> Tensor;
    /// After block `block` returned `y`; returns the output the caller sees.
    fn block_post_forward(&self, block: usize, y: Tensor) -> Tensor;
    /// Before the model's forward runs (its inputs are token ids: nothing to wrap).
    fn root_pre_forward(&self);
    /// After the model's forward returned `outputs` (logits, and the loss when the model
    /// computes it), which the hooks may replace.
    fn root_post_forward(&self, outputs: &mut [&mut Tensor]);
    /// The dtype block `block`'s floating-point inputs are cast to before it runs (FSDP2's
    /// `cast_forward_inputs` at a unit's first block; None: as given).
    fn block_input_dtype(&self, _block: usize) -> Option<crate::engine::DType> {
        None
    }
}

/// Run block `i` as `block(x)` with the model's module hooks around it (also inside a
/// checkpointed region, where a recomputation calls them again, as PyTorch's would).
pub(crate) fn hooked_block(hooks: &Option<Rc<dyn ModuleHooks>>, i: usize, x: Tensor, block: impl FnOnce(Tensor) -> Tensor) -> Tensor {
    match hooks {
        None => block(x),
        Some(h) => {
            let x = h.block_pre_forward(i, x);
            let y = block(x);
            h.block_post_forward(i, y)
        }
    }
}

pub struct Model {
    pub config: ModelConfig,
    pub device: Device,
    pub dtype: DType,
    params: Vec<Param>,
    pub embedding: Tensor,
    pub layers: Vec<Layer>,
    pub final_norm: Tensor,
    /// The LM head weight (the embedding itself when tied).
    pub lm_head: Tensor,
    /// cs336: the (2, max_seq_len, d_k/2) cos/sin buffer built at construction.
    pub rope_buffer: Option<Tensor>,
    /// tinyllama: each block's Rotary caches cos/sin tables per (sequence length, dtype)
    /// on first use: (layer, length, dtype, cos, sin). Shared with recompute closures.
    pub rope_cache: RopeCache,
    /// Buffers the model registers besides those above (hf: RoPE's `original_inv_freq`).
    pub buffers: Vec<Tensor>,
    /// `model.train()` / `model.eval()`: transformers checkpoints layers only in training mode.
    pub training: std::cell::Cell<bool>,
    /// Module hooks a parallel layout installs (None: a plain single-device model).
    pub hooks: RefCell<Option<Rc<dyn ModuleHooks>>>,
    /// hf: the `position_ids` the caller passes to the next forward (None: transformers makes
    /// `arange(S)` itself). Sequence parallelism needs them: the model sees S / tp positions.
    pub position_ids: RefCell<Option<Tensor>>,
}

impl Model {
    /// Build the model, allocating parameters in module-registration order. On cpu they are
    /// initialised from `seed` as the reference implementation does; on meta only shapes exist.
    pub fn new(config: &ModelConfig, device: Device, seed: u64) -> Result<Model, ConfigError> {
        Model::new_in(config, device, seed, DType::F32)
    }

    /// Build with parameters (and floating buffers) of `dtype`: `model.to(torch.bfloat16)`
    /// for pure low-precision training.
    pub fn new_in(config: &ModelConfig, device: Device, seed: u64, dtype: DType) -> Result<Model, ConfigError> {
        config.validate()?;
        let _c = runtime::category(Category::Parameter);
        let _g = runtime::no_grad();
        let mut rng = init::Rng::new(seed);
        Ok(match config.flavour {
            Flavour::Cs336 => cs336::build(config, device, dtype, &mut rng),
            Flavour::Tinyllama => tinyllama::build(config, device, dtype, &mut rng),
            Flavour::Hf => hf::modeling::build(config, device, dtype, &mut rng),
        })
    }

    pub fn parameters(&self) -> &[Param] {
        &self.params
    }
    pub fn num_parameters(&self) -> u64 {
        self.params.iter().map(|p| p.tensor.numel() as u64).sum()
    }
    /// Elements of the parameters that train (`requires_grad`), as peft's
    /// `print_trainable_parameters()` counts them.
    pub fn num_trainable_parameters(&self) -> u64 {
        self.params.iter().filter(|p| p.tensor.requires_grad()).map(|p| p.tensor.numel() as u64).sum()
    }
    pub fn parameter_bytes(&self) -> u64 {
        self.params.iter().map(|p| p.tensor.nbytes() as u64).sum()
    }

    /// Logits (B, S, V) for token ids (B, S).
    pub fn forward(&self, ids: &Tensor) -> Tensor {
        self.forward_masked(ids, None)
    }

    /// [`Model::forward`] with the collator's attention_mask (hf; the others take none). The
    /// hf output's DynamicCache dies with the unbound result, as `model(...)` does.
    pub fn forward_masked(&self, ids: &Tensor, attention_mask: Option<&Tensor>) -> Tensor {
        self.root_pre_forward();
        let mut logits = match self.config.flavour {
            Flavour::Cs336 => cs336::forward(self, ids),
            Flavour::Tinyllama => tinyllama::forward(self, ids, None, &mut |_| {}).0,
            Flavour::Hf => {
                let out = hf::modeling::forward(self, ids, None, attention_mask, &mut |_| {});
                if self.config.hf().is_some_and(|h| h.convert_outputs_to_fp32) {
                    // accelerate's wrapper converts the output of every call, labels or not,
                    // once its autocast region has returned (the cast cache cleared): the
                    // fp32 logits are made while the bf16 ones still live.
                    let _ended = autocast::end_here();
                    hf::accelerate_amp::convert_outputs_to_fp32(out).logits
                } else {
                    out.logits
                }
            }
        };
        self.root_post_forward(&mut [&mut logits]);
        logits
    }

    fn root_pre_forward(&self) {
        let hooks = self.hooks.borrow().clone();
        if let Some(h) = hooks {
            h.root_pre_forward();
        }
    }

    fn root_post_forward(&self, outputs: &mut [&mut Tensor]) {
        let hooks = self.hooks.borrow().clone();
        if let Some(h) = hooks {
            h.root_post_forward(outputs);
        }
    }

    /// Logits and loss as the reference computes them, calling `logits_ready` in between
    /// (where the loss phase starts). cs336 computes the loss outside the model, so the
    /// forward's locals are gone by then; the tinyllama model computes it inside its
    /// `forward`, so the mask and the shifted copies live until it returns.
    pub fn forward_loss(&self, ids: &Tensor, targets: &Tensor, logits_ready: &mut dyn FnMut(&Tensor)) -> (Tensor, Tensor) {
        self.forward_loss_masked(ids, targets, None, logits_ready)
    }

    /// [`Model::forward_loss`] with the collator's attention_mask (hf only).
    pub fn forward_loss_masked(&self, ids: &Tensor, targets: &Tensor, attention_mask: Option<&Tensor>, logits_ready: &mut dyn FnMut(&Tensor)) -> (Tensor, Tensor) {
        self.root_pre_forward();
        match self.config.flavour {
            Flavour::Cs336 => {
                let mut logits = cs336::forward(self, ids);
                self.root_post_forward(&mut [&mut logits]);
                logits_ready(&logits);
                let _s = runtime::scope("loss");
                let loss = cs336::cross_entropy(&logits, targets);
                (logits, loss)
            }
            Flavour::Tinyllama => {
                let (mut logits, loss) = tinyllama::forward(self, ids, Some(targets), logits_ready);
                let mut loss = loss.expect("targets given");
                self.root_post_forward(&mut [&mut logits, &mut loss]);
                (logits, loss)
            }
            Flavour::Hf => {
                // `loss = model(input_ids, labels=labels).loss`: the DynamicCache dies here, the
                // logits when the caller drops them (`del out`).
                let mut out = hf::modeling::forward(self, ids, Some(targets), attention_mask, logits_ready);
                // The Trainer's autocast: accelerate's wrapper around the forward, converting
                // once its autocast region has returned (the cast cache cleared).
                let _ended = self.config.hf().is_some_and(|h| h.convert_outputs_to_fp32).then(autocast::end_here);
                if _ended.is_some() {
                    out = hf::accelerate_amp::convert_outputs_to_fp32(out);
                }
                let (mut logits, mut loss) = (out.logits, out.loss.expect("labels given"));
                self.root_post_forward(&mut [&mut logits, &mut loss]);
                (logits, loss)
            }
        }
    }

    /// `zero_grad(set_to_none=True)`.
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.tensor.clear_grad();
        }
    }
}

/// `F.linear(x, w)` without bias (`x @ wᵀ` through `matmul`): the weight gradient comes
/// back contiguous and is stolen into `.grad`.
pub(crate) fn linear(name: &str, x: &Tensor, w: &Tensor) -> Tensor {
    let _s = runtime::scope(name);
    // F.linear is an autocast op: the weight itself is cast (and cached), not its transpose;
    // the weight before the input (autocast::lower_pair: right to left).
    let w = autocast::lower(w);
    let x = autocast::lower(x);
    x.matmul(&w.t())
}

/// `einsum("... d_in, d_out d_in -> ... d_out", x, w)` as torch.einsum runs it: one `bmm`
/// of x viewed (1, N, d_in) with wᵀ viewed (1, d_in, d_out). Its weight gradient arrives
/// transposed, so AccumulateGrad copies it (one extra weight-sized allocation).
pub(crate) fn linear_einsum(name: &str, x: &Tensor, w: &Tensor) -> Tensor {
    let _s = runtime::scope(name);
    // einsum is an autocast op: its operands are cast before einsum makes views of them.
    let (x, w) = (&autocast::lower(x), &autocast::lower(w));
    let d_in = x.dim(-1);
    let n = x.numel() / d_in;
    let mut out_shape = x.shape().to_vec();
    *out_shape.last_mut().unwrap() = w.dim(0);
    x.reshape(&[1, n, d_in]).bmm(&w.t().unsqueeze(0)).reshape(&out_shape)
}

/// Registers parameters in order while a flavour builds its model.
pub(crate) struct Builder<'a> {
    pub device: Device,
    pub dtype: DType,
    pub rng: &'a mut init::Rng,
    pub params: Vec<Param>,
    /// Parameters registered now are frozen (`requires_grad=False`: peft's base weights).
    pub frozen: bool,
}

/// The weights a flavour built, in registration order.
pub(crate) struct Weights {
    pub embedding: Tensor,
    pub layers: Vec<Layer>,
    pub final_norm: Tensor,
    pub lm_head: Tensor,
    pub rope_buffer: Option<Tensor>,
    pub buffers: Vec<Tensor>,
}

impl Builder<'_> {
    pub fn finish(self, config: &ModelConfig, w: Weights) -> Model {
        Model {
            config: config.clone(),
            device: self.device,
            dtype: self.dtype,
            params: self.params,
            embedding: w.embedding,
            layers: w.layers,
            final_norm: w.final_norm,
            lm_head: w.lm_head,
            rope_buffer: w.rope_buffer,
            rope_cache: Default::default(),
            buffers: w.buffers,
            training: std::cell::Cell::new(false),
            hooks: RefCell::new(None),
            position_ids: RefCell::new(None),
        }
    }

    pub fn param(&mut self, name: String, shape: &[usize], init: init::Init) -> Tensor {
        self.param_as(name, shape, init, self.dtype, self.frozen)
    }

    /// A parameter of its own type and trainability (peft's fp32 adapters and trainable
    /// biases, bitsandbytes' uint8 weights and compute-dtype biases).
    pub fn param_as(&mut self, name: String, shape: &[usize], init: init::Init, dtype: DType, frozen: bool) -> Tensor {
        let t = {
            let _s = runtime::scope(name.trim_end_matches(".weight"));
            init::make(shape, dtype, self.device, init, self.rng)
        };
        let t = t.requires_grad_(!frozen);
        self.params.push(Param { name, tensor: t.clone() });
        t
    }
}
