//! `Olmo2ForCausalLM` (transformers 5.23.0, `models/olmo2/modeling_olmo2.py`): no norm before
//! attention or the MLP, one after each (`post_attention_layernorm`,
//! `post_feedforward_layernorm`) before the residual add. The rest lives where Llama's does,
//! switched on the model type: the RMSNorm that casts after multiplying by the weight
//! (`rms_norm`), q_norm/k_norm over the whole projections and fp32 cos/sin whose products
//! `apply_rotary_pos_emb` casts back (`Block::attention`, `rotary`).
use super::{rms_norm, Block};
use crate::engine::runtime::py_frame;
use crate::engine::Tensor;

impl Block {
    /// `Olmo2DecoderLayer.forward`.
    pub(super) fn olmo2_layer(&self, x: Tensor) -> Tensor {
        let fr = super::frames(self.hf());
        let _f = py_frame(&fr.decoder_layer);
        let (l, eps) = (&self.layer, self.cfg.norm_eps);
        let residual = x;
        // `hidden_states, _ = self.self_attn(...)`: eager's weights live until the layer returns.
        let (a, _weights) = self.attention(&residual);
        // Each rebinding of `hidden_states` frees the value before it.
        let normed = rms_norm(fr, "post_attention_layernorm", &a, &l.attn_norm, eps);
        drop(a);
        let h = residual.add(&normed);
        drop(normed);
        let residual = h;
        let m = self.mlp(&residual);
        let normed = rms_norm(fr, "post_feedforward_layernorm", &m, &l.ffn_norm, eps);
        drop(m);
        residual.add(&normed)
    }
}
