//! `Phi3ForCausalLM` (transformers 5.23.0, `models/phi3/modeling_phi3.py`): Llama's layer with
//! one fused `qkv_proj` and one fused `gate_up_proj`, and an `apply_rotary_pos_emb` that
//! concatenates the rotated part with the (empty) pass-through part. `resid_pdrop` dropout is
//! identity at 0.0, the only value the config reader accepts.
use super::{apply_rope as rope_llama, Block};
use crate::engine::runtime::py_frame;
use crate::engine::Tensor;
use crate::model::init::Init;
use crate::model::py::hf_frames::HfFrames;
use crate::model::{Builder, Layer, Projection};
use std::rc::Rc;

/// One decoder layer's weights in registration order: `self_attn.o_proj` (declared before
/// `qkv_proj` in `Phi3Attention.__init__`), `self_attn.qkv_proj` (q + 2·kv rows), then
/// `mlp.gate_up_proj` (2·F rows), `mlp.down_proj`, `input_layernorm`,
/// `post_attention_layernorm`. `dims` is [q, kv, d, F]; `lin(b, slot, name, rows, cols)` makes
/// each linear's weight (a bitsandbytes one under 4-bit or 8-bit loads, kept by slot of
/// `lora::layer_linears`).
pub(super) fn layer(b: &mut Builder, p: &dyn Fn(&str) -> String, dims: [usize; 4], lin: &mut dyn FnMut(&mut Builder, usize, &str, usize, usize) -> Tensor) -> Layer {
    let [q, kv, d, f] = dims;
    let o = lin(b, 3, "self_attn.o_proj", d, q);
    let qkv = lin(b, 0, "self_attn.qkv_proj", q + 2 * kv, d);
    let gate_up = lin(b, 4, "mlp.gate_up_proj", 2 * f, d);
    let down = lin(b, 6, "mlp.down_proj", d, f);
    let attn_norm = b.param(p("input_layernorm.weight"), &[d], Init::Ones);
    let ffn_norm = b.param(p("post_attention_layernorm.weight"), &[d], Init::Ones);
    Layer {
        attn_norm,
        qkv: Projection::Fused("qkv_proj", qkv, vec![q, kv, kv]),
        o,
        ffn_norm,
        gate_up: Projection::Fused("gate_up_proj", gate_up, vec![f, f]),
        down,
        hf: Some(Rc::new(super::HfLayer::default())),
    }
}

/// Phi-3's `apply_rotary_pos_emb` for one of q, k: `cat([x_rot * cos + rotate_half(x_rot) *
/// sin, x_pass], -1)`. With the full rotary dim `x[..., :d]` is `x` itself (PyTorch's indexing
/// returns the tensor for a full slice) and `x[..., d:]` an empty slice, whose backward still
/// allocates an input-sized zero gradient; the sum dies once the cat exists.
pub(super) fn apply_rope(fr: &'static HfFrames, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let _f = py_frame(&fr.apply_rotary_pos_emb);
    let d = x.dim(-1);
    let pass = x.narrow(-1, d, 0);
    let rotated = rope_llama(fr, x, cos, sin);
    Tensor::cat(&[rotated, pass], -1)
}

impl Block {
    /// `qkv = self.qkv_proj(x)` and its three slices viewed as (B, S, heads, d) and transposed:
    /// the product, then q, k, v.
    pub(super) fn phi3_qkv(&self, x: &Tensor, b: usize, s: usize) -> (Tensor, [Tensor; 3]) {
        let hd = self.hf().head_dim;
        let (q, kv) = (self.cfg.num_heads * hd, self.cfg.num_kv_heads * hd);
        // slot 0 of lora::layer_linears: peft's LoRA and bitsandbytes wrap the fused linear whole.
        // (transformers' plan: colwise_gather_output, the whole product on every rank.)
        let qkv = self.gather(0, self.proj(0, &self.colwise(x), self.layer.qkv.weights()[0], None));
        let part = |start: usize, len: usize| qkv.narrow(-1, start, len).view(&[b, s, usize::MAX, hd]).transpose(1, 2);
        let parts = [part(0, q), part(q, kv), part(q + kv, kv)];
        (qkv, parts)
    }

    /// `Phi3MLP.forward`: `up_states = gate_up_proj(x)`; `gate, up_states = up_states.chunk(2,
    /// -1)`; `up_states = up_states * act(gate)`; `down_proj(up_states)`. `gate` (a view of the
    /// product) stays a local until the function returns.
    pub(super) fn phi3_mlp(&self, x: &Tensor) -> Tensor {
        let l = &self.layer;
        let f = self.cfg.d_ff;
        let product = self.gather(4, self.proj(4, &self.colwise(x), l.gate_up.weights()[0], None));
        let mut parts = product.split_with_sizes(&[f, f], -1).into_iter();
        drop(product);
        let (gate, up) = (parts.next().expect("gate"), parts.next().expect("up"));
        let up = {
            let act = gate.silu();
            up.mul(&act)
        };
        // (rowwise_split_input: this rank's columns of `up`, the output all-reduced.)
        let out = self.rowwise(self.proj(6, &self.split(6, &up), &l.down, None));
        drop((up, gate));
        out
    }
}
