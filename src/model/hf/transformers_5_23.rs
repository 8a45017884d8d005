//! transformers 5.23.0's causal LMs, op for op: `LlamaForCausalLM` and the three files that
//! differ from it only where [`Arch`] says (`MistralForCausalLM`: no biases, a sliding window;
//! `Qwen2ForCausalLM`: q/k/v biases; `Qwen3ForCausalLM`: `q_norm`/`k_norm` on each head).
//!
//! Everything the op sequence depends on for this release is in this file: the order of ops,
//! which Python locals keep a tensor alive until their function returns, the mask and RoPE
//! tables built per forward, the `DynamicCache` a forward fills when `use_cache` is on, the
//! attention interfaces (eager, sdpa with its CUDA backend, flash_attention_2) and
//! `ForCausalLMLoss`. Sources: `models/llama/modeling_llama.py`, `models/qwen3/modeling_qwen3.py`,
//! `integrations/sdpa_attention.py`, `integrations/flash_attention.py`, `masking_utils.py`
//! (`create_causal_mask`, `sdpa_mask`, `eager_mask`, `find_packed_sequence_indices`),
//! `cache_utils.py` (`DynamicLayer.update`), `loss/loss_utils.py`, `modeling_layers.py`
//! (`GradientCheckpointingLayer`).
use super::router_aux_loss::{self, RouterLogits};
use super::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use crate::engine::checkpoint::{checkpoint, checkpoint_reentrant};
use crate::engine::runtime::{self, py_frame, scope};
use crate::model::py::hf_frames::{self as py, HfFrames};
use crate::engine::storage::GradRedistribute;
use crate::engine::{DType, Device, Tensor};
use crate::model::init::Init;
use crate::model::tp::{self, TensorParallel};
use crate::model::bnb::{Quant, Quantized};
use crate::model::lora::{self, Adapter};
use crate::model::{linear, Builder, Layer, Model, ModelConfig, Projection, Weights};
use crate::record::Category;
use std::rc::Rc;

// The families whose files differ from Llama's in more than a flag: their own op sequences,
// children of this module (they use its private pieces).
#[path = "phi3.rs"]
mod phi3;
#[path = "olmo2.rs"]
mod olmo2;
#[path = "gpt_oss_5_23.rs"]
mod gpt_oss_5_23;
#[path = "deepseek_v3_5_23.rs"]
mod deepseek_v3_5_23;

/// Whether `hf` is DeepSeek-V3 (latent attention and its own sparse block: deepseek_v3_5_23.rs).
fn is_deepseek(hf: &HfConfig) -> bool {
    hf.moe.as_ref().is_some_and(|m| m.deepseek.is_some())
}

/// Whether `hf` is gpt-oss (its own attention, layer and experts: gpt_oss_5_23.rs).
fn is_gpt_oss(hf: &HfConfig) -> bool {
    hf.moe.as_ref().is_some_and(|m| m.family == super::moe::MoeFamily::GptOss)
}

/// Qwen2-MoE with `use_sliding_window` (moe::sliding_window): `sliding_window` is its sliding
/// layers' (HfConfig::sliding_layers), not every layer's.
fn is_qwen2_moe_window(hf: &HfConfig) -> bool {
    hf.sliding_layers.is_some() && hf.moe.as_ref().is_some_and(|m| m.family == super::moe::MoeFamily::Qwen2Moe)
}
#[path = "gemma_5_23.rs"]
mod gemma;

/// The weights only the hf flavour has, per decoder layer.
#[derive(Clone, Default)]
pub struct HfLayer {
    /// q, k, v biases (qwen2; llama/qwen3 with `attention_bias`).
    pub qkv_bias: Option<[Tensor; 3]>,
    pub o_bias: Option<Tensor>,
    /// gate, up, down biases (llama `mlp_bias`).
    pub mlp_bias: Option<[Tensor; 3]>,
    /// Qwen3's per-head RMSNorm weights (head_dim) on q and k.
    pub qk_norm: Option<[Tensor; 2]>,
    /// peft's LoRA adapters, by slot of `lora::SLOTS` (None: not adapted).
    pub lora: Vec<Option<Adapter>>,
    /// bitsandbytes' 4-bit or 8-bit storage, by slot of `lora::SLOTS` (empty: not
    /// quantized; None: no linear in the slot).
    pub quant: Vec<Option<Quantized>>,
    /// A sparse MoE block's router (experts, hidden); its experts' 3-D weights are the layer's
    /// `gate_up` (fused) and `down`.
    pub router: Option<Tensor>,
    /// peft's ParamWrapper adapters on the router and the experts (`target_parameters`).
    pub param_lora: Option<crate::model::lora_params::ParamAdapters>,
    /// Qwen2-MoE's shared expert: gate_proj, up_proj, down_proj and `shared_expert_gate` (1, hidden).
    pub shared_expert: Option<[Tensor; 4]>,
    /// gpt-oss's sinks, router bias and expert biases.
    pub gpt_oss: Option<super::gpt_oss::GptOssWeights>,
    /// DeepSeek-V3's latent attention, shared MLP and router bias.
    pub deepseek: Option<deepseek_v3_5_23::DeepseekWeights>,
    /// Gemma's `post_attention_layernorm` and `post_feedforward_layernorm` (its
    /// `input_layernorm` and `pre_feedforward_layernorm` are the layer's two norms).
    pub post_norms: Option<[Tensor; 2]>,
}

pub(crate) fn build(full: &ModelConfig, device: Device, dtype: DType, rng: &mut crate::model::init::Rng) -> Model {
    // Under tensor parallelism every weight is this rank's shard (tp::local_config); the
    // embedding and the head hold this rank's vocabulary rows.
    let local = tp::local_config(full);
    let cfg = &local;
    let hf = cfg.hf.as_ref().expect("the hf flavour has hf options");
    let vocab_rows = cfg.tp.map_or((0, cfg.vocab_size), |t| t.rows(cfg.vocab_size));
    let sequence_parallel = cfg.sequence_parallel();
    let (d, f, v, hd) = (cfg.d_model, cfg.d_ff, vocab_rows.1, hf.head_dim);
    let (q, kv) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
    // `_init_weights`: normal(0, initializer_range 0.02) for linears and the embedding, zero
    // biases, RMSNorm weights ones.
    let std = Init::Normal { std: 0.02 };
    let zero = Init::Normal { std: 0.0 };
    // peft freezes every base weight (`requires_grad=False`) and trains only its adapters.
    let mut b = Builder { device, dtype, rng, params: Vec::new(), frozen: hf.lora.is_some() || hf.bnb.is_some() };
    // Double quantization: bitsandbytes' process-wide "dynamic" map (`name2qmap`, 256 fp32 on
    // the device), made by the first quantization; each quant_state also holds its own copy.
    let dynamic_map = hf.bnb.as_ref().and_then(|q| q.four_bit()).filter(|q| q.double_quant).map(|_| {
        let _c = runtime::category(Category::Buffer);
        let _a = runtime::allocate_now();
        crate::model::init::make(&[256], DType::F32, device, Init::Ones, b.rng)
    });
    let embedding = b.param("model.embed_tokens.weight".into(), &[v, d], std);
    if v != full.vocab_size {
        // Its gradient is the whole table (tp::vocab_parallel_embedding).
        embedding.storage().set_grad_redistribute(GradRedistribute::Rows { first: vocab_rows.0, rows: v });
    }
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
        let p = |n: &str| format!("model.layers.{i}.{n}");
        // Registration order: self_attn (q, k, v, o, then q_norm, k_norm), mlp, then the
        // two norms; each Linear's weight before its bias.
        // A Linear4bit under bitsandbytes: its packed weight is the module's weight; its
        // bias ends in the compute dtype (the first forward converts `bias.data`).
        let mut quant: Vec<Option<Quantized>> = if hf.bnb.is_some() { vec![None; lora::SLOTS] } else { Vec::new() };
        let mut lin = |b: &mut Builder, slot: usize, name: &str, rows: usize, cols: usize, bias: bool| {
            // transformers' plan shards a gathered or split projection's weight although its
            // module sees the whole width (Phi-3's fused ones, OLMo-2's q/k/v: tp::weight_width):
            // the rows of a colwise one, the columns of o and down.
            let (rows, cols) = match slot {
                3 | 6 => (rows, tp::weight_width(cfg, slot, cols)),
                _ => (tp::weight_width(cfg, slot, rows), cols),
            };
            let Some(q) = &hf.bnb else {
                let w = b.param(p(&format!("{name}.weight")), &[rows, cols], std);
                // peft's `bias="all"|"lora_only"`: these biases stay trainable.
                let frozen = b.frozen && !hf.lora.as_ref().is_some_and(|l| l.trains_bias(name.rsplit('.').next().unwrap_or(name)));
                let bias = bias.then(|| b.param_as(p(&format!("{name}.bias")), &[rows], zero, b.dtype, frozen));
                return (w, bias);
            };
            let weight = p(&format!("{name}.weight"));
            let (stored, w, bias_dtype) = match &q.quant {
                Quant::FourBit(f) => {
                    let packed = crate::model::bnb::packed(b, weight, rows, cols, f, q.load_dtype);
                    let w = packed.weight.clone();
                    (Quantized::FourBit(packed), w, f.compute_dtype)
                }
                // Linear8bitLt's first forward casts the bias to the input's type: the
                // unquantized type, which it already has.
                Quant::Int8(_) => {
                    let int8 = crate::model::bnb::int8(b, weight, rows, cols);
                    let w = int8.weight.clone();
                    (Quantized::Int8(int8), w, b.dtype)
                }
            };
            quant[slot] = Some(stored);
            let bias = bias.then(|| b.param_as(p(&format!("{name}.bias")), &[rows], zero, bias_dtype, b.frozen));
            (w, bias)
        };
        if let Some((m, ds)) = hf.moe.as_ref().and_then(|m| m.deepseek.as_ref().map(|ds| (m, ds))) {
            let mut layer = deepseek_v3_5_23::layer(&mut b, &p, m, ds, [i, d, cfg.num_heads], &mut lin);
            Rc::get_mut(layer.hf.as_mut().expect("hf layer")).expect("a new layer").quant = quant;
            layers.push(layer);
            continue;
        }
        if let Some(m) = hf.moe.as_ref().filter(|_| is_gpt_oss(hf)) {
            let mut layer = gpt_oss_5_23::layer(&mut b, &p, m, hf.qkv_bias, [q, kv, d, cfg.num_heads], hf.lora.as_ref().is_some_and(|l| l.trains_router_bias()), &mut lin);
            Rc::get_mut(layer.hf.as_mut().expect("hf layer")).expect("a new layer").quant = quant;
            layers.push(layer);
            continue;
        }
        if hf.model_type == Arch::Phi3 {
            let mut lin = |b: &mut Builder, slot: usize, name: &str, rows: usize, cols: usize| lin(b, slot, name, rows, cols, false).0;
            let mut layer = phi3::layer(&mut b, &p, [q, kv, d, f], &mut lin);
            Rc::get_mut(layer.hf.as_mut().expect("hf layer")).expect("a new layer").quant = quant;
            layers.push(layer);
            continue;
        }
        let (wq, bq) = lin(&mut b, 0, "self_attn.q_proj", q, d, hf.qkv_bias);
        let (wk, bk) = lin(&mut b, 1, "self_attn.k_proj", kv, d, hf.qkv_bias);
        let (wv, bv) = lin(&mut b, 2, "self_attn.v_proj", kv, d, hf.qkv_bias);
        let (wo, bo) = lin(&mut b, 3, "self_attn.o_proj", d, q, hf.o_bias);
        // Qwen3's and Gemma 3's norms are per head; OLMo-2's span the whole q and k projections.
        // Gemma's norms scale by `1 + w`: zero-initialised.
        let norm_init = if hf.model_type.is_gemma() { zero } else { Init::Ones };
        let qk_norm = match hf.model_type {
            Arch::Qwen3 | Arch::Gemma3Text => Some([hd, hd]),
            Arch::Olmo2 => Some([q, kv]),
            _ => None,
        }
        .map(|[nq, nk]| [b.param(p("self_attn.q_norm.weight"), &[nq], norm_init), b.param(p("self_attn.k_norm.weight"), &[nk], norm_init)]);
        if let Some(m) = &hf.moe {
            let (router, gate_up, down, shared_expert) = moe_weights(&mut b, m, &p, d, &mut lin);
            let attn_norm = b.param(p("input_layernorm.weight"), &[d], Init::Ones);
            let ffn_norm = b.param(p("post_attention_layernorm.weight"), &[d], Init::Ones);
            // bitsandbytes quantizes the attention's nn.Linear modules only (the router and the
            // 3-D experts stay in the load dtype: replace_with_bnb_linear converts nn.Linear).
            let extra = HfLayer { qkv_bias: bq.map(|bq| [bq, bk.expect("k bias"), bv.expect("v bias")]), o_bias: bo, qk_norm, router: Some(router), shared_expert, quant, ..HfLayer::default() };
            layers.push(Layer {
                attn_norm,
                qkv: Projection::Separate(vec![("q_proj", wq), ("k_proj", wk), ("v_proj", wv)]),
                o: wo,
                ffn_norm,
                gate_up: Projection::Fused("gate_up_proj", gate_up, vec![m.intermediate, m.intermediate]),
                down,
                hf: Some(Rc::new(extra)),
            });
            continue;
        }
        let (wg, bg) = lin(&mut b, 4, "mlp.gate_proj", f, d, hf.mlp_bias);
        let (wu, bu) = lin(&mut b, 5, "mlp.up_proj", f, d, hf.mlp_bias);
        let (wd, bd) = lin(&mut b, 6, "mlp.down_proj", d, f, hf.mlp_bias);
        drop(lin);
        // OLMo-2 has no pre-norms: its two norms follow attention and the MLP. Gemma has four.
        let (attn_name, ffn_name) = match hf.model_type {
            Arch::Olmo2 => ("post_attention_layernorm", "post_feedforward_layernorm"),
            _ => ("input_layernorm", "post_attention_layernorm"),
        };
        let (attn_norm, ffn_norm, post_norms) = if hf.gemma.is_some() {
            let (a, f, post) = gemma::layer_norms(&mut b, &p, d);
            (a, f, Some(post))
        } else {
            (b.param(p(&format!("{attn_name}.weight")), &[d], Init::Ones), b.param(p(&format!("{ffn_name}.weight")), &[d], Init::Ones), None)
        };
        if sequence_parallel {
            attn_norm.storage().set_grad_redistribute(GradRedistribute::Partial);
            ffn_norm.storage().set_grad_redistribute(GradRedistribute::Partial);
        }
        let extra = HfLayer {
            qkv_bias: bq.map(|bq| [bq, bk.expect("k bias"), bv.expect("v bias")]),
            o_bias: bo,
            mlp_bias: bg.map(|bg| [bg, bu.expect("up bias"), bd.expect("down bias")]),
            qk_norm,
            lora: Vec::new(),
            quant,
            router: None,
            param_lora: None,
            shared_expert: None,
            gpt_oss: None,
            deepseek: None,
            post_norms,
        };
        layers.push(Layer {
            attn_norm,
            qkv: Projection::Separate(vec![("q_proj", wq), ("k_proj", wk), ("v_proj", wv)]),
            o: wo,
            ffn_norm,
            gate_up: Projection::Separate(vec![("gate_proj", wg), ("up_proj", wu)]),
            down: wd,
            hf: Some(Rc::new(extra)),
        });
    }
    let final_norm = b.param("model.norm.weight".into(), &[d], if hf.model_type.is_gemma() { zero } else { Init::Ones });
    if let Some(lc) = &hf.lora {
        // (Phi-3's fused qkv_proj and gate_up_proj in q's and gate's slots.)
        let (qkv_out, gate_out) = if hf.model_type == Arch::Phi3 { (q + 2 * kv, 2 * f) } else { (q, f) };
        let linears = lora::linears_of(hf);
        match hf.moe.as_ref().and_then(|m| m.deepseek.as_ref()) {
            Some(ds) => {
                let shapes = ds.mla_linear_shapes(d, cfg.num_heads);
                add_adapters(&mut b, &mut layers, lc, linears, shapes.map(|s| s.1), shapes.map(|s| s.0), true);
            }
            // Qwen2-MoE's shared expert (s wide) and its shared_expert_gate (d → 1) in slots 4-7.
            None => match hf.moe.as_ref().map(|m| m.shared_intermediate).filter(|&s| s > 0) {
                Some(s) => add_adapters(&mut b, &mut layers, lc, linears, [q, kv, kv, d, s, s, d, 1, 0, 0, 0], [d, d, d, q, d, d, s, d, 0, 0, 0], false),
                None => add_adapters(&mut b, &mut layers, lc, linears, [qkv_out, kv, kv, d, gate_out, f, d, 0, 0, 0, 0], [d, d, d, q, d, d, f, 0, 0, 0, 0], false),
            },
        }
        if let Some(m) = hf.moe.as_ref().filter(|_| !lc.target_parameters.is_empty()) {
            add_param_adapters(&mut b, &mut layers, lc, m, d);
        }
    }
    if sequence_parallel {
        // SequenceParallel norms: Replicate weights whose gradients, summed over this rank's
        // positions, are Partial.
        final_norm.storage().set_grad_redistribute(GradRedistribute::Partial);
    }
    let lm_head = if cfg.tied_embeddings {
        // nn.Linear allocates and initialises its own weight before `tie_weights` replaces it.
        drop(crate::model::init::make(&[v, d], dtype, device, std, b.rng));
        embedding.clone()
    } else {
        b.param("lm_head.weight".into(), &[v, d], std)
    };
    // LlamaRotaryEmbedding's inv_freq and original_inv_freq buffers (head_dim/2 fp32 each);
    // Gemma's embed_scale and Gemma 3's pair per layer type (gemma::buffers).
    let (inv_freq, mut buffers) = match &hf.gemma {
        Some(g) => gemma::buffers(g, hf.model_type == Arch::Gemma3Text, cfg.rope_theta, d, hd, hf.bnb.as_ref().map_or(dtype, |q| q.load_dtype), device),
        None => {
            let _c = runtime::category(Category::Buffer);
            let half = hd / 2;
            let theta = cfg.rope_theta;
            let inv = || (0..half).map(|j| 1.0 / theta.powf((2 * j) as f64 / hd as f64)).collect::<Vec<_>>();
            let inv_freq = Tensor::from_f64_with(&[half], DType::F32, device, inv);
            (inv_freq, vec![Tensor::from_f64_with(&[half], DType::F32, device, inv)])
        }
    };
    buffers.extend(dynamic_map);
    let (mut embedding, mut lm_head) = (embedding, lm_head);
    if let Some(lc) = &hf.lora {
        for module in &lc.modules_to_save {
            let (slot, after) = match module.as_str() {
                "embed_tokens" => (&mut embedding, Some("model.embed_tokens.weight")),
                // lm_head is the model's last module: its copy comes last.
                _ => (&mut lm_head, None),
            };
            *slot = module_to_save(&mut b, slot, module, after);
        }
    }
    b.finish(full, Weights { embedding, layers, final_norm, lm_head, rope_buffer: Some(inv_freq), buffers })
}

/// A builder of one nn.Linear (slot of `lora::linears_of`, module path, rows, cols, bias):
/// its weight and bias, plain or bitsandbytes'.
type LinearMaker<'a> = dyn FnMut(&mut Builder, usize, &str, usize, usize, bool) -> (Tensor, Option<Tensor>) + 'a;

/// A sparse MoE block's parameters in registration order (Mixtral, Qwen2-MoE: `mlp.gate`
/// then `mlp.experts`; Qwen3-MoE: `mlp.experts` then `mlp.gate`; Qwen2-MoE then its
/// `shared_expert` and `shared_expert_gate`): the router (experts, hidden), the experts'
/// `gate_up_proj` (experts, 2·I, hidden) and `down_proj` (experts, hidden, I).
type MoeParams = (Tensor, Tensor, Tensor, Option<[Tensor; 4]>);
/// Qwen2-MoE's shared expert is nn.Linear modules (slots 4-7 of `lin`: bitsandbytes quantizes them).
fn moe_weights(b: &mut Builder, m: &super::moe::MoeConfig, p: &dyn Fn(&str) -> String, d: usize, lin: &mut LinearMaker<'_>) -> MoeParams {
    let std = Init::Normal { std: 0.02 };
    let (e, i) = (m.experts, m.intermediate);
    let router_first = m.family != super::moe::MoeFamily::Qwen3Moe;
    let router = router_first.then(|| b.param(p("mlp.gate.weight"), &[e, d], std));
    let gate_up = b.param(p("mlp.experts.gate_up_proj"), &[e, 2 * i, d], std);
    let down = b.param(p("mlp.experts.down_proj"), &[e, d, i], std);
    let router = router.unwrap_or_else(|| b.param(p("mlp.gate.weight"), &[e, d], std));
    let shared = (m.shared_intermediate > 0).then(|| {
        let s = m.shared_intermediate;
        [
            lin(b, 4, "mlp.shared_expert.gate_proj", s, d, false).0,
            lin(b, 5, "mlp.shared_expert.up_proj", s, d, false).0,
            lin(b, 6, "mlp.shared_expert.down_proj", d, s, false).0,
            lin(b, 7, "mlp.shared_expert_gate", 1, d, false).0,
        ]
    });
    (router, gate_up, down, shared)
}

/// peft's `ModulesToSaveWrapper` around `module` (after the adapters, in module order):
/// `copy.deepcopy(original_module)`, a new tensor of the original's shape and dtype (fp32
/// after prepare_model_for_kbit_training's cast), trainable, and the one forward runs; the
/// original stays registered, frozen. Listed right after the parameter named `after` (None:
/// last), as `parameters()` walks the wrapper (`original_module`, then
/// `modules_to_save.default`). A tied head's
/// original is the embedding: the copy unties it (peft warns), the other end keeps the
/// frozen original.
fn module_to_save(b: &mut Builder, original: &Tensor, module: &str, after: Option<&str>) -> Tensor {
    let prefix = if module == "embed_tokens" { "model." } else { "" };
    let name = format!("base_model.model.{prefix}{module}.modules_to_save.default.weight");
    let copy = {
        let _s = runtime::scope(name.trim_end_matches(".weight"));
        original.detach().clone_contiguous()
    }
    .requires_grad_(true);
    let at = after.and_then(|a| b.params.iter().position(|p| p.name == a)).map_or(b.params.len(), |i| i + 1);
    b.params.insert(at, crate::model::Param { name, tensor: copy.clone() });
    copy
}

/// `get_peft_model`: for each layer and adapted projection in module order, `lora_A` (r × in,
/// kaiming-uniform), `lora_B` (out × r, zeros) and, with DoRA, `lora_magnitude_vector` (out)
/// in the adapters' dtype, trainable. peft
/// wraps the model after `from_pretrained` has loaded every base weight, so they come last.
/// `all_attention`: every slot is a `self_attn` linear (DeepSeek-V3's latent attention).
fn add_adapters(b: &mut Builder, layers: &mut [Layer], lc: &lora::LoraConfig, linears: &[(usize, &str)], outs: [usize; lora::SLOTS], ins: [usize; lora::SLOTS], all_attention: bool) {
    let dtype = lc.adapter_dtype(b.dtype);
    for (i, layer) in layers.iter_mut().enumerate() {
        let mut adapters: Vec<Option<Adapter>> = vec![None; lora::SLOTS];
        for &(t, name) in linears {
            adapters[t] = lc.targets(name).then(|| {
                    let module = if t < 4 || all_attention { "self_attn" } else { "mlp" };
                    let p = |w: &str| format!("base_model.model.model.layers.{i}.{module}.{name}.{w}.default.weight");
                    let bound = (1.0 / ins[t] as f64).sqrt();
                    // kaiming_uniform_(a=√5): U(±1/√in); a normal of the same variance (only
                    // the values of cpu runs see the difference).
                    let a = b.param_as(p("lora_A"), &[lc.r, ins[t]], Init::Normal { std: bound / 3f64.sqrt() }, dtype, false);
                    let bw = b.param_as(p("lora_B"), &[outs[t], lc.r], Init::Normal { std: 0.0 }, dtype, false);
                    // DoRA: the magnitude is the base weight's row norm at init (B is zero),
                    // about 0.02·√in for these std-0.02 weights.
                    let magnitude = lc.use_dora.then(|| {
                        let name = format!("base_model.model.model.layers.{i}.{module}.{name}.lora_magnitude_vector.default.weight");
                        b.param_as(name, &[outs[t]], Init::Const { value: 0.02 * (ins[t] as f64).sqrt() }, dtype, false)
                    });
                    Adapter { a, b: bw, magnitude }
                });
        }
        let extra = Rc::get_mut(layer.hf.as_mut().expect("hf layer")).expect("adapters are added while the model is built");
        extra.lora = adapters;
    }
}

/// peft's `_inject_parameters` after the module adapters: per sparse layer, in module order
/// (Mixtral, Qwen2-MoE, gpt-oss: the router then the experts; Qwen3-MoE, DeepSeek-V3: the experts
/// then the router; DeepSeek-V3's dense layers have neither), a LoRA pair per targeted parameter
/// (crate::model::lora_params), in the adapters' dtype, trainable; gate_up_proj's at twice the
/// rank when peft's conversion doubled it.
fn add_param_adapters(b: &mut Builder, layers: &mut [Layer], lc: &lora::LoraConfig, m: &super::moe::MoeConfig, d: usize) {
    use super::moe::MoeFamily;
    use crate::model::lora_params::ParamAdapters;
    let dtype = lc.adapter_dtype(b.dtype);
    let (e, i, r) = (m.experts, m.intermediate, lc.r);
    let router_first = !matches!(m.family, MoeFamily::Qwen3Moe | MoeFamily::DeepseekV3);
    let router_module = if m.family == MoeFamily::GptOss { "router" } else { "gate" };
    for (n, layer) in layers.iter_mut().enumerate() {
        if layer.hf.as_ref().is_none_or(|h| h.router.is_none()) {
            continue;
        }
        let pair = |b: &mut Builder, module: &str, rank: usize, ins: usize, outs: usize| {
            let p = |w: &str| format!("base_model.model.model.layers.{n}.mlp.{module}.{w}.default.weight");
            let bound = (1.0 / ins as f64).sqrt();
            let a = b.param_as(p("lora_A"), &[rank, ins], Init::Normal { std: bound / 3f64.sqrt() }, dtype, false);
            let bw = b.param_as(p("lora_B"), &[outs, rank], Init::Normal { std: 0.0 }, dtype, false);
            Adapter { a, b: bw, magnitude: None }
        };
        let router = |b: &mut Builder| lc.targets_router().then(|| pair(b, router_module, r, d, e));
        let mut pa = ParamAdapters::default();
        if router_first {
            pa.router = router(b);
        }
        // gate_up_proj: in hidden, out 2·I; down_proj: in I, out hidden (either storage order).
        pa.gate_up = lc.targets_parameter("mlp.experts.gate_up_proj").then(|| pair(b, "experts", lc.gate_up_rank() * e, d, 2 * i));
        pa.down = lc.targets_parameter("mlp.experts.down_proj").then(|| pair(b, "experts", r * e, i, d));
        if !router_first {
            pa.router = router(b);
        }
        let extra = Rc::get_mut(layer.hf.as_mut().expect("hf layer")).expect("adapters are added while the model is built");
        extra.param_lora = Some(pa);
    }
}

/// What `LlamaForCausalLM.forward` returns (`CausalLMOutputWithPast`): the logits, the loss
/// when labels were given, and the `DynamicCache`'s key/value tensors (empty without cache).
pub struct Output {
    pub logits: Tensor,
    pub loss: Option<Tensor>,
    pub cache: Vec<Tensor>,
    /// `output_router_logits`: every router's logits and the auxiliary loss (labels or not);
    /// they die with the output.
    pub router_logits: Vec<Tensor>,
    pub aux_loss: Option<Tensor>,
}

/// The modeling file of `hf`'s family, for frames.
fn frames(hf: &HfConfig) -> &'static HfFrames {
    if let Some(m) = &hf.moe {
        return crate::model::py::moe_frames::of(m.family).0;
    }
    match hf.model_type {
        Arch::Llama => &py::LLAMA,
        Arch::Mistral => &py::MISTRAL,
        Arch::Qwen2 => &py::QWEN2,
        Arch::Qwen3 => &py::QWEN3,
        Arch::Phi3 => &py::PHI3,
        Arch::Olmo2 => &py::OLMO2,
        Arch::Gemma2 => &py::GEMMA2,
        Arch::Gemma3Text => &py::GEMMA3_TEXT,
    }
}

/// `nn.Linear` with an optional bias: `F.linear(x, w, b)` (addmm on the flattened rows).
fn linear_b(name: &str, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let _f = py_frame(&py::NN_LINEAR);
    match bias {
        None => linear(name, x, w),
        Some(b) => {
            let _s = scope(name);
            // F.linear(input, weight, bias): cast right to left (autocast::lower_pair).
            let b = crate::engine::autocast::lower(b);
            let w = crate::engine::autocast::lower(w);
            let x = crate::engine::autocast::lower(x);
            x.linear_bias(&w, &b)
        }
    }
}

/// `LlamaRMSNorm.forward`: `x.to(float32)`, `x * rsqrt(mean(x²) + eps)`, `weight * x.to(input dtype)`.
/// The fp32 product and the variance are locals until the function returns.
fn rms_norm(fr: &'static HfFrames, name: &str, x: &Tensor, w: &Tensor, eps: f64) -> Tensor {
    let _s = scope(name);
    let _f = py_frame(&fr.rms_norm);
    if gemma::is_gemma_frames(fr) {
        return gemma::gemma_rms_norm(fr, x, w, eps);
    }
    let input_dtype = x.dtype();
    let hs = x.to_dtype(DType::F32);
    let variance = hs.pow_scalar(2.0).mean_dim(-1, true);
    let normed = {
        let r = variance.add_scalar(eps).rsqrt();
        hs.mul(&r)
    };
    drop(hs);
    // Olmo2RMSNorm and GptOssRMSNorm multiply first and cast the product: `(weight * x).to(input_dtype)`.
    let out = if std::ptr::eq(fr, &py::OLMO2) || std::ptr::eq(fr, &crate::model::py::moe_frames::GPT_OSS) {
        w.mul(&normed).to_dtype(input_dtype)
    } else {
        w.mul(&normed.to_dtype(input_dtype))
    };
    drop((normed, variance));
    out
}

/// `torch.arange(n) + offset` (the sum is a new tensor; the arange dies with the expression).
fn arange_plus(n: usize, device: Device) -> Tensor {
    Tensor::arange(n, device).add_int(0)
}

/// `create_causal_mask` for this run, `s` queries after `past` cached positions: None where
/// SDPA may rely on `is_causal` or needs no mask (no padding, no window shorter than the keys;
/// one query or as many as keys) or flash_attention_2 is used; else eager's (B, 1, S, past + S)
/// additive mask in the model's dtype (or, for sdpa, the boolean one).
fn causal_mask(hf: &HfConfig, b: usize, s: usize, past: usize, dtype: DType, device: Device, padding: Option<&Tensor>) -> Option<Tensor> {
    causal_mask_sized(hf, b, s, past, past + s, dtype, device, padding, true)
}

/// `create_causal_mask` over `kv` key positions (a StaticCache's length, or past + s), with
/// sdpa's `allow_is_causal_skip`.
#[allow(clippy::too_many_arguments)]
fn causal_mask_sized(hf: &HfConfig, b: usize, s: usize, past: usize, kv: usize, dtype: DType, device: Device, padding: Option<&Tensor>, allow_skip: bool) -> Option<Tensor> {
    causal_mask_window(hf, b, s, past, (kv, 0), dtype, device, padding, allow_skip)
}

/// `create_causal_mask` over `kv.0` key positions from `kv.1` on (a sliding cache layer's
/// `get_mask_sizes`).
#[allow(clippy::too_many_arguments)]
fn causal_mask_window(hf: &HfConfig, b: usize, s: usize, past: usize, (kv, kv_offset): (usize, usize), dtype: DType, device: Device, padding: Option<&Tensor>, allow_skip: bool) -> Option<Tensor> {
    let _s = scope("mask");
    let _f = py_frame(&py::CREATE_CAUSAL_MASK);
    // A window as long as the keys still makes sdpa build the mask: `_ignore_causal_mask_sdpa`
    // skips it only while kv_length < local_attention_size (measured at S = window,
    // hf_grid/sliding_window.json). gpt-oss's sliding mask applies its overlay whatever the length.
    let window = hf.sliding_window.filter(|&w| w <= kv || is_gpt_oss(hf));
    match hf.attn_implementation {
        AttnImplementation::FlashAttention2 => return None,
        AttnImplementation::Sdpa if window.is_none() && allow_skip => return None, // _ignore_causal_mask_sdpa
        _ => {}
    }
    // sdpa_mask: batch/head aranges (tiny), q and kv aranges, the mask function broadcast
    // over (B|1, 1, S, S), expanded to B; the aranges die when sdpa_mask returns.
    let batch_arange = Tensor::arange(b, device);
    let head_arange = Tensor::arange(1, device);
    let q_arange = Tensor::arange(s, device).add_int(past as i64);
    let kv_arange = Tensor::arange(kv, device).add_int(kv_offset as i64);
    let qi = q_arange.view(&[1, 1, s, 1]);
    let kj = kv_arange.view(&[1, 1, 1, kv]);
    let mut mask = qi.ge(&kj); // causal: kv_idx <= q_idx
    if let Some(w) = window {
        // sliding_window_overlay: kv_idx > q_idx - window, and-ed in.
        let inside = kj.add_int(w as i64).ge(&qi.add_int(1));
        mask = mask.logical_and(&inside);
    }
    if let Some(p) = padding {
        // padding_mask_function: padding_mask[batch_idx, kv_idx] → (B, 1, 1, S), and-ed in.
        let pm = p.view(&[b, 1, 1, kv]);
        mask = mask.logical_and(&pm);
    }
    drop((batch_arange, head_arange, qi, kj, q_arange, kv_arange));
    let mask = mask.expand(&[b, 1, s, kv]);
    match hf.attn_implementation {
        // eager_mask: torch.where(mask, zeros((), dtype), finfo(dtype).min).
        AttnImplementation::Eager => {
            let zero = Tensor::zeros(&[], dtype, device);
            Some(zero.where_scalar(&mask, dtype.finfo_min()))
        }
        _ => Some(mask),
    }
}

/// `find_packed_sequence_indices(position_ids)` (no cache and no attention_mask): the
/// position diff, `!= 1` and its cumsum, all dead once it decides nothing is packed.
fn packed_sequence_check(position_ids: &Tensor, b: usize) {
    let _s = scope("mask");
    let pos = position_ids.expand(&[b, position_ids.dim(1)]);
    let first = pos.narrow(1, 0, 1).add_int(-1);
    // torch.diff(prepend=...): cat, then the shifted difference; the cat dies with diff.
    let diff = {
        let cat = Tensor::cat(&[first.clone(), pos.clone()], -1);
        let n = cat.dim(1);
        cat.narrow(1, 1, n - 1).sub_int(&cat.narrow(1, 0, n - 1))
    };
    drop(first);
    let packed = diff.ne_int(1).cumsum_last();
    drop(diff);
    let last = packed.narrow(1, packed.dim(1) - 1, 1).eq_int(0);
    drop((last, packed));
}

/// `LlamaRotaryEmbedding.forward` (no_grad): cos and sin (1, S, head_dim) in the model's dtype.
fn rotary(m: &Model, position_ids: &Tensor, dtype: DType) -> (Tensor, Tensor) {
    let hf = m.config.hf.as_ref().expect("hf options");
    // Olmo2RotaryEmbedding returns them in fp32 (no cast to the activations' dtype).
    let dtype = if hf.model_type == Arch::Olmo2 { DType::F32 } else { dtype };
    rotary_with(frames(hf), m.rope_buffer.as_ref().expect("inv_freq buffer"), position_ids, dtype)
}

/// The rotary embedding's forward over one `inv_freq` (Gemma 3 has one per layer type).
fn rotary_with(fr: &'static HfFrames, inv_freq: &Tensor, position_ids: &Tensor, dtype: DType) -> (Tensor, Tensor) {
    let _s = scope("rotary_emb");
    let _f = py_frame(&fr.rotary);
    let _g = runtime::no_grad();
    let (pb, s) = (position_ids.dim(0), position_ids.dim(1));
    let half = inv_freq.dim(0);
    // position_ids[..., None].float() * inv_freq (the float ids die after the product).
    let freqs = {
        let pos = position_ids.view(&[pb, s, 1]).to_dtype(DType::F32);
        pos.mul(&inv_freq.view(&[1, 1, half]))
    };
    let emb = Tensor::cat(&[freqs.clone(), freqs.clone()], -1);
    let cos = emb.cos().mul_scalar(1.0);
    let sin = emb.sin().mul_scalar(1.0);
    let out = {
        let _c = runtime::category(Category::Activation);
        (cos.to_dtype(dtype), sin.to_dtype(dtype))
    };
    drop((freqs, emb, cos, sin));
    out
}

/// `rotate_half(x)`: cat((-x2, x1), -1); `-x2` dies once the cat exists.
fn rotate_half(fr: &'static HfFrames, x: &Tensor) -> Tensor {
    let _f = py_frame(&fr.rotate_half);
    let h = x.dim(-1) / 2;
    let x1 = x.narrow(-1, 0, h);
    let neg = x.narrow(-1, h, h).neg();
    Tensor::cat(&[neg, x1], -1)
}

/// `x * cos + rotate_half(x) * sin` with each product dead once the sum exists.
fn apply_rope(fr: &'static HfFrames, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let _f = py_frame(&fr.apply_rotary_pos_emb);
    let a = x.mul(cos);
    let b = {
        let r = rotate_half(fr, x);
        r.mul(sin)
    };
    a.add(&b)
}

/// `repeat_kv`: expand to (B, h_kv, n_rep, S, d) and reshape (a copy) unless n_rep is 1.
fn repeat_kv(fr: &'static HfFrames, x: &Tensor, n_rep: usize) -> Tensor {
    if n_rep == 1 {
        return x.clone();
    }
    let _f = py_frame(&fr.repeat_kv);
    let (b, h, s, d) = (x.dim(0), x.dim(1), x.dim(2), x.dim(3));
    x.unsqueeze(2).expand(&[b, h, n_rep, s, d]).reshape(&[b, h * n_rep, s, d])
}

/// Everything a decoder layer reads, owned, so a checkpoint can keep it to recompute.
#[derive(Clone)]
struct Block {
    cfg: Rc<ModelConfig>,
    layer: Layer,
    mask: Option<Tensor>,
    cos: Tensor,
    sin: Tensor,
    /// `position_ids`, one of the layer's kwargs: held, never read, so that a checkpoint's
    /// `partial` keeps it alive as PyTorch's does.
    _position_ids: Tensor,
    /// The run's DynamicCache (None under checkpointing or with use_cache off).
    cache: Option<KvCache>,
    /// Where the sliding cache layers keep their window tensor (None: no cache).
    windows: Option<KvCache>,
    /// The cache's layer is a `DynamicSlidingWindowLayer` (transformers' `layer_types`, or a
    /// `sliding_window` on every layer).
    sliding_cache: bool,
    /// This layer's index (its keys and values are the cache's entries 2i and 2i + 1).
    layer_idx: usize,
    /// A StaticCache: (max_cache_len, positions already written) instead of a DynamicCache.
    static_cache: Option<(usize, usize)>,
    /// Tensor parallelism: the projections' DTensor input and output redistributions.
    tp: Option<TensorParallel>,
    /// `model.training` (dropout runs only in training mode).
    training: bool,
    /// `output_router_logits`' collector of the routers' logits (None when off).
    router_logits: Option<Rc<RouterLogits>>,
}

impl Block {
    /// The block with its floating arguments in `dtype` (`_cast_fp_tensor` over args and kwargs:
    /// the mask, then `position_embeddings`; OLMo-2's rotary returns fp32 cos and sin, the
    /// masks are built in the embeddings' dtype); a tensor already in it is passed as is.
    fn cast_forward_inputs(&self, dtype: DType) -> Block {
        let _s = scope("FSDP::cast_forward_inputs");
        let cast = |t: &Tensor| if t.dtype().is_float() && t.dtype() != dtype { t.to_dtype(dtype) } else { t.clone() };
        let mask = self.mask.as_ref().map(cast);
        let (cos, sin) = (cast(&self.cos), cast(&self.sin));
        Block { mask, cos, sin, ..self.clone() }
    }

    fn hf(&self) -> &HfConfig {
        self.cfg.hf.as_ref().expect("hf options")
    }

    /// Projection `t` (of `lora::TARGETS`) named `name`: `base` on `x`, wrapped in peft's LoRA
    /// `Linear` when adapted (the nn.Linear is then its `base_layer`).
    fn proj(&self, t: usize, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Tensor {
        let name = lora::slot_name(self.hf(), t).unwrap_or_else(|| lora::slot_module(t));
        // transformers' plan without grad: a Linear the plan shards runs on its local shards
        // (tp::local_param); one it leaves out keeps its parameter (tp::in_plan).
        let local = self.tp.is_some_and(tp::local_linear) && tp::in_plan(self.hf(), t);
        let (w_local, b_local) = if local { (Some(tp::local_param(w)), bias.map(tp::local_param)) } else { (None, None) };
        let (w, bias) = match &w_local {
            Some(w) => (w, b_local.as_ref()),
            None => (w, bias),
        };
        let extra = self.layer.hf.as_ref().expect("hf layer");
        let packed = extra.quant.get(t).and_then(Option::as_ref);
        let base = |name: &str, x: &Tensor| match (self.hf().bnb.as_ref().map(|q| &q.quant), packed) {
            (Some(Quant::FourBit(q)), Some(Quantized::FourBit(p))) => {
                let _s = scope(name);
                crate::model::bnb::linear4bit(q, p, x, bias)
            }
            (Some(Quant::Int8(q)), Some(Quantized::Int8(p))) => {
                let _s = scope(name);
                crate::model::bnb::linear8bit(q, p, x, bias)
            }
            _ => linear_b(name, x, w, bias),
        };
        match (self.hf().lora.as_ref(), extra.lora.get(t).and_then(Option::as_ref)) {
            (Some(lc), Some(adapter)) => {
                let _s = scope(name);
                let layer = match packed {
                    None => lora::BaseLayer::Linear,
                    Some(Quantized::FourBit(_)) => lora::BaseLayer::Linear4bit,
                    Some(Quantized::Int8(_)) => lora::BaseLayer::Linear8bitLt,
                };
                // DoRA's weight: dense or 4-bit (DoRA over 8-bit weights is refused by the options).
                let weight = match packed {
                    None => Some(lora::BaseWeight::Dense(w)),
                    Some(Quantized::FourBit(p)) => Some(lora::BaseWeight::Packed(p)),
                    Some(Quantized::Int8(_)) => None,
                };
                lora::forward(lc, adapter, x, self.training, layer, weight, bias, |x| base("base_layer", x))
            }
            _ => base(name, x),
        }
    }

    /// Sequence parallelism is on.
    fn sp(&self) -> Option<TensorParallel> {
        self.tp.filter(|t| t.sequence)
    }

    /// A ColwiseParallel projection's input (x itself without tensor parallelism; under
    /// sequence parallelism x is already the gathered Replicate DTensor).
    fn colwise(&self, x: &Tensor) -> Tensor {
        match self.tp {
            Some(t) if !t.sequence => tp::colwise_input(x),
            _ => x.clone(),
        }
    }

    /// A `colwise_gather_output` projection's output (slot `slot`): all-gathered whole.
    fn gather(&self, slot: usize, y: Tensor) -> Tensor {
        match self.tp {
            Some(t) if t.style(self.hf().model_type, slot).gathers() => tp::gather_logits(y, t),
            _ => y,
        }
    }

    /// A `rowwise_split_input` projection's input (slot `slot`): this rank's columns.
    fn split(&self, slot: usize, x: &Tensor) -> Tensor {
        match self.tp {
            Some(t) if t.style(self.hf().model_type, slot) == tp::Style::RowwiseSplit => tp::split_input(x, t),
            _ => x.clone(),
        }
    }

    /// A RowwiseParallel projection's output: all-reduced, or reduce-scattered to this
    /// rank's positions under sequence parallelism. transformers' RowwiseParallel without
    /// grad runs the local Linear and `dist.all_reduce(output)` in place: nothing new.
    fn rowwise(&self, y: Tensor) -> Tensor {
        match self.tp {
            Some(t) if t.sequence => tp::seq_scatter(y, t),
            Some(t) if t.plan == tp::TpPlan::Auto && !runtime::is_grad_enabled() => y,
            Some(_) => tp::rowwise_output(y),
            None => y,
        }
    }

    /// A SequenceParallel norm's input (`from_local` on this rank's positions).
    fn norm_input(&self, x: &Tensor) -> Tensor {
        if self.sp().is_some() { tp::from_local(x) } else { x.clone() }
    }

    /// `PrepareModuleInput` before attention and the MLP: the positions all-gathered.
    fn gathered(&self, x: &Tensor) -> Tensor {
        match self.sp() {
            Some(t) => tp::seq_gather(x, t),
            None => x.clone(),
        }
    }

    /// `LlamaDecoderLayer.forward`.
    fn forward(&self, x: Tensor) -> Tensor {
        if self.hf().model_type == Arch::Olmo2 {
            return self.olmo2_layer(x);
        }
        if is_gpt_oss(self.hf()) {
            return self.gpt_oss_layer(x);
        }
        if self.hf().model_type.is_gemma() {
            return self.gemma_layer(x);
        }
        let fr = frames(self.hf());
        let _f = py_frame(&fr.decoder_layer);
        let (l, eps) = (&self.layer, self.cfg.norm_eps);
        // `residual = hidden_states`: the input stays referenced until the layer returns.
        let residual = x;
        let mut h = rms_norm(fr, "input_layernorm", &self.norm_input(&residual), &l.attn_norm, eps);
        // `hidden_states, _ = self.self_attn(...)`: `_` is a local too, so eager's attention
        // weights live until the layer returns.
        let (a, _weights) = self.attention(&h);
        h = a;
        h = residual.add(&h);
        let residual = h;
        let mut h = rms_norm(fr, "post_attention_layernorm", &self.norm_input(&residual), &l.ffn_norm, eps);
        h = self.mlp(&h);
        residual.add(&h)
    }

    /// `LlamaMLP.forward`: down(act(gate(x)) * up(x)), every intermediate an expression temporary.
    fn mlp(&self, x: &Tensor) -> Tensor {
        let _s = scope("mlp");
        let _f = py_frame(&frames(self.hf()).mlp);
        if self.hf().model_type == Arch::Phi3 {
            return self.phi3_mlp(x);
        }
        if is_deepseek(self.hf()) && self.layer.hf.as_ref().is_some_and(|h| h.router.is_some()) {
            return self.deepseek_moe(x);
        }
        if let (Some(m), Some(router)) = (&self.hf().moe, &self.layer.hf.as_ref().expect("hf layer").router) {
            let gate_up = self.layer.gate_up.weights()[0];
            let shared = self.layer.hf.as_ref().expect("hf layer").shared_expert.as_ref();
            let lora = self.layer.hf.as_ref().expect("hf layer").param_lora.as_ref().zip(self.hf().lora.as_ref().map(|l| l.scaling()));
            // The shared expert's nn.Linear modules, with peft's LoRA where adapted (slots 4-7).
            let shared_proj = |t: usize, x: &Tensor, w: &Tensor| self.proj(t, x, w, None);
            let w = super::moe_5_23::MoeWeights { router, gate_up, down: &self.layer.down, shared, lora, shared_proj: Some(&shared_proj), tp: self.tp.is_some() };
            return super::moe_5_23::sparse_moe_block(m, &w, x, self.router_logits.as_deref());
        }
        let x = &self.gathered(x);
        let l = &self.layer;
        let extra = l.hf.as_ref().expect("hf layer");
        let bias = |i: usize| extra.mlp_bias.as_ref().map(|b| &b[i]);
        let ws = l.gate_up.weights();
        let prod = {
            let g = {
                let p = self.proj(4, &self.colwise(x), ws[0], bias(0));
                // Gemma's MLP: gelu_pytorch_tanh.
                if self.hf().model_type.is_gemma() { p.gelu_tanh() } else { p.silu() }
            };
            let u = self.proj(5, &self.colwise(x), ws[1], bias(1));
            g.mul(&u)
        };
        self.rowwise(self.proj(6, &prod, &l.down, bias(2)))
    }

    /// `LlamaAttention.forward` (Qwen3: q_norm / k_norm on the per-head view first): the
    /// output and eager's attention weights (None for the fused kernels).
    fn attention(&self, x: &Tensor) -> (Tensor, Option<Tensor>) {
        if is_deepseek(self.hf()) {
            return self.mla_attention(x);
        }
        let _s = scope("self_attn");
        let hf = self.hf();
        let fr = frames(hf);
        let _f = py_frame(&fr.attention);
        let x = &self.gathered(x);
        let l = &self.layer;
        let extra = l.hf.as_ref().expect("hf layer");
        let (b, s) = (x.dim(0), x.dim(1));
        let (hd, eps) = (hf.head_dim, self.cfg.norm_eps);
        let ws = l.qkv.weights();
        let bias = |i: usize| extra.qkv_bias.as_ref().map(|bs| &bs[i]);
        let olmo2 = hf.model_type == Arch::Olmo2;
        // `self.q_proj(x).view(B, S, -1, d)` [→ q_norm] `.transpose(1, 2)` (OLMo-2: the norm
        // on the whole projection, before the view).
        let project = |i: usize| {
            let p = self.gather(i, self.proj(i, &self.colwise(x), ws[i], bias(i)));
            let p = match &extra.qk_norm {
                Some(n) if i < 2 && olmo2 => rms_norm(fr, if i == 0 { "q_norm" } else { "k_norm" }, &p, &n[i], eps),
                _ => p,
            };
            let p = p.view(&[b, s, usize::MAX, hd]);
            let p = match &extra.qk_norm {
                Some(n) if i < 2 && !olmo2 => rms_norm(fr, if i == 0 { "q_norm" } else { "k_norm" }, &p, &n[i], eps),
                _ => p,
            };
            p.transpose(1, 2)
        };
        // Phi-3: one qkv_proj product, sliced; `qkv` is a local until forward returns.
        let (qkv, q, k, v) = match hf.model_type {
            Arch::Phi3 => {
                let (qkv, [q, k, v]) = self.phi3_qkv(x, b, s);
                (Some(qkv), q, k, v)
            }
            Arch::Gemma3Text => {
                let [q, k, v] = self.gemma3_qkv(x, b, s);
                (None, q, k, v)
            }
            _ => {
                let q = project(0);
                let k = project(1);
                (None, q, k, project(2))
            }
        };
        // apply_rotary_pos_emb: cos/sin unsqueezed to (1, 1, S, d); the projections die with
        // the rebinding `query_states, key_states = apply_rotary_pos_emb(...)`.
        let (cos, sin) = (self.cos.unsqueeze(1), self.sin.unsqueeze(1));
        let (q, mut k, mut v) = {
            let _s = scope("rotary");
            let (qe, ke) = match hf.model_type {
                _ if is_gpt_oss(hf) => (gpt_oss_5_23::apply_rope(fr, &q, &cos, &sin), gpt_oss_5_23::apply_rope(fr, &k, &cos, &sin)),
                Arch::Phi3 => (phi3::apply_rope(fr, &q, &cos, &sin), phi3::apply_rope(fr, &k, &cos, &sin)),
                _ => (apply_rope(fr, &q, &cos, &sin), apply_rope(fr, &k, &cos, &sin)),
            };
            // OLMo-2: fp32 cos/sin promote the products; `q_embed.to(q_type)` (then k's) as
            // the function returns.
            let (qe, ke) = if olmo2 {
                let _f = py_frame(&fr.apply_rotary_pos_emb);
                let qc = qe.to_dtype(q.dtype());
                let kc = ke.to_dtype(k.dtype());
                (qc, kc)
            } else {
                (qe, ke)
            };
            drop((q, k));
            (qe, ke, v)
        };
        if let Some(cache) = &self.cache {
            // DynamicLayer.update: keys = cat([keys, k], dim=-2) (first call: a copy of k), the
            // old keys dying at the rebinding, then the same for the values.
            let _s = scope("past_key_values");
            let _c = runtime::category(Category::Activation);
            let mut c = cache.borrow_mut();
            let i = 2 * self.layer_idx;
            // What update returns when it is not the cache's own tensors (a sliding layer's
            // full states).
            let mut full = None;
            if let Some((max_len, past)) = self.static_cache {
                // A sliding layer's StaticSlidingWindowLayer holds min(window, max_cache_len).
                let len = match (self.sliding_cache, cache_window(self.hf())) {
                    (true, Some(w)) => w.min(max_len),
                    _ => max_len,
                };
                // StaticLayer: lazy_initialization (zeros of max_cache_len positions, keys then
                // values) at the first update, then `cumulative_length.to(device)` (the 0-d
                // int64 made on the CPU with the cache: a copy on CUDA, one 512 B block per
                // layer kept with the cache; the same tensor on the CPU, 8 B the grids leave out).
                if c.len() <= i {
                    let shape = |t: &Tensor| [t.dim(0), t.dim(1), len, t.dim(3)];
                    let kc = Tensor::zeros(&shape(&k), k.dtype(), k.device());
                    let vc = Tensor::zeros(&shape(&v), v.dtype(), v.device());
                    c.extend([kc, vc]);
                    if let Some(w) = &self.windows {
                        w.borrow_mut().push(Tensor::from_i64_with(&[], k.device(), || vec![0]));
                    }
                }
                if self.sliding_cache && past >= len {
                    // StaticSlidingWindowLayer full, one new position: keys.roll(-1, dims=-2),
                    // values.roll, `index = torch.tensor([-1])`, the new states written at the
                    // index, then copy_ back into the cache's own tensors (returned); the rolled
                    // copies and the index die when update returns.
                    assert_eq!(s, 1, "a full StaticSlidingWindowLayer takes one position at a time in generate()");
                    let nk = c[i].roll_left(2);
                    let nv = c[i + 1].roll_left(2);
                    let index = Tensor::from_i64_with(&[1], k.device(), || vec![-1]);
                    nk.narrow(2, len - 1, 1).copy_(&k);
                    nv.narrow(2, len - 1, 1).copy_(&v);
                    c[i].copy_(&nk);
                    c[i + 1].copy_(&nv);
                    drop((nk, nv, index));
                } else if self.sliding_cache && past + s > len {
                    // Becoming full on this update (the prefill of a prompt longer than the
                    // window: the cache is empty, so no cat): the last `len` positions copied
                    // in; the full states go to the attention.
                    assert_eq!(past, 0, "a StaticSlidingWindowLayer overflows only from empty in generate()");
                    c[i].copy_(&k.narrow(2, s - len, len));
                    c[i + 1].copy_(&v.narrow(2, s - len, len));
                    full = Some((k.clone(), v.clone()));
                } else {
                    // cache_position = arange(S) + cumulative_length (the arange dying with the
                    // expression), index_copy_ of k and v in place; the cache's tensors returned.
                    let cache_position = arange_plus(s, k.device());
                    c[i].narrow(2, past, s).copy_(&k);
                    c[i + 1].narrow(2, past, s).copy_(&v);
                    drop(cache_position);
                }
            } else if let (true, Some(w), true) = (self.sliding_cache, cache_window(self.hf()), c.len() > i) {
                // DynamicSlidingWindowLayer.update: full = cat([keys, k]), then the values';
                // keys = full[:, :, -w + 1:] (a view: the previous full states die only now),
                // then the values'; the full states go to the attention.
                let fk = Tensor::cat(&[c[i].clone(), k.clone()], -2);
                let fv = Tensor::cat(&[c[i + 1].clone(), v.clone()], -2);
                c[i] = window_view(&fk, w);
                c[i + 1] = window_view(&fv, w);
                full = Some((fk, fv));
            } else if c.len() > i {
                c[i] = Tensor::cat(&[c[i].clone(), k.clone()], -2);
                c[i + 1] = Tensor::cat(&[c[i + 1].clone(), v.clone()], -2);
            } else {
                if let (true, Some(w)) = (self.sliding_cache, &self.windows) {
                    // DynamicSlidingWindowLayer.lazy_initialization:
                    // `self._sliding_window_tensor.to(self.device)`, a 0-d int64 made on the
                    // CPU when the cache was (an 8 B block there, which the CPU grids leave
                    // out; one 512 B block per sliding layer on CUDA), kept by the cache.
                    let window = cache_window(self.hf()).unwrap_or(0) as i64;
                    w.borrow_mut().push(Tensor::from_i64_with(&[], k.device(), || vec![window]));
                }
                let kc = Tensor::cat(&[k.clone()], -2);
                // lazy_initialization makes both empty tensors in the keys' dtype, so the
                // values' cat promotes them: under autocast RoPE's fp32 cos/sin make the keys
                // fp32 and v_proj's output is bf16, and the cache keeps fp32 values.
                let vc = if v.dtype() == k.dtype() {
                    Tensor::cat(&[v.clone()], -2)
                } else {
                    let empty = Tensor::zeros(&[v.dim(0), v.dim(1), 0, v.dim(3)], k.dtype(), v.device());
                    Tensor::cat(&[empty, v.clone()], -2)
                };
                match (self.sliding_cache, cache_window(self.hf())) {
                    // The first update of a sliding layer: the cache keeps the window's view,
                    // the attention gets the full states.
                    (true, Some(w)) => {
                        c.extend([window_view(&kc, w), window_view(&vc, w)]);
                        full = Some((kc, vc));
                    }
                    _ => c.extend([kc, vc]),
                }
            }
            let (kc, vc) = full.unwrap_or_else(|| (c[i].clone(), c[i + 1].clone()));
            drop(c);
            (k, v) = (kc, vc);
        }
        let (out, weights) = match hf.attn_implementation {
            AttnImplementation::Eager if is_gpt_oss(hf) => self.gpt_oss_eager(&q, &k, &v),
            AttnImplementation::Eager => match &hf.gemma {
                Some(g) => self.gemma_eager(&q, &k, &v, g),
                None => self.eager(&q, &k, &v),
            },
            AttnImplementation::Sdpa => (self.sdpa(&q, &k, &v), None),
            AttnImplementation::FlashAttention2 => (self.flash_attention_2(&q, &k, &v), None),
        };
        // `attn_output.reshape(B, S, -1).contiguous()` then o_proj; `query_states`,
        // `key_states` and `value_states` are locals until forward returns.
        let out = out.reshape(&[b, s, usize::MAX]).contiguous();
        let o = self.rowwise(self.proj(3, &self.split(3, &out), &l.o, extra.o_bias.as_ref()));
        drop((out, q, k, v, qkv));
        (o, weights)
    }

    fn n_rep(&self) -> usize {
        self.cfg.num_heads / self.cfg.num_kv_heads
    }

    /// `eager_attention_forward`: the output and the attention weights it returns.
    fn eager(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> (Tensor, Option<Tensor>) {
        let _s = scope("attention");
        let fr = frames(self.hf());
        let _f = py_frame(&fr.eager_attention_forward);
        let scaling = (self.hf().head_dim as f64).powf(-0.5);
        let ks = repeat_kv(fr, k, self.n_rep());
        let vs = repeat_kv(fr, v, self.n_rep());
        let mut w = q.matmul(&ks.transpose(2, 3)).mul_scalar(scaling);
        if let Some(m) = &self.mask {
            w = w.add(m);
        }
        // softmax(dim=-1, dtype=float32) then .to(q.dtype); dropout p=0 returns its input.
        w = w.softmax_as(-1, DType::F32).to_dtype(q.dtype());
        let out = w.matmul(&vs);
        (out.transpose(1, 2).contiguous(), Some(w))
    }

    /// `sdpa_attention_forward`: enable_gqa when there is no mask (CUDA, head_dim ≤ 256), else
    /// repeat_kv; is_causal when there is no mask; the kernel PyTorch picks on CUDA.
    fn sdpa(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let _s = scope("attention");
        let _f = py_frame(&py::SDPA_ATTENTION_FORWARD);
        let hf = self.hf();
        let fr = frames(hf);
        // Gemma scales by query_pre_attn_scalar instead of head_dim.
        let scaling = hf.gemma.as_ref().map_or(hf.head_dim as f64, |g| g.query_pre_attn_scalar).powf(-0.5);
        let n_rep = self.n_rep();
        if self.static_cache.is_some() {
            return self.sdpa_static(q, k, v);
        }
        // One query per row with a mask (a sliding layer's decode step once its keys reach the
        // window): pack_gqa instead of repeat_kv.
        if let (Some(mask), 1, true) = (&self.mask, q.dim(2), n_rep > 1) {
            return self.sdpa_one_query(q, k, v, mask);
        }
        // The keys' length decides whether a window masks (a decode step has one query).
        let seq = k.dim(2);
        let gqa = hf.sdpa_gqa(self.cfg.num_heads, self.cfg.num_kv_heads, seq);
        let (k, v) = if n_rep > 1 && !gqa { (repeat_kv(fr, k, n_rep), repeat_kv(fr, v, n_rep)) } else { (k.clone(), v.clone()) };
        // scaled_dot_product_attention is on autocast's lower-precision list: under autocast
        // the kernel is chosen for the cast inputs.
        let half = matches!(q.dtype(), DType::BF16 | DType::F16) || crate::engine::autocast::active().is_some();
        let backend = hf.sdpa_kernel(self.cfg.num_heads, self.cfg.num_kv_heads, half, seq);
        // sdpa_attention_forward: is_causal only with more than one query and no mask.
        let causal = self.mask.is_none() && q.dim(2) > 1;
        let out = match (backend, &self.mask) {
            (SdpaBackend::CpuFlash | SdpaBackend::Efficient, Some(mask)) => {
                let cpu = backend == SdpaBackend::CpuFlash;
                let bias = sdpa_float_mask(mask, crate::engine::autocast::active().unwrap_or(q.dtype()), cpu);
                Tensor::masked_fused_attention(cpu, q, &k, &v, &bias, scaling)
            }
            // cuDNN takes the converted mask as it is (no padding).
            (SdpaBackend::Cudnn, mask) => {
                let bias = mask.as_ref().map(|m| sdpa_float_mask(m, crate::engine::autocast::active().unwrap_or(q.dtype()), true));
                Tensor::cudnn_attention(q, &k, &v, bias.as_ref(), causal, scaling)
            }
            (SdpaBackend::Flash | SdpaBackend::Auto, _) => Tensor::flash_attention(q, &k, &v, causal, scaling),
            (SdpaBackend::CpuFlash, None) => Tensor::cpu_flash_attention(q, &k, &v, causal, scaling),
            (SdpaBackend::Efficient, None) => Tensor::efficient_attention(q, &k, &v, causal, scaling),
            (SdpaBackend::Math, _) => math_attention(q, &k, &v, self.mask.as_ref(), causal, scaling),
        };
        // reshape(B, -1, S, d) (a view) then transpose(1, 2).contiguous().
        out.transpose(1, 2).contiguous()
    }

    /// `sdpa_attention_forward` over a StaticCache's full-length keys. The prefill has no mask
    /// (the empty cache lets `is_causal` stand in): enable_gqa as usual, and the keys and
    /// values sliced to the S queries (`key[:, :, :q_length]`, views). A decode step has the
    /// (B, 1, 1, L) boolean mask: no enable_gqa, and its single query is packed
    /// (`pack_gqa`: (B, h, 1, d) → (B, h_kv, n_rep, d), a view) instead of repeat_kv; SDPA
    /// turns the boolean mask into an additive one of the query's type
    /// (`convert_boolean_attn_mask`: where(mask, 0, -inf)) before choosing a kernel.
    fn sdpa_static(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let hf = self.hf();
        let fr = frames(hf);
        let scaling = (hf.head_dim as f64).powf(-0.5);
        let n_rep = self.n_rep();
        let (sq, d) = (q.dim(2), q.dim(3));
        let half = matches!(q.dtype(), DType::BF16 | DType::F16);
        let Some(mask) = &self.mask else {
            let (k, v) = (k.narrow(2, 0, sq), v.narrow(2, 0, sq));
            let gqa = n_rep > 1 && d <= 256;
            let (k, v) = if n_rep > 1 && !gqa { (repeat_kv(fr, &k, n_rep), repeat_kv(fr, &v, n_rep)) } else { (k, v) };
            let backend = hf.sdpa_backend.resolve(half, false, gqa, d, hf.cudnn_sdpa, sq);
            let out = match backend {
                SdpaBackend::Flash | SdpaBackend::Auto => Tensor::flash_attention(q, &k, &v, true, scaling),
                SdpaBackend::Cudnn => Tensor::cudnn_attention(q, &k, &v, None, true, scaling),
                SdpaBackend::CpuFlash => Tensor::cpu_flash_attention(q, &k, &v, true, scaling),
                SdpaBackend::Efficient => Tensor::efficient_attention(q, &k, &v, true, scaling),
                SdpaBackend::Math => math_attention(q, &k, &v, None, true, scaling),
            };
            return out.transpose(1, 2).contiguous();
        };
        if sq == 1 {
            return self.sdpa_one_query(q, k, v, mask);
        }
        // A masked prefill (a StaticSlidingWindowLayer's window mask): no enable_gqa, so
        // repeat_kv; SDPA converts the boolean mask for the fused kernels.
        let scaling = hf.gemma.as_ref().map_or(hf.head_dim as f64, |g| g.query_pre_attn_scalar).powf(-0.5);
        let (k, v) = if n_rep > 1 { (repeat_kv(fr, k, n_rep), repeat_kv(fr, v, n_rep)) } else { (k.clone(), v.clone()) };
        let out = match hf.sdpa_backend.resolve(half, true, false, d, hf.cudnn_sdpa, k.dim(2)) {
            backend @ (SdpaBackend::CpuFlash | SdpaBackend::Efficient) => {
                let bias = sdpa_float_mask(mask, q.dtype(), backend == SdpaBackend::CpuFlash);
                Tensor::masked_fused_attention(backend == SdpaBackend::CpuFlash, q, &k, &v, &bias, scaling)
            }
            SdpaBackend::Cudnn => {
                let bias = sdpa_float_mask(mask, q.dtype(), true);
                Tensor::cudnn_attention(q, &k, &v, Some(&bias), false, scaling)
            }
            SdpaBackend::Flash | SdpaBackend::Auto => Tensor::flash_attention(q, &k, &v, false, scaling),
            SdpaBackend::Math => math_attention(q, &k, &v, Some(mask), false, scaling),
        };
        out.transpose(1, 2).contiguous()
    }

    /// `sdpa_attention_forward` for one query per row and a (B, 1, 1, L) boolean mask: no
    /// enable_gqa; the query packed (`pack_gqa`: (B, h, 1, d) → (B, h_kv, n_rep, d), a view)
    /// instead of repeat_kv; SDPA turns the mask into an additive one of the query's type
    /// (`convert_boolean_attn_mask`: where(mask, 0, -inf)) before choosing a kernel.
    fn sdpa_one_query(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
        let hf = self.hf();
        let scaling = hf.gemma.as_ref().map_or(hf.head_dim as f64, |g| g.query_pre_attn_scalar).powf(-0.5);
        let n_rep = self.n_rep();
        let (b, h, sq, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
        let half = matches!(q.dtype(), DType::BF16 | DType::F16);
        let (q, k, v) = if n_rep > 1 { (q.reshape(&[b, h / n_rep, n_rep, d]), k.clone(), v.clone()) } else { (q.clone(), k.clone(), v.clone()) };
        let additive = Tensor::zeros(&[], q.dtype(), q.device()).where_scalar(mask, f64::NEG_INFINITY);
        let backend = hf.sdpa_backend.resolve(half, true, false, d, hf.cudnn_sdpa, k.dim(2));
        let out = match backend {
            SdpaBackend::CpuFlash => Tensor::cpu_flash_attention(&q, &k, &v, false, scaling),
            SdpaBackend::Cudnn => Tensor::cudnn_attention(&q, &k, &v, Some(&additive), false, scaling),
            SdpaBackend::Efficient | SdpaBackend::Flash | SdpaBackend::Auto => {
                // preprocess_mask: a bias whose rows are not 8-element aligned is padded
                // (at::pad to a multiple of 8, then sliced back) for the memory-efficient
                // kernel (CUDA only; unmeasured).
                let l = additive.dim(3);
                let padded = (!l.is_multiple_of(8)).then(|| Tensor::zeros(&[b, 1, 1, l + (8 - l % 8)], additive.dtype(), additive.device()));
                let out = Tensor::efficient_attention(&q, &k, &v, false, scaling);
                drop(padded);
                out
            }
            SdpaBackend::Math => math_attention(&q, &k, &v, Some(&additive), false, scaling),
        };
        drop(additive);
        // reshape(B, -1, q_length, d) then transpose(1, 2).contiguous().
        out.reshape(&[b, h, sq, d]).transpose(1, 2).contiguous()
    }

    /// `flash_attention_forward` → `flash_attn_func` on (B, S, h, d) views: the flash-attn
    /// kernels, GQA native, output (B, S, h, d).
    fn flash_attention_2(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let _s = scope("attention");
        let _f = py_frame(&py::FLASH_ATTENTION_FORWARD);
        let scaling = (self.hf().head_dim as f64).powf(-0.5);
        // fa_peft_integration_check: fp32 q/k/v (RoPE's fp32 cos/sin under autocast) are cast
        // to the autocast type first; flash-attn runs only in half types.
        // get_target_dtype: the autocast type, else a quantized model's `config.dtype`.
        let target = match q.dtype() {
            DType::F32 => Some(
                crate::engine::autocast::active()
                    .or(self.hf().bnb.as_ref().map(|b| b.load_dtype))
                    .expect("flash_attention_2 needs fp16/bf16 (weights, autocast or a quantized model); the CLI refuses fp32 runs"),
            ),
            _ => None,
        };
        let cast = |t: &Tensor| target.map_or_else(|| t.clone(), |dt| t.to_dtype(dt));
        let (q, k, v) = (cast(q), cast(k), cast(v));
        Tensor::flash_attention(&q, &k, &v, true, scaling).transpose(1, 2)
    }
}

/// A `DynamicCache`: keys and values per layer (layer i's at 2i and 2i + 1), grown by `torch.cat`.
pub type KvCache = Rc<std::cell::RefCell<Vec<Tensor>>>;

/// What `generate()` passes to a forward: its `position_ids` and the `DynamicCache` it keeps
/// between steps (and `logits_to_keep=1`).
pub struct GenerationInputs<'a> {
    pub position_ids: &'a Tensor,
    pub cache: &'a KvCache,
    /// The DynamicCache's sliding layers' `_sliding_window_tensor`s (kept with the cache).
    pub windows: &'a KvCache,
    /// A StaticCache of this many positions (None: a DynamicCache).
    pub static_len: Option<usize>,
    /// Positions the cache holds before this forward.
    pub past: usize,
    /// The 4-D mask prepare_inputs_for_generation built for a static cache (None: the
    /// forward makes its own, or none is needed).
    pub mask: Option<&'a Tensor>,
    /// A static cache's mask for the sliding layers of a model that mixes sliding and full
    /// layers ([`static_generation_masks`]).
    pub sliding_mask: Option<&'a Tensor>,
}

/// `create_masks_for_generate` as `prepare_inputs_for_generation` calls it for a compileable
/// (static) cache, `s` queries after `past` written positions of `max_len`, then
/// `.contiguous()`: sdpa may skip the mask only in the prefill (`q_offset == 0`; a decode
/// step's single query on a compileable cache keeps it, `allow_is_causal_skip` off), and the
/// mask spans the whole static length.
pub fn static_generation_mask(m: &Model, b: usize, s: usize, past: usize, max_len: usize, dtype: DType, device: Device) -> Option<Tensor> {
    let hf = m.config.hf.as_ref().expect("hf options");
    let _s = scope("mask");
    let skip = past == 0;
    let mask = causal_mask_sized(hf, b, s, past, max_len, dtype, device, None, skip)?;
    // An sdpa mask is the expanded (B, 1, S, L) view: contiguous() copies it; eager's
    // torch.where result is contiguous already.
    let c = mask.contiguous();
    drop(mask);
    Some(c)
}

/// A StaticCache's masks for one forward: (the full layers', the sliding layers').
pub type StaticMasks = (Option<Tensor>, Option<Tensor>);

/// The masks `create_masks_for_generate` builds for a StaticCache whose layers (some or all)
/// slide, `s` queries after `past` written positions of `max_len`: (the full layers' mask, the
/// sliding layers' mask). With `layer_types` (Gemma, gpt-oss, Qwen2/3) one mask per type in the
/// order of `set(layer_types)` (full first: the order under PYTHONHASHSEED=0, which the grid
/// measures; another hash seed may build the sliding one first), each then `.contiguous()`
/// in a new dict, the first dict dying after; Mistral (no layer_types): the sliding mask
/// alone, returned first. The sliding mask spans the StaticSlidingWindowLayer's
/// `get_mask_sizes`; sdpa may skip either only in the prefill.
pub fn static_generation_masks(m: &Model, b: usize, s: usize, past: usize, max_len: usize, dtype: DType, device: Device) -> StaticMasks {
    let hf = m.config.hf.as_ref().expect("hf options");
    let Some(window) = cache_window(hf) else {
        return (static_generation_mask(m, b, s, past, max_len, dtype, device), None);
    };
    let _s = scope("mask");
    let len = window.min(max_len);
    let offset = (past + 1).saturating_sub(len);
    let kv = if past >= len { len + s - 1 } else if past + s > len { past + s } else { len };
    let skip = s > 1;
    let sliding = |hf: &HfConfig| gemma::sliding_mask_sized(hf, window, b, s, past, (kv, offset), skip, dtype, device);
    let mixed = hf.gemma.is_some() || hf.moe.as_ref().is_some_and(|m| m.gpt_oss.is_some()) || hf.sliding_layers.is_some();
    if !mixed {
        let mask = sliding(hf);
        let c = mask.as_ref().map(|t| t.contiguous());
        drop(mask);
        return (c, None);
    }
    let full_cfg = HfConfig { sliding_window: None, ..hf.clone() };
    let full = causal_mask_sized(&full_cfg, b, s, past, max_len, dtype, device, None, past == 0);
    let slid = sliding(hf);
    let fc = full.as_ref().map(|t| t.contiguous());
    let sc = slid.as_ref().map(|t| t.contiguous());
    drop((full, slid));
    (fc, sc)
}

/// `LlamaForCausalLM.forward(input_ids, attention_mask, labels, use_cache, logits_to_keep)`,
/// with `logits_ready` called when lm_head returns (where the loss phase starts).
pub(crate) fn forward(m: &Model, ids: &Tensor, labels: Option<&Tensor>, attention_mask: Option<&Tensor>, logits_ready: &mut dyn FnMut(&Tensor)) -> Output {
    forward_with(m, ids, labels, attention_mask, logits_ready, None)
}

/// One forward of `generate()` (no labels, no attention mask: generate drops an all-ones one):
/// the logits of the last position; the cache grows in place.
pub fn forward_generate(m: &Model, ids: &Tensor, gen: GenerationInputs<'_>) -> Tensor {
    forward_with(m, ids, None, None, &mut |_| {}, Some(gen)).logits
}

fn forward_with(m: &Model, ids: &Tensor, labels: Option<&Tensor>, attention_mask: Option<&Tensor>, logits_ready: &mut dyn FnMut(&Tensor), gen: Option<GenerationInputs<'_>>) -> Output {
    let cfg = &m.config;
    let hf = cfg.hf.as_ref().expect("hf options");
    // A GPU run's kernels, unless this is a CPU grid's run.
    let _k = runtime::cuda_kernels(runtime::CudaKernels { on: !hf.cpu_run, cutlass_sms: hf.cutlass_sms.filter(|_| !hf.cpu_run) });
    let fr = frames(hf);
    let _f = py_frame(&fr.for_causal_lm);
    let (b, s) = (ids.dim(0), ids.dim(1));
    let device = ids.device();
    // Checkpointing runs only in training mode (model.train()), and then turns the cache off
    // in each layer (GradientCheckpointingLayer); the DynamicCache object itself is built.
    let checkpointing = cfg.checkpoint != crate::model::Checkpoint::None && m.training.get();
    let tp_group = cfg.tp_group();
    let (hidden, cache, windows, mask, position_ids, sliding_mask);
    // output_router_logits: capture_outputs' collector, on while the model's forward runs.
    let aux_coef = hf.moe.as_ref().and_then(|m| m.aux_loss());
    let recorder = aux_coef.map(|_| Rc::new(RouterLogits::open()));
    {
        let _s = scope("model");
        let _f = py_frame(&fr.model);
        let mut embeds = {
            let _s = scope("embed_tokens");
            let _f = py_frame(&py::NN_EMBEDDING);
            let e = match tp_group {
                Some(t) => tp::vocab_parallel_embedding(&m.embedding, ids, t, cfg.vocab_size),
                None => m.embedding.embedding(ids),
            };
            // Gemma's scaled word embedding.
            if hf.gemma.is_some() { gemma::scale_embedding(m, e) } else { e }
        };
        // gradient_checkpointing_enable() also calls enable_input_require_grads(): a hook
        // that sets `requires_grad_(True)` on the embedding's output. With a frozen embedding
        // (peft) that output becomes a leaf that needs a gradient, so layer 0 saves for it and
        // backward accumulates its `.grad`.
        if cfg.checkpoint != crate::model::Checkpoint::None && embeds.is_leaf() && !embeds.requires_grad() {
            embeds = embeds.requires_grad_(true);
        }
        let use_cache = hf.use_cache || gen.is_some();
        // position_ids = arange(S) + past_seen_tokens, unsqueezed, unless the caller passes
        // them (m.position_ids, or generate's).
        position_ids = match (&gen, m.position_ids.borrow().clone()) {
            (Some(g), _) => g.position_ids.clone(),
            (None, Some(p)) => p,
            (None, None) => arange_plus(s, device).view(&[1, s]),
        };
        // The positions seen before (a sliding layer's cumulative_length: its keys keep only
        // the window's).
        let past = gen.as_ref().map_or(0, |g| g.past);
        let static_cache = gen.as_ref().and_then(|g| g.static_len.map(|l| (l, g.past)));
        // _preprocess_mask_arguments: a 2-D attention_mask becomes bool; with no cache and no
        // mask, the packed-sequence check runs on the position ids.
        let padding = attention_mask.map(|a| a.to_dtype(DType::Bool));
        // Gemma builds a full and a sliding mask (each with its own packed-sequence check).
        let gemma_masks = hf.gemma.as_ref().filter(|_| static_cache.is_none()).map(|g| gemma::masks(hf, g, &position_ids, !use_cache && padding.is_none(), b, s, past, embeds.dtype(), device));
        // (GptOssModel passes no position_ids to the mask functions: no packed-sequence check.)
        if gemma_masks.is_none() && !use_cache && padding.is_none() && !is_gpt_oss(hf) {
            packed_sequence_check(&position_ids, b);
        }
        let (gemma_full, gemma_sliding) = match gemma_masks {
            Some((full, sliding)) => (Some(full), sliding),
            None => (None, None),
        };
        // An all-ones padding mask lets sdpa skip the mask (_ignore_causal_mask_sdpa). A
        // static cache's 4-D mask was built by prepare_inputs_for_generation and is returned
        // as is (_preprocess_mask_arguments' early exit).
        mask = match (&gen, gemma_full) {
            (Some(g), _) if g.static_len.is_some() => g.mask.cloned(),
            (_, Some(full)) => full,
            // Qwen2-MoE's window under generate's DynamicCache: create_causal_mask sizes the full
            // layers' mask by the first full layer (find_first_full_attention_index: past + s
            // keys), by layer 0's DynamicSlidingWindowLayer when every layer slides; no window.
            (Some(_), None) if is_qwen2_moe_window(hf) => {
                let all_slide = hf.sliding_layers.as_ref().is_some_and(|l| l.iter().all(|&x| x));
                let sizes = if all_slide { gemma::sliding_mask_sizes(hf.sliding_window.unwrap_or_default(), past, s) } else { (past + s, 0) };
                causal_mask_window(&HfConfig { sliding_window: None, ..hf.clone() }, b, s, past, sizes, embeds.dtype(), device, padding.as_ref(), true)
            }
            // A window on every layer (Mistral, Phi-3): generate's DynamicCache holds a
            // DynamicSlidingWindowLayer per layer, so the mask spans its keys (get_mask_sizes).
            (Some(_), None) if hf.sliding_window.is_some() && !is_gpt_oss(hf) => {
                let w = hf.sliding_window.unwrap_or_default();
                causal_mask_window(hf, b, s, past, gemma::sliding_mask_sizes(w, past, s), embeds.dtype(), device, padding.as_ref(), true)
            }
            // Qwen2-MoE's full_attention layers' mask sees no window.
            _ if is_qwen2_moe_window(hf) => causal_mask(&HfConfig { sliding_window: None, ..hf.clone() }, b, s, past, embeds.dtype(), device, padding.as_ref()),
            _ => causal_mask(hf, b, s, past, embeds.dtype(), device, padding.as_ref()),
        };
        // Qwen2MoeModel builds `causal_mask_mapping["sliding_attention"]` whether a layer uses it
        // or not, with `sliding_window` 0 when use_sliding_window is off: a window shorter than
        // any sequence, so the mask is always made, and held until the model returns. With the
        // window on, the mask is over it (under sdpa: none while the keys are fewer).
        // GptOssModel: `causal_mask_mapping["sliding_attention"]`, the window's mask, after the
        // full one; each layer takes its layer type's.
        let gpt_oss = hf.moe.as_ref().and_then(|m| m.gpt_oss.as_ref());
        sliding_mask = match (gpt_oss, &gen) {
            // create_masks_for_generate's mask for the sliding layers.
            (_, Some(g)) if g.static_len.is_some() => g.sliding_mask.cloned(),
            (Some(g), _) => {
                // Over the DynamicSlidingWindowLayer's keys (its get_mask_sizes).
                let windowed = HfConfig { sliding_window: Some(g.window), ..hf.clone() };
                let sizes = if use_cache { gemma::sliding_mask_sizes(g.window, past, s) } else { (s, 0) };
                causal_mask_window(&windowed, b, s, past, sizes, embeds.dtype(), device, padding.as_ref(), true)
            }
            // A static cache's generate() passes create_masks_for_generate's dict (one mask per
            // layer type: Qwen2-MoE's are all full_attention without use_sliding_window), so
            // the model builds no masks of its own.
            // create_sliding_window_causal_mask sizes it by the first sliding layer (a
            // DynamicSlidingWindowLayer under generate: its get_mask_sizes), by layer 0 when none
            // slides (max_window_layers 0: past + s keys).
            (None, _) => gemma_sliding.or_else(|| {
                hf.moe.as_ref().filter(|m| m.family == super::moe::MoeFamily::Qwen2Moe).and_then(|_| {
                    let w = hf.sliding_window.unwrap_or(0);
                    let window = HfConfig { sliding_window: Some(w), ..hf.clone() };
                    let some_slide = hf.sliding_layers.as_ref().is_some_and(|l| l.iter().any(|&x| x));
                    let sizes = if some_slide && use_cache { gemma::sliding_mask_sizes(w, past, s) } else { (past + s, 0) };
                    causal_mask_window(&window, b, s, past, sizes, embeds.dtype(), device, padding.as_ref(), true)
                })
            }),
        };
        drop(padding);
        // cos/sin per layer type (index: the layer is a Gemma sliding layer); one pair elsewhere.
        let ropes = match &hf.gemma {
            Some(g) => gemma::rotaries(m, g, hf.model_type == Arch::Gemma3Text, &position_ids, embeds.dtype()),
            None if gpt_oss.is_some() => [Some(gpt_oss_5_23::rotary(m, &position_ids, embeds.dtype())), None],
            None => [Some(rotary(m, &position_ids, embeds.dtype())), None],
        };
        cache = match &gen {
            Some(g) => Some(g.cache.clone()),
            None => (use_cache && !checkpointing).then(|| Rc::new(std::cell::RefCell::new(Vec::new()))),
        };
        windows = match &gen {
            Some(g) => Some(g.windows.clone()),
            None => cache.is_some().then(|| Rc::new(std::cell::RefCell::new(Vec::new()))),
        };
        let shared = Rc::new(tp::local_config(cfg));
        // A Gemma layer given a mask: its config's window makes sdpa see the mask (no
        // enable_gqa, no is_causal), as `use_gqa_in_sdpa` decides on `attention_mask is None`.
        let masked_layer = hf.gemma.as_ref().map(|_| {
            let mut c = tp::local_config(cfg);
            if let Some(h) = c.hf.as_mut() {
                h.sliding_window = Some(0);
            }
            Rc::new(c)
        });
        // Qwen2-MoE's full_attention layers under a window: their config sees none (their sdpa
        // gets no mask; enable_gqa as `use_gqa_in_sdpa` decides).
        let full_layer = is_qwen2_moe_window(hf).then(|| {
            let mut c = tp::local_config(cfg);
            if let Some(h) = c.hf.as_mut() {
                h.sliding_window = None;
            }
            Rc::new(c)
        });
        // `hidden_states = inputs_embeds`: the local `inputs_embeds` keeps the embedding
        // output alive until LlamaModel.forward returns.
        let mut h = embeds.clone();
        let hooks = m.hooks.borrow().clone();
        for (i, l) in m.layers.iter().enumerate() {
            let _s = scope(&format!("layers.{i}"));
            let sliding_layer = hf.gemma.as_ref().is_some_and(|g| g.sliding[i]);
            let (cos, sin) = ropes[sliding_layer as usize].clone().expect("cos/sin for the layer's type");
            let qwen_sliding = hf.sliding_layers.as_ref().is_some_and(|s| s[i]);
            let layer_mask = if sliding_layer || qwen_sliding || gpt_oss.is_some_and(|g| g.is_sliding(i)) { sliding_mask.clone() } else { mask.clone() };
            let layer_cfg = match (&masked_layer, &full_layer) {
                (Some(c), _) if layer_mask.is_some() => c.clone(),
                (_, Some(c)) if !qwen_sliding => c.clone(),
                _ => shared.clone(),
            };
            let block = Block { cfg: layer_cfg, layer: l.clone(), mask: layer_mask, cos, sin, _position_ids: position_ids.clone(), cache: cache.clone(), windows: windows.clone(), sliding_cache: sliding_cache_layer(hf, i), layer_idx: i, static_cache, tp: tp_group, training: m.training.get(), router_logits: recorder.clone() };
            // MixedPrecisionPolicy(cast_forward_inputs=True): FSDPState._pre_forward casts the
            // layer's floating arguments to param_dtype before the unshard; the copies are the
            // call's (a checkpoint's `partial` keeps them for the recomputation).
            let cast = hooks.as_ref().and_then(|k| k.block_input_dtype(i)).map(|d| block.cast_forward_inputs(d));
            let block = cast.unwrap_or(block);
            // transformers 5.23 checkpoints the layer's `forward`, not its `__call__`
            // (GradientCheckpointingLayer.__init_subclass__), so module hooks (FSDP2's) run
            // outside the checkpoint, once: a recomputation, reentrant or not, runs none.
            let x = match &hooks {
                Some(k) => k.block_pre_forward(i, h.clone()),
                None => h.clone(),
            };
            let (y, held) = if checkpointing && cfg.checkpoint.covers(i) {
                let y = if hf.reentrant { checkpoint_reentrant(x, move |x| block.forward(x)) } else { checkpoint(x, move |x| block.forward(x)) };
                (y, None)
            } else {
                (block.forward(x), Some(block))
            };
            h = match &hooks {
                Some(k) => k.block_post_forward(i, y),
                None => y,
            };
            drop(held);
        }
        let h_in = if cfg.sequence_parallel() { tp::from_local(&h) } else { h.clone() };
        hidden = rms_norm(fr, "norm", &h_in, &m.final_norm, cfg.norm_eps);
        drop(h_in);
        drop((h, ropes, embeds));
    }
    // LlamaModel.forward returns: its mask and position ids die (unless saved or captured).
    drop((mask, sliding_mask, position_ids));
    let router_logits = recorder.map(|r| r.close()).unwrap_or_default();
    // slice_logits_to_keep: hidden_states[:, -k:, :] (a view); generate sets it to 1.
    let keep = if gen.is_some() { 1 } else { hf.logits_to_keep };
    let hidden = if keep > 0 && keep < s { hidden.narrow(1, s - keep, keep) } else { hidden };
    // `hidden_states` (and `outputs.last_hidden_state`) stay bound until the forward returns:
    // it matters where lm_head does not save them (sequence parallelism saves the gathered
    // input instead; no_grad saves nothing).
    let logits = match tp_group {
        Some(t) => {
            // ColwiseParallel's input: Replicate already, or gathered from Shard(1) under
            // sequence parallelism (a local of the module call, dying when it returns).
            let input = if t.sequence { tp::seq_gather(&hidden, t) } else { tp::colwise_input(&hidden) };
            // transformers' colwise_gather_output without grad: the local shard (tp::local_param).
            let head = if tp::local_linear(t) { tp::local_param(&m.lm_head) } else { m.lm_head.clone() };
            let local = linear_b("lm_head", &input, &head, None);
            drop(head);
            drop(input);
            tp::gather_logits(local, t)
        }
        None => linear_b("lm_head", &hidden, &m.lm_head, None),
    };
    logits_ready(&logits);
    let logits = gemma::final_softcap(hf, logits);
    let mut loss = labels.map(|labels| {
        let _s = scope("loss");
        for_causal_lm_loss(&logits, labels, cfg.vocab_size)
    });
    // `if output_router_logits:` the aux loss, labels or not; added to the loss with them.
    let aux_loss = aux_coef.map(|coef| {
        let moe = hf.moe.as_ref().expect("an MoE model");
        let aux = router_aux_loss::load_balancing_loss(moe.family, &router_logits, moe.experts, moe.top_k, attention_mask);
        loss = loss.take().map(|l| router_aux_loss::add_to_loss(l, &aux, coef));
        aux
    });
    drop(hidden);
    // generate's cache outlives the forward; a plain forward's dies with its output.
    let cache = if gen.is_some() {
        Vec::new()
    } else {
        let mut kv: Vec<Tensor> = cache.map(|c| c.borrow_mut().drain(..).collect()).unwrap_or_default();
        kv.extend(windows.map(|w| w.borrow_mut().drain(..).collect::<Vec<_>>()).unwrap_or_default());
        kv
    };
    Output { logits, loss, cache, router_logits, aux_loss }
}

/// The window of a `DynamicSlidingWindowLayer` (Gemma's, gpt-oss's, or the config's
/// `sliding_window`).
fn cache_window(hf: &HfConfig) -> Option<usize> {
    match (&hf.gemma, hf.moe.as_ref().and_then(|m| m.gpt_oss.as_ref())) {
        (Some(g), _) => Some(g.sliding_window),
        (None, Some(g)) => Some(g.window),
        (None, None) => hf.sliding_window,
    }
}

/// `states[:, :, -w + 1:, :]`: the last `w - 1` positions (all of them when fewer, or when
/// `w` is 1: Python's `-0:`), a view.
fn window_view(states: &Tensor, w: usize) -> Tensor {
    let len = states.dim(2);
    let keep = if w <= 1 { len } else { len.min(w - 1) };
    states.narrow(2, len - keep, keep)
}

/// Whether layer `i`'s DynamicCache layer is a `DynamicSlidingWindowLayer`
/// (`get_layer_types_and_kwargs`: "sliding_attention" in `layer_types`, else a
/// `sliding_window` on the config, which vramscope's readers give every layer or none).
fn sliding_cache_layer(hf: &HfConfig, i: usize) -> bool {
    match (&hf.gemma, hf.moe.as_ref().and_then(|m| m.gpt_oss.as_ref())) {
        (Some(g), _) => g.sliding[i],
        (None, Some(g)) => g.is_sliding(i),
        // Qwen2/3's max_window_layers / layer_types mix (HfConfig::sliding_layers).
        (None, None) => hf.sliding_layers.as_ref().map_or(hf.sliding_window.is_some(), |s| s[i]),
    }
}

/// `ForCausalLMLoss`: logits.float(), labels padded with -100 and shifted (contiguous),
/// `cross_entropy(ignore_index=-100, reduction="mean")`; the padded labels are a local.
fn for_causal_lm_loss(logits: &Tensor, labels: &Tensor, vocab: usize) -> Tensor {
    let _f = py_frame(&py::FOR_CAUSAL_LM_LOSS);
    let logits = logits.to_dtype(DType::F32);
    let s = labels.dim(1);
    let padded = labels.pad_last_int(1, -100);
    let shift = padded.narrow(1, 1, s).contiguous();
    let loss = {
        let _f = py_frame(&py::FIXED_CROSS_ENTROPY);
        logits.view(&[usize::MAX, vocab]).cross_entropy(&shift.view(&[usize::MAX]))
    };
    drop((padded, shift, logits));
    loss
}

/// What `scaled_dot_product_attention` hands a fused kernel for transformers' boolean mask:
/// `convert_boolean_attn_mask`, `where(mask, 0, -inf)` in the query's dtype at the mask's full
/// (B, 1, S, S_kv) size; on CUDA the memory-efficient kernel's `preprocess_mask` then pads the
/// last dim to a multiple of 16 (`pad_bias`, a copy, unless its strides are aligned) and
/// expands it (a view). The kernel's node saves the result for backward. `cpu`: no padding
/// (the CPU kernel, and cuDNN attention, which takes the converted mask as it is).
fn sdpa_float_mask(mask: &Tensor, dtype: DType, cpu: bool) -> Tensor {
    let device = mask.device();
    let converted = Tensor::zeros(&[], dtype, device).where_scalar(mask, f64::NEG_INFINITY);
    let kv = converted.dim(-1);
    if cpu || kv.is_multiple_of(16) {
        return converted;
    }
    let mut shape = converted.shape().to_vec();
    *shape.last_mut().expect("a 4-D mask") = kv.div_ceil(16) * 16;
    let padded = Tensor::zeros(&shape, dtype, device);
    padded.narrow(-1, 0, kv).copy_(&converted);
    drop(converted);
    padded.narrow(-1, 0, kv)
}

/// `_scaled_dot_product_attention_math` as CUDA runs it: half inputs upcast to fp32 (the
/// default `allow_fp16_bf16_reduction_math_sdp(False)`), GQA by repeat_interleave, both q and
/// kᵀ scaled by √scale, the causal mask as a float (S, S) mask, softmax, weights·V, and the
/// output cast back.
fn math_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool, scale: f64) -> Tensor {
    // SDPA is an autocast lower-precision op: its inputs are cast, then the composite runs
    // without autocast.
    // Cast right to left, value first (autocast::lower_pair).
    let v = &crate::engine::autocast::lower(v);
    let k = &crate::engine::autocast::lower(k);
    let q = &crate::engine::autocast::lower(q);
    let _no_autocast = crate::engine::autocast::suspend();
    let origin = q.dtype();
    let up = |t: &Tensor| if matches!(t.dtype(), DType::BF16 | DType::F16) { t.to_dtype(DType::F32) } else { t.clone() };
    let (q, mut k, mut v) = (up(q), up(k), up(v));
    let rep = q.dim(1) / k.dim(1);
    if rep > 1 {
        k = k.repeat_interleave(rep, 1);
        v = v.repeat_interleave(rep, 1);
    }
    let sf = scale.sqrt();
    let (sq, sk, device) = (q.dim(2), k.dim(2), q.device());
    let float_mask = match mask {
        Some(m) if m.dtype() == DType::Bool => Some(Tensor::zeros(&[], q.dtype(), device).where_scalar(m, f64::NEG_INFINITY)),
        Some(m) => Some(m.clone()),
        None if causal => {
            // ones(L, S, bool).tril() → where(mask, 0, -inf)
            let qi = Tensor::arange(sq, device).view(&[sq, 1]);
            let kj = Tensor::arange(sk, device).view(&[1, sk]);
            let tril = qi.ge(&kj);
            drop((qi, kj));
            Some(Tensor::zeros(&[], q.dtype(), device).where_scalar(&tril, f64::NEG_INFINITY))
        }
        None => None,
    };
    let qs = q.mul_scalar(sf);
    let mut attn = {
        let kt = k.transpose(-2, -1).mul_scalar(sf);
        qs.matmul(&kt)
    };
    if let Some(m) = &float_mask {
        attn = attn.add(m);
    }
    let attn = attn.softmax(-1);
    let out = attn.matmul(&v);
    drop((attn, float_mask, qs));
    out.to_dtype(origin)
}
