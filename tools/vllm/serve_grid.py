"""The vLLM 0.33.0 serve-plan terms that need no GPU, computed by vLLM's own code on CPU, over a
grid of models (Llama, Mistral, Qwen2/3, Phi-3; the MoE Mixtral, Qwen3-MoE, Qwen2-MoE) x tensor-parallel size x block size x kv-cache dtype x max_model_len x available
memory; written to tests/fixtures/vllm_serve_grid.json for tests/serve_grid.rs.

vLLM is not installed into the project's environment: unpack the wheel and put it (and the pure
Python packages its imports need) on PYTHONPATH, e.g.

    pip download --no-deps vllm==0.33.0 -d /tmp/vllm && (cd /tmp/vllm && unzip -q vllm-*.whl)
    PYTHONPATH=/tmp/vllm:/tmp/vllmdeps python tools/vllm/serve_grid.py

(/tmp/vllmdeps: `pip install --no-deps --target /tmp/vllmdeps` of what the imports ask for:
cbor2 pyzmq aiohttp requests openai-harmony openai pillow pybase64 cachetools msgspec cloudpickle
uvloop py-cpuinfo prometheus_client xgrammar apache-tvm-ffi and their small dependencies.)

Per point, from vLLM's functions:
- weights: the numel of vLLM's parallel layers (VocabParallelEmbedding, ParallelLMHead,
  QKVParallelLinear, MergedColumnParallelLinear, RowParallelLinear, ReplicatedLinear) built on
  the meta device with the tensor-parallel world size patched to N, summed as
  llama.py/qwen2.py/qwen3.py (phi3.py is llama's), mixtral.py, qwen3_moe.py and qwen2_moe.py
  compose them (RMSNorms: hidden elements; Qwen3's q/k norms: head_dim each); a mixture of
  experts layer's experts are UnquantizedFusedMoEMethod.create_weights' w13/w2 for vLLM's
  FusedMoEParallelConfig/FusedMoEConfig at TP N (expert parallelism off), with the Triton
  backend's (no) round-up that SM 9.0 selects;
- KV heads per rank: QKVParallelLinear.num_kv_heads;
- the KV cache: FullAttentionSpec / SlidingWindowSpec per layer (as Attention.get_kv_cache_spec
  makes them), grouped by get_kv_cache_groups and planned by get_kv_cache_configs with the given
  available memory on every rank: page and block bytes, num_blocks, vLLM's capacity
  (get_kv_cache_capacity: tokens and concurrency), the ValueError when max_model_len does not
  fit (its text), and auto-fit's max_model_len (original_max_model_len = -1).

`--hybrid` writes tests/fixtures/vllm_serve_hybrid.json instead (tests/serve_hybrid_grid.rs):
Gemma 2 and Gemma 3 text (sliding and full layers, several KV cache groups) over five shapes x TP
x block size x kv-cache dtype x max_model_len (below the window, above it, the derived length) x
available memory; weights composed from vLLM's parallel layers as gemma2.py / gemma3.py compose
them, each layer's spec as Attention.get_kv_cache_spec makes it (layer_types from transformers'
config classes; the sliding block size from _largest_kernel_block_within for FlashAttention),
and vLLM's own grouping of the layers (per group: window, layers, block size).

`--mla` writes tests/fixtures/vllm_serve_mla.json (tests/serve_mla_grid.rs) instead: DeepSeek-V3
(multi-head latent attention) shapes x TP x block size x max_model_len x available memory, with
the weight bytes per rank composed from vLLM's own layers as deepseek_v2.py composes them
(DeepSeekV2FusedQkvAProjLinear, GateLinear and its fp32 e_score_correction_bias, the dense
first_k_dense_replace layers, the shared experts, FusedMoE's w13/w2) and the cache planned over
MLAAttentionSpec layers (one latent head of kv_lora_rank + qk_rope_head_dim, max_tp_shards 1);
and Qwen2-MoE/Qwen3-MoE configs with dense layers among the sparse ones (mlp_only_layers,
decoder_sparse_step: those layers' Qwen2MoeMLP/Qwen3MoeMLP of intermediate_size).

`--gpt-oss` writes tests/fixtures/vllm_serve_gpt_oss.json (tests/serve_gpt_oss_grid.rs): gpt-oss-20b
and gpt-oss-120b (their MXFP4 checkpoints, as vLLM serves them on H100/H200) x TP x block size x
kv-cache dtype x max_model_len x available memory. The weight bytes per rank: the bf16 layers as
gpt_oss.py builds them (QKVParallelLinear and RowParallelLinear with biases, the attention sinks
of heads/tp, GateLinear with its bias, two RMSNorms a layer, the embedding, the untied lm_head,
the final norm), plus the experts as GptOssMxfp4MoEMethod holds them after loading on SM 9.0:
create_weights at the intermediate size per rank that its maybe_roundup_sizes gives for the OAI
Triton backend (rounded up to 64), then vLLM's own convert_gpt_oss_weight_to_mxfp4_moe_kernel_format
(TRITON) run on the meta device with the platform answering as SM 9.0, which swizzles the values
and scales with the vendored triton_kernels' HopperMXValueLayout / HopperMXScaleLayout (plain
torch pads and permutes) and frees the loaded ones; the bytes are those of the tensors left (the
swizzled uint8 values and scales, the biases in float32). Derived from that source, not measured
on a card. The KV cache: sliding (window 128) on even layers, full on odd ones (gpt_oss.py:175),
the specs and plan as `--hybrid` makes them.

`--olmo2` writes tests/fixtures/vllm_serve_olmo2.json (tests/serve_olmo2_grid.rs): OLMo-2, which
vLLM 0.33.0 serves through its Transformers modeling backend (registry.py:762). vLLM's own
TransformersForCausalLM is built on the meta device at each TP size (olmo2_weights_per_rank: the
process groups, torch.compile's decoration, CustomOp dispatch, the logits processor and the
Attention class are stubbed), so its fusers decide the sharding (QKVParallelLinear,
MergedColumnParallelLinear, row-parallel o/down, q_norm/k_norm whole as TPAwareRMSNorm); the
weights are its parameters' elements (buffers left out), the KV heads and head size the kwargs it
gives Attention, and the cache planned as for the dense grid. Three shapes (OLMo-2-1124-7B, a 32B
shape with 8 KV heads, a small tied one with a padded vocabulary) x TP x block size x kv-cache
dtype x max_model_len x available memory.

`--moe-sliding` writes tests/fixtures/vllm_serve_moe_sliding.json (tests/serve_moe_sliding_grid.rs):
Mixtral, Qwen3-MoE and Qwen2-MoE configs with a sliding window. CacheConfig.sliding_window is
computed from transformers' config class as vLLM's EngineArgs sets it (vllm_cache_sliding_window:
kept only without layer_types or with every layer sliding; 0 is none); the MoE model files pass
no per-layer window, so every layer gets that window or none. Weights and plan as the main grid.
"""
import json
import math
import os
import sys
import types
from unittest import mock

import torch

# vLLM's module imports reach its web server, telemetry and grammar packages, which the planning
# code never calls: stand-ins for those (the names in _fakemods.txt) let it import on CPU.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fakemods  # noqa: E402,F401

import vllm
from vllm.model_executor.layers import linear as vlinear
from vllm.model_executor.layers import vocab_parallel_embedding as vvocab
from vllm.v1.core import kv_cache_planning as planning
from vllm.v1.core import kv_cache_utils as kvu
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
from vllm.v1.kv_cache_layout import KVCacheLayout

assert vllm.__version__.startswith("0.33.0"), vllm.__version__
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIB = 1 << 30


def load(name):
    with open(os.path.join(ROOT, "tests/fixtures/hf_models", name, "config.json")) as f:
        return json.load(f)


def model_shape(cfg):
    mt = cfg["model_type"]
    h = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or (128 if mt == "qwen3" else cfg["hidden_size"] // h)
    moe = None
    if mt == "mixtral":
        moe = dict(experts=cfg["num_local_experts"], top_k=cfg["num_experts_per_tok"], inter=cfg["intermediate_size"], shared=None)
    elif mt == "qwen3_moe":
        moe = dict(experts=cfg["num_experts"], top_k=cfg["num_experts_per_tok"], inter=cfg["moe_intermediate_size"], shared=None)
    elif mt == "qwen2_moe":
        # Qwen2MoeSparseMoeBlock: shared_expert_gate always, the shared expert when its width > 0.
        moe = dict(experts=cfg["num_experts"], top_k=cfg["num_experts_per_tok"], inter=cfg["moe_intermediate_size"],
                   shared=cfg["shared_expert_intermediate_size"])
    # Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer (qwen2_moe.py:313-321, qwen3_moe.py:385-393): a
    # layer is sparse unless in mlp_only_layers or (index + 1) % decoder_sparse_step != 0.
    only, step = cfg.get("mlp_only_layers") or [], cfg.get("decoder_sparse_step", 1)
    sparse = [not (moe and mt != "mixtral") or (i not in only and (i + 1) % step == 0) for i in range(cfg["num_hidden_layers"])]
    sliding = None
    if mt == "mistral":
        sliding = cfg.get("sliding_window", 4096)
    elif mt == "phi3":
        # Phi3Config has no layer_types: its sliding_window becomes CacheConfig.sliding_window
        # for every layer (engine/arg_utils.py:2288-2294).
        sliding = cfg.get("sliding_window")
    elif mt in ("qwen2", "qwen3") and cfg.get("use_sliding_window") and cfg.get("max_window_layers", 28) == 0:
        sliding = cfg.get("sliding_window", 4096)
    return dict(
        model_type=mt, d=cfg["hidden_size"], f=cfg["intermediate_size"], layers=cfg["num_hidden_layers"],
        heads=h, kv=cfg.get("num_key_value_heads", h), hd=hd, vocab=cfg["vocab_size"],
        tied=cfg.get("tie_word_embeddings", False), qkv_bias=mt in ("qwen2", "qwen2_moe") or bool(cfg.get("attention_bias")),
        o_bias=mt in ("llama", "qwen3") and bool(cfg.get("attention_bias")), mlp_bias=bool(cfg.get("mlp_bias")),
        sliding=sliding or None, moe=moe, sparse=sparse,
    )


def numel(module):
    return sum(p.numel() for p in module.parameters())


def fused_moe_numel(m, tp):
    """One FusedMoE layer's w13/w2 at tensor-parallel size tp, expert parallelism off: vLLM's
    FusedMoEParallelConfig.make (tp x dp x pcp flattened, config.py:1117), FusedMoEConfig's
    intermediate_size_per_partition (config.py:1350), the unquantized round-up of the backend
    SM 9.0 picks (Triton first on Hopper, oracle/unquantized.py:76-80: no padding), and
    UnquantizedFusedMoEMethod.create_weights (unquantized_fused_moe_method.py:68)."""
    from vllm.model_executor.layers.fused_moe import config as mcfg
    from vllm.model_executor.layers.fused_moe.oracle import unquantized as oracle
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    pc = types.SimpleNamespace(enable_expert_parallel=False, all2all_backend="allgather_reducescatter", enable_eplb=False)
    with mock.patch.object(mcfg, "get_tensor_model_parallel_rank", return_value=0):
        par = mcfg.FusedMoEParallelConfig.make(tp, 1, 1, 1, pc)
    e = m["moe"]["experts"]
    conf = mcfg.FusedMoEConfig(num_experts=e, experts_per_token=m["moe"]["top_k"], hidden_dim=m["d"], intermediate_size=m["moe"]["inter"],
                               num_local_experts=e, num_logical_experts=e, activation=MoEActivation.SILU, device="meta",
                               routing_method=None, moe_parallel_config=par, in_dtype=torch.bfloat16)
    hidden, inter = oracle.unquantized_round_up_hidden_size_and_intermediate_size(oracle.UnquantizedMoeBackend.TRITON, m["d"], conf.intermediate_size_per_partition)
    method = UnquantizedFusedMoEMethod.__new__(UnquantizedFusedMoEMethod)
    method.moe = conf
    layer = torch.nn.Module()
    with torch.device("meta"):
        method.create_weights(layer, num_experts=e, hidden_size=hidden, intermediate_size_per_partition=inter, params_dtype=torch.bfloat16)
    return numel(layer)


def tp_patches(tp):
    """Patches (not started) that make vLLM's parallel layers build rank 0's shard at
    tensor-parallel world size tp: the linear and vocabulary layers' world size and rank, and
    what the parameters ask the TP group (model_executor/parameter.py:63)."""
    return [
        mock.patch.object(vlinear, "get_tensor_model_parallel_world_size", return_value=tp),
        mock.patch.object(vlinear, "get_tensor_model_parallel_rank", return_value=0),
        mock.patch.object(vvocab, "get_tensor_model_parallel_world_size", return_value=tp),
        mock.patch.object(vvocab, "get_tensor_model_parallel_rank", return_value=0),
        mock.patch("vllm.distributed.parallel_state._TP", types.SimpleNamespace(rank_in_group=0, world_size=tp)),
    ]


def weights_per_rank(m, tp):
    """vLLM's own parallel layers at world size tp (rank 0; every rank's shard is the same size)."""
    patches = tp_patches(tp)
    for p in patches:
        p.start()
    try:
        with torch.device("meta"):
            dt = torch.bfloat16
            qkv = vlinear.QKVParallelLinear(m["d"], m["hd"], m["heads"], m["kv"], bias=m["qkv_bias"], params_dtype=dt)
            o = vlinear.RowParallelLinear(m["heads"] * m["hd"], m["d"], bias=m["o_bias"], params_dtype=dt)
            dense_mlp = None
            if m["moe"] and not all(m["sparse"]):
                # The dense layers' Qwen2MoeMLP / Qwen3MoeMLP of intermediate_size.
                dense_mlp = numel(vlinear.MergedColumnParallelLinear(m["d"], [m["f"]] * 2, bias=False, params_dtype=dt))
                dense_mlp += numel(vlinear.RowParallelLinear(m["f"], m["d"], bias=False, params_dtype=dt))
            if m["moe"]:
                # The router (GateLinear, a ReplicatedLinear), whole on every rank; Qwen2-MoE's
                # shared_expert_gate (ReplicatedLinear(hidden, 1)) and shared expert
                # (Qwen2MoeMLP: column- and row-parallel); the experts.
                mlp = numel(vlinear.ReplicatedLinear(m["d"], m["moe"]["experts"], bias=False, params_dtype=dt))
                if m["moe"]["shared"] is not None:
                    mlp += numel(vlinear.ReplicatedLinear(m["d"], 1, bias=False, params_dtype=dt))
                    if m["moe"]["shared"] > 0:
                        mlp += numel(vlinear.MergedColumnParallelLinear(m["d"], [m["moe"]["shared"]] * 2, bias=False, params_dtype=dt))
                        mlp += numel(vlinear.RowParallelLinear(m["moe"]["shared"], m["d"], bias=False, params_dtype=dt))
                mlp += fused_moe_numel(m, tp)
            else:
                mlp = numel(vlinear.MergedColumnParallelLinear(m["d"], [m["f"]] * 2, bias=m["mlp_bias"], params_dtype=dt))
                mlp += numel(vlinear.RowParallelLinear(m["f"], m["d"], bias=m["mlp_bias"], params_dtype=dt))
            emb = vvocab.VocabParallelEmbedding(m["vocab"], m["d"], params_dtype=dt)
            head = 0 if m["tied"] else numel(vvocab.ParallelLMHead(m["vocab"], m["d"], params_dtype=dt))
        norms = 2 * m["d"] + (2 * m["hd"] if m["model_type"] in ("qwen3", "qwen3_moe") else 0)
        layer = numel(qkv) + numel(o) + norms
        layers = sum(layer + (mlp if sp else dense_mlp) for sp in m["sparse"])
        return layers + numel(emb) + head + m["d"], qkv.num_kv_heads
    finally:
        for p in patches:
            p.stop()


class Cfg(types.SimpleNamespace):
    pass


def vllm_config(max_model_len, tp, block, batched, original=None):
    cache = Cfg(num_gpu_blocks_override=None, block_size=block, prefix_cache_retention_interval=None,
                get_resolved_kv_cache_layout=lambda: KVCacheLayout.LBNHC, kv_cache_size_tokens=None,
                kv_cache_max_concurrency=None)
    c = Cfg(
        model_config=Cfg(max_model_len=max_model_len, original_max_model_len=original or max_model_len),
        parallel_config=Cfg(decode_context_parallel_size=1, tensor_parallel_size=tp, pipeline_parallel_size=1),
        scheduler_config=Cfg(disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=batched, async_scheduling=True),
        cache_config=cache,
        attention_config=Cfg(hisparse_config=None),
        device_config=Cfg(device_type="cuda"),
        speculative_config=None,
        # VllmConfig.max_in_flight_tokens: max_concurrent_batches (2 with async scheduling, one
        # pipeline stage; config/vllm.py:588-609) x max_num_batched_tokens.
        max_in_flight_tokens=2 * batched,
    )
    return c


def specs_for(m, kv_heads, block, dtype):
    if m["sliding"]:
        spec = SlidingWindowSpec(block_size=block, num_kv_heads=kv_heads, head_size=m["hd"], dtype=dtype, sliding_window=m["sliding"])
    else:
        spec = FullAttentionSpec(block_size=block, num_kv_heads=kv_heads, head_size=m["hd"], dtype=dtype)
    return {f"model.layers.{i}.self_attn.attn": spec for i in range(m["layers"])}


def plan(m, kv_heads, tp, block, dtype, max_model_len, batched, available):
    return plan_specs(specs_for(m, kv_heads, block, dtype), tp, block, max_model_len, batched, available)


def plan_specs(specs, tp, block, max_model_len, batched, available):
    out = {}
    with mock.patch("vllm.platforms.current_platform.get_kv_cache_config_builder_cls",
                    return_value="vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder", create=True):
        cfg = vllm_config(max_model_len, tp, block, batched)
        groups = planning.get_kv_cache_groups(cfg, dict(specs))
        out["num_groups"] = len(groups)
        out["page_bytes_per_layer"] = next(iter(specs.values())).page_size_bytes
        out["bytes_per_block"] = planning._pool_bytes_per_block(cfg, groups)
        out["max_memory_usage_bytes"] = planning.max_memory_usage_bytes(cfg, specs.values())
        try:
            kcs = planning.get_kv_cache_configs(cfg, [dict(specs)] * tp, [available] * tp, groups)
            out["num_blocks"] = kcs[0].num_blocks
            tokens, conc = kvu.get_kv_cache_capacity(cfg, kcs[0])
            out["kv_cache_tokens"] = tokens
            out["max_concurrency"] = conc
            # The float's exact text: serde_json's default parse may miss the last bit.
            out["max_concurrency_repr"] = repr(conc)
            out["error"] = None
        except ValueError as e:
            out["error"] = str(e)
        # Auto-fit (`--max-model-len -1`): the derived length is max_model_len here.
        cfg = vllm_config(max_model_len, tp, block, batched, original=-1)
        try:
            planning.get_kv_cache_configs(cfg, [dict(specs)] * tp, [available] * tp, groups)
            out["auto_fit_max_model_len"] = cfg.model_config.max_model_len
        except ValueError as e:
            out["auto_fit_max_model_len"] = None
            out["auto_fit_error"] = str(e)
    return out


MIXTRAL = dict(architectures=["MixtralForCausalLM"], model_type="mixtral", hidden_size=4096, intermediate_size=14336,
               num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
               vocab_size=32000, max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=False,
               torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2)
QWEN3_MOE = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144,
                 moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                 num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                 vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False,
                 use_sliding_window=False, sliding_window=None, max_window_layers=48, torch_dtype="bfloat16",
                 bos_token_id=151643, eos_token_id=151645)
QWEN2_MOE = dict(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632,
                 moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
                 num_key_value_heads=16, num_experts=60, num_experts_per_tok=4, norm_topk_prob=False, decoder_sparse_step=1,
                 vocab_size=151936, max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False,
                 use_sliding_window=False, sliding_window=32768, max_window_layers=21, torch_dtype="bfloat16",
                 bos_token_id=151643, eos_token_id=151643)

MODELS = {
    "Llama-3.1-8B": load("Llama-3.1-8B"),
    "Llama-3.2-1B": load("Llama-3.2-1B"),
    "Mistral-7B-v0.3": load("Mistral-7B-v0.3"),
    "Qwen2.5-7B": load("Qwen2.5-7B"),
    "Qwen3-8B": load("Qwen3-8B"),
    # Mistral-7B-v0.1's shape: every layer slides over 4096 tokens.
    "Mistral-7B-v0.1-sliding": dict(load("Mistral-7B-v0.3"), vocab_size=32000, sliding_window=4096, max_position_embeddings=32768),
    # Qwen2.5-7B with use_sliding_window and max_window_layers 0: every layer slides.
    "Qwen2.5-7B-sliding": dict(load("Qwen2.5-7B"), use_sliding_window=True, sliding_window=4096, max_window_layers=0),
    "Phi-3-mini-4k-instruct": load("Phi-3-mini-4k-instruct"),
    # Phi-3-medium-4k-instruct's shape: 40 heads over 10 KV heads.
    "Phi-3-medium-shape": dict(load("Phi-3-mini-4k-instruct"), hidden_size=5120, intermediate_size=17920, num_hidden_layers=40,
                               num_attention_heads=40, num_key_value_heads=10),
    # Mixture of experts (their published config.json's shape fields).
    "Mixtral-8x7B": dict(MIXTRAL, sliding_window=None),
    "Mixtral-8x22B-shape": dict(MIXTRAL, hidden_size=6144, intermediate_size=16384, num_hidden_layers=56, num_attention_heads=48,
                                vocab_size=32768, max_position_embeddings=65536, sliding_window=None),
    "Qwen3-30B-A3B": QWEN3_MOE,
    "Qwen3-235B-A22B-shape": dict(QWEN3_MOE, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=94,
                                  num_attention_heads=64),
    "Qwen1.5-MoE-A2.7B": QWEN2_MOE,
    "Qwen2-57B-A14B-shape": dict(QWEN2_MOE, hidden_size=3584, intermediate_size=18944, moe_intermediate_size=2560,
                                 shared_expert_intermediate_size=20480, num_experts=64, num_experts_per_tok=8, num_hidden_layers=28,
                                 num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768),
}
for c in MODELS.values():
    c.setdefault("sliding_window", None)
MODELS["Mistral-7B-v0.3"]["sliding_window"] = None


def sweep(tps, blocks=(16, 32), kvs=("auto", "fp8")):
    """(i, model, tp, block, kv) over a grid's models x their TP sizes x block sizes x kv-cache
    dtypes, i counting from 1: each grid cycles its lengths, memories and token budgets on i, out
    of step with the loops, so every TP size meets plans that fit and plans that do not."""
    i = 0
    for name, ts in tps.items():
        for tp in ts:
            for block in blocks:
                for kv in kvs:
                    i += 1
                    yield i, name, tp, block, kv


def point(name, tp, block, kv, max_model_len, batched, mem):
    return dict(model=name, tensor_parallel_size=tp, block_size=block, kv_cache_dtype=kv,
                max_model_len=max_model_len, max_num_batched_tokens=batched, available_memory=mem)


def kv_dtype(p):
    """The cache's torch dtype for the point's kv_cache_dtype (fp8 pages are one byte)."""
    return torch.uint8 if p["kv_cache_dtype"] == "fp8" else torch.bfloat16


def write_fixture(flag, file, configs, out, notes=None):
    """tests/fixtures/<file>: vLLM's and torch's versions, the generator's command line, the
    configs and the points."""
    doc = {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "generator": "tools/vllm/serve_grid.py" + (f" {flag}" if flag else ""),
        **({"notes": notes} if notes else {}),
        "configs": configs,
        "points": out,
    }
    path = os.path.join(ROOT, "tests/fixtures", file)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{len(out)} points -> {path}", file=sys.stderr)


def grid():
    pts = []
    tps = {"Llama-3.1-8B": [1, 2, 4, 8], "Llama-3.2-1B": [1, 2, 8, 16], "Mistral-7B-v0.3": [1, 4], "Qwen2.5-7B": [1, 2, 4],
           "Qwen3-8B": [1, 2, 8], "Mistral-7B-v0.1-sliding": [1, 2], "Qwen2.5-7B-sliding": [1, 4],
           "Phi-3-mini-4k-instruct": [1, 2, 4], "Phi-3-medium-shape": [1, 2], "Mixtral-8x7B": [1, 2, 4, 8],
           "Mixtral-8x22B-shape": [2, 4, 8], "Qwen3-30B-A3B": [1, 2, 4], "Qwen3-235B-A22B-shape": [4, 8],
           "Qwen1.5-MoE-A2.7B": [1, 2, 4], "Qwen2-57B-A14B-shape": [1, 2, 4]}
    for i, name, tp, block, kv in sweep(tps):
        lens = [4096, 32768, MODELS[name].get("max_position_embeddings")]
        mem = [40 * GIB + 12345, 3 * GIB + 777, GIB // 7][i % 3]
        pts.append(point(name, tp, block, kv, lens[i % 3], [8192, 2048][i % 2], mem))
    return pts


# --- Multi-head latent attention (DeepSeek-V3, `--mla`: tests/fixtures/vllm_serve_mla.json) ---
DEEPSEEK_V3 = {k: v for k, v in load("DeepSeek-V3").items() if k != "quantization_config"}
MLA_MODELS = {
    # The published config.json less its fp8 quantization_config (the bf16 load).
    "DeepSeek-V3": DEEPSEEK_V3,
    # A small shape of it: the same latent dims (FlashAttention MLA takes 576 = 512 + 64).
    "DeepSeek-V3-small-shape": dict(DEEPSEEK_V3, hidden_size=1024, intermediate_size=2816, moe_intermediate_size=256, num_hidden_layers=5,
                                    num_attention_heads=16, num_key_value_heads=16, q_lora_rank=384, n_routed_experts=32, n_group=4,
                                    topk_group=2, num_experts_per_tok=4, first_k_dense_replace=2, vocab_size=32000,
                                    max_position_embeddings=16384),
    # moonshotai/Moonlight-16B-A3B's shape: no low-rank query (q_proj), two shared experts, one dense layer.
    "Moonlight-16B-A3B-shape": dict(DEEPSEEK_V3, hidden_size=2048, intermediate_size=11264, moe_intermediate_size=1408, num_hidden_layers=27,
                                    num_attention_heads=16, num_key_value_heads=16, q_lora_rank=None, n_routed_experts=64, n_shared_experts=2,
                                    n_group=1, topk_group=1, num_experts_per_tok=6, first_k_dense_replace=1, vocab_size=163840,
                                    max_position_embeddings=8192, bos_token_id=163584, eos_token_id=163585),
    # No topk_method (greedy routing: no e_score_correction_bias) and a 320-wide latent (256 + 64).
    "DeepSeek-V3-greedy-320-shape": {**{k: v for k, v in DEEPSEEK_V3.items() if k not in ("topk_method", "scoring_func")},
                                     "hidden_size": 1536, "intermediate_size": 4096, "moe_intermediate_size": 512, "num_hidden_layers": 6,
                                     "num_attention_heads": 32, "num_key_value_heads": 32, "kv_lora_rank": 256, "q_lora_rank": 768,
                                     "n_routed_experts": 16, "n_group": 2, "topk_group": 1, "num_experts_per_tok": 2,
                                     "first_k_dense_replace": 3, "vocab_size": 50000, "max_position_embeddings": 32768},
}


def mla_shape(cfg):
    """The fields vLLM's deepseek_v2.py reads (DeepseekV2DecoderLayer, DeepseekV2MLAAttention, DeepseekV2MoE)."""
    assert cfg["model_type"] == "deepseek_v3" and cfg.get("moe_layer_freq", 1) == 1
    return dict(
        d=cfg["hidden_size"], f=cfg["intermediate_size"], fe=cfg["moe_intermediate_size"], layers=cfg["num_hidden_layers"],
        heads=cfg["num_attention_heads"], vocab=cfg["vocab_size"], experts=cfg["n_routed_experts"], top_k=cfg["num_experts_per_tok"],
        shared=cfg["n_shared_experts"], dense=cfg["first_k_dense_replace"], q_lora=cfg.get("q_lora_rank"),
        kv_lora=cfg["kv_lora_rank"], nope=cfg["qk_nope_head_dim"], rope=cfg["qk_rope_head_dim"], v=cfg["v_head_dim"],
        noaux_tc=cfg.get("topk_method") == "noaux_tc",
    )


def mla_weight_bytes_per_rank(m, tp):
    """One rank's weight bytes, composed as deepseek_v2.py composes vLLM's own layers (rank 0 at
    world size tp): DeepseekV2MLAAttention (fused_qkv_a_proj = DeepSeekV2FusedQkvAProjLinear,
    replicated; q_a_layernorm; q_b_proj or q_proj, column-parallel; kv_a_proj_with_mqa when there
    is no q_lora_rank; kv_a_layernorm; kv_b_proj column-parallel; o_proj row-parallel), the two
    RMSNorms, the first_k_dense_replace layers' DeepseekV2MLP, and the others' DeepseekV2MoE:
    GateLinear (bf16), e_score_correction_bias (float32, topk_method noaux_tc), shared_experts
    (a DeepseekV2MLP of moe_intermediate_size x n_shared_experts; AITER's fused shared experts
    are ROCm only) and FusedMoE's w13/w2; the embedding, the final norm and a ParallelLMHead
    (deepseek_v2.py always builds one)."""
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear
    from vllm.model_executor.models.deepseek_v2 import DeepSeekV2FusedQkvAProjLinear
    patches = tp_patches(tp)
    for p in patches:
        p.start()

    def nbytes(module):
        return sum(p.numel() * p.element_size() for p in module.parameters())
    try:
        dt = torch.bfloat16
        torch.set_default_dtype(dt)
        with torch.device("meta"):
            qk = m["nope"] + m["rope"]
            attn = 0
            if m["q_lora"] is not None:
                attn += nbytes(DeepSeekV2FusedQkvAProjLinear(m["d"], [m["q_lora"], m["kv_lora"] + m["rope"]]))
                attn += m["q_lora"] * 2  # q_a_layernorm
                attn += nbytes(vlinear.ColumnParallelLinear(m["q_lora"], m["heads"] * qk, bias=False, params_dtype=dt))
            else:
                attn += nbytes(vlinear.ReplicatedLinear(m["d"], m["kv_lora"] + m["rope"], bias=False, params_dtype=dt))
                attn += nbytes(vlinear.ColumnParallelLinear(m["d"], m["heads"] * qk, bias=False, params_dtype=dt))
            attn += m["kv_lora"] * 2  # kv_a_layernorm
            attn += nbytes(vlinear.ColumnParallelLinear(m["kv_lora"], m["heads"] * (m["nope"] + m["v"]), bias=False, params_dtype=dt))
            attn += nbytes(vlinear.RowParallelLinear(m["heads"] * m["v"], m["d"], bias=False, params_dtype=dt))

            def dense_mlp(width):
                return (nbytes(vlinear.MergedColumnParallelLinear(m["d"], [width] * 2, bias=False, params_dtype=dt))
                        + nbytes(vlinear.RowParallelLinear(width, m["d"], bias=False, params_dtype=dt)))
            gate = GateLinear(m["d"], m["experts"])
            assert gate.weight.dtype == dt
            moe = nbytes(gate) + (m["experts"] * 4 if m["noaux_tc"] else 0)
            moe += dense_mlp(m["fe"] * m["shared"])
            moe += 2 * fused_moe_numel(dict(moe=dict(experts=m["experts"], top_k=m["top_k"], inter=m["fe"]), d=m["d"]), tp)
            dense = dense_mlp(m["f"])
            emb = nbytes(vvocab.VocabParallelEmbedding(m["vocab"], m["d"], params_dtype=dt))
            head = nbytes(vvocab.ParallelLMHead(m["vocab"], m["d"], params_dtype=dt))
        norms = 2 * m["d"] * 2  # input_layernorm, post_attention_layernorm
        dense_layers = m["dense"] * (attn + norms + dense)
        sparse_layers = (m["layers"] - m["dense"]) * (attn + norms + moe)
        return dense_layers + sparse_layers + emb + head + m["d"] * 2
    finally:
        torch.set_default_dtype(torch.float32)
        for p in patches:
            p.stop()


def mla_plan(m, block, max_model_len, batched, available, tp):
    """MLAAttention.get_kv_cache_spec (mla_attention.py:1371): one latent head of kv_lora_rank +
    qk_rope_head_dim, max_tp_shards 1 (every rank holds it whole), cache dtype auto; planned
    as plan() plans, with the same spec on every layer."""
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, get_kv_quant_mode
    spec = MLAAttentionSpec(block_size=block, num_kv_heads=1, max_tp_shards=1, head_size=m["kv_lora"] + m["rope"], dtype=torch.bfloat16,
                            cache_dtype_str="auto", kv_quant_mode=get_kv_quant_mode("auto"), state_content_bytes=None,
                            topk_buffer_width=None, is_index_group_leader=False, non_causal_multi_token_decode=False)
    specs = {f"model.layers.{i}.self_attn.mla_attn": spec for i in range(m["layers"])}
    return plan_specs(specs, tp, block, max_model_len, batched, available)


def mla_grid():
    pts = []
    tps = {"DeepSeek-V3": [4, 8, 16], "DeepSeek-V3-small-shape": [1, 2, 4], "Moonlight-16B-A3B-shape": [1, 2, 4],
           "DeepSeek-V3-greedy-320-shape": [1, 2]}
    for i, name, tp, block, kv in sweep(tps, (16, 32, 64), ("auto",)):
        lens = [4096, 16384, MLA_MODELS[name]["max_position_embeddings"]]
        mem = [40 * GIB + 12345, 3 * GIB + 777, GIB // 50, 100 * GIB + 1][i % 4]
        pts.append(point(name, tp, block, kv, lens[(i // 2) % 3], [8192, 2048][(i // 3) % 2], mem))
    return pts


# Qwen2-MoE / Qwen3-MoE with dense layers among the sparse ones (also written by `--mla`).
DENSE_MIX_MODELS = {
    "Qwen3-30B-A3B-mlp-only-shape": dict(QWEN3_MOE, mlp_only_layers=[0, 1, 47]),
    "Qwen3-MoE-step2-shape": dict(QWEN3_MOE, num_hidden_layers=12, decoder_sparse_step=2, mlp_only_layers=[5]),
    "Qwen1.5-MoE-step3-shape": dict(QWEN2_MOE, decoder_sparse_step=3),
    "Qwen2-MoE-mlp-only-shape": dict(QWEN2_MOE, num_hidden_layers=8, mlp_only_layers=[0, 7], shared_expert_intermediate_size=2816),
}
for c in DENSE_MIX_MODELS.values():
    c.setdefault("sliding_window", None)


def dense_mix_grid():
    pts = []
    tps = {"Qwen3-30B-A3B-mlp-only-shape": [1, 2, 4], "Qwen3-MoE-step2-shape": [1, 4], "Qwen1.5-MoE-step3-shape": [1, 2, 4],
           "Qwen2-MoE-mlp-only-shape": [1, 2]}
    for i, name, tp, block, kv in sweep(tps):
        lens = [4096, 8192, DENSE_MIX_MODELS[name]["max_position_embeddings"]]
        mem = [40 * GIB + 12345, 3 * GIB + 777, GIB // 7][i % 3]
        pts.append(point(name, tp, block, kv, lens[(i // 3) % 3], [8192, 2048][(i // 2) % 2], mem))
    return pts


def main_mla():
    out = []
    for p in dense_mix_grid():
        m = model_shape(DENSE_MIX_MODELS[p["model"]])
        assert not all(m["sparse"])
        w, kvh = weights_per_rank(m, p["tensor_parallel_size"])
        dtype = kv_dtype(p)
        row = dict(p, weight_elements_per_rank=w, num_kv_heads_per_rank=kvh)
        row.update(plan(m, kvh, p["tensor_parallel_size"], p["block_size"], dtype, p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]))
        out.append(row)
        print(p["model"], p["tensor_parallel_size"], w, row.get("num_blocks"), file=sys.stderr)
    for p in mla_grid():
        m = mla_shape(MLA_MODELS[p["model"]])
        tp = p["tensor_parallel_size"]
        row = dict(p, weight_bytes_per_rank=mla_weight_bytes_per_rank(m, tp), num_kv_heads_per_rank=1)
        row.update(mla_plan(m, p["block_size"], p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"], tp))
        out.append(row)
        print(p["model"], tp, p["block_size"], row["weight_bytes_per_rank"], row.get("num_blocks"), (row.get("error") or "")[:40], file=sys.stderr)
    write_fixture("--mla", "vllm_serve_mla.json", {**MLA_MODELS, **DENSE_MIX_MODELS}, out)


def main():
    if "--mla" in sys.argv[1:]:
        return main_mla()
    out = []
    for p in grid():
        cfg = MODELS[p["model"]]
        m = model_shape(cfg)
        w, kvh = weights_per_rank(m, p["tensor_parallel_size"])
        dtype = kv_dtype(p)
        row = dict(p, weight_elements_per_rank=w, num_kv_heads_per_rank=kvh)
        row.update(plan(m, kvh, p["tensor_parallel_size"], p["block_size"], dtype, p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]))
        out.append(row)
        print(p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], row.get("num_blocks"), row.get("error", "")[:40] if row.get("error") else "", file=sys.stderr)
    write_fixture("", "vllm_serve_grid.json", {k: v for k, v in MODELS.items()}, out)


# --- Hybrid attention (`--hybrid`): Gemma 2 and Gemma 3 text, sliding and full layers mixed ---

GEMMA2_9B = load("gemma-2-9b")
GEMMA3_27B = load("gemma-3-27b-text")
HYBRID_MODELS = {
    "Gemma-2-9B": GEMMA2_9B,
    # google/gemma-2-27b's shape: 128-wide heads, 46 layers.
    "Gemma-2-27B-shape": dict(GEMMA2_9B, hidden_size=4608, intermediate_size=36864, num_hidden_layers=46, num_attention_heads=32,
                              num_key_value_heads=16, head_dim=128, query_pre_attn_scalar=144),
    "Gemma-3-27B": GEMMA3_27B,
    # google/gemma-3-4b-it's text_config: 256-wide heads, 34 layers (5 full).
    "Gemma-3-4B-shape": dict(GEMMA3_27B, hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
                             num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256),
    # google/gemma-3-1b-it: one KV head, a 512 window, 26 layers (4 full), 32768 positions.
    "Gemma-3-1B-shape": dict(GEMMA3_27B, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
                             num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256, sliding_window=512, vocab_size=262144,
                             max_position_embeddings=32768, rope_scaling=None),
}


def hybrid_layer_types(cfg):
    """layer_types as transformers derives them (Gemma2Config, Gemma3TextConfig), which vLLM's
    gemma2.py:155 / gemma3.py:153 read."""
    import transformers
    cls = transformers.Gemma2Config if cfg["model_type"] == "gemma2" else transformers.Gemma3TextConfig
    keep = {k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype", "transformers_version")}
    return cls(**keep).layer_types


def gemma_weights_per_rank(cfg, tp):
    """gemma2.py / gemma3.py composed of vLLM's parallel layers at world size tp: qkv_proj and
    o_proj (bias = attention_bias), the MLP's gate_up_proj and down_proj (no bias), four
    GemmaRMSNorms of hidden per layer (and Gemma 3's q_norm/k_norm of head_dim), the final
    norm, the embedding; Gemma 2 has no lm_head (it computes logits with embed_tokens,
    gemma2.py:374), Gemma 3's ParallelLMHead is tied to it unless tie_word_embeddings is false."""
    d, h, kv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    f, bias = cfg["intermediate_size"], bool(cfg.get("attention_bias"))
    patches = tp_patches(tp)
    for p in patches:
        p.start()
    try:
        with torch.device("meta"):
            dt = torch.bfloat16
            qkv = vlinear.QKVParallelLinear(d, hd, h, kv, bias=bias, params_dtype=dt)
            o = vlinear.RowParallelLinear(h * hd, d, bias=bias, params_dtype=dt)
            mlp = numel(vlinear.MergedColumnParallelLinear(d, [f] * 2, bias=False, params_dtype=dt))
            mlp += numel(vlinear.RowParallelLinear(f, d, bias=False, params_dtype=dt))
            emb = vvocab.VocabParallelEmbedding(cfg["vocab_size"], d, params_dtype=dt)
            tied = cfg["model_type"] == "gemma2" or cfg.get("tie_word_embeddings", True)
            head = 0 if tied else numel(vvocab.ParallelLMHead(cfg["vocab_size"], d, params_dtype=dt))
        norms = 4 * d + (2 * hd if cfg["model_type"] == "gemma3_text" else 0)
        layer = numel(qkv) + numel(o) + mlp + norms
        return cfg["num_hidden_layers"] * layer + numel(emb) + head + d, qkv.num_kv_heads
    finally:
        for p in patches:
            p.stop()


def hybrid_specs(cfg, kv_heads, block, dtype):
    """Attention.get_kv_cache_spec per layer (model_executor/layers/attention/attention.py:624-690):
    full layers FullAttentionSpec(block), sliding ones a SlidingWindowSpec whose block size
    _largest_kernel_block_within picks for FlashAttention (SM 9.0: MultipleOf(16))."""
    from vllm.model_executor.layers.attention.attention import _largest_kernel_block_within
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    hd = cfg["head_dim"]
    specs = {}
    for i, kind in enumerate(hybrid_layer_types(cfg)):
        if kind == "sliding_attention":
            one = FlashAttentionBackend.customize_spec(SlidingWindowSpec(block_size=1, num_kv_heads=kv_heads, head_size=hd, dtype=dtype,
                                                                         sliding_window=cfg["sliding_window"]))
            per_token = one.real_page_size_bytes
            sw_block = _largest_kernel_block_within(FlashAttentionBackend, per_token, per_token * block, block, one)
            spec = SlidingWindowSpec(block_size=sw_block, num_kv_heads=kv_heads, head_size=hd, dtype=dtype, sliding_window=cfg["sliding_window"])
        else:
            spec = FullAttentionSpec(block_size=block, num_kv_heads=kv_heads, head_size=hd, dtype=dtype)
        specs[f"model.layers.{i}.self_attn.attn"] = spec
    return specs


def hybrid_plan(specs, tp, block, max_model_len, batched, available):
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    out = {}
    with mock.patch("vllm.platforms.current_platform.get_kv_cache_config_builder_cls",
                    return_value="vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder", create=True):
        cfg = vllm_config(max_model_len, tp, block, batched)
        groups = planning.get_kv_cache_groups(cfg, dict(specs))
        builder = get_kv_cache_config_builder(cfg)
        out["num_groups"] = len(groups)
        # Each group: its spec's kind (window or full), its layers (by index), its block size.
        out["groups"] = [dict(sliding_window=getattr(g.kv_cache_spec, "sliding_window", None), spec=type(g.kv_cache_spec).__name__,
                              block_size=g.kv_cache_spec.block_size, layers=[int(n.split(".")[2]) for n in g.layer_names]) for g in groups]
        out["page_bytes_per_layer"] = sorted({s.page_size_bytes for s in specs.values()})
        out["bytes_per_block"] = planning._pool_bytes_per_block(cfg, groups)
        out["max_memory_usage_bytes"] = planning._max_memory_usage_bytes_from_groups(builder, cfg, groups)
        try:
            kcs = planning.get_kv_cache_configs(cfg, [dict(specs)] * tp, [available] * tp, groups)
            out["num_blocks"] = kcs[0].num_blocks
            tokens, conc = kvu.get_kv_cache_capacity(cfg, kcs[0])
            out["kv_cache_tokens"] = tokens
            out["max_concurrency"] = conc
            out["max_concurrency_repr"] = repr(conc)
            out["error"] = None
        except ValueError as e:
            out["error"] = str(e)
        cfg = vllm_config(max_model_len, tp, block, batched, original=-1)
        try:
            planning.get_kv_cache_configs(cfg, [dict(specs)] * tp, [available] * tp, groups)
            out["auto_fit_max_model_len"] = cfg.model_config.max_model_len
        except ValueError as e:
            out["auto_fit_max_model_len"] = None
            out["auto_fit_error"] = str(e)
    return out


def hybrid_grid():
    tps = {"Gemma-2-9B": [1, 2, 4, 8], "Gemma-2-27B-shape": [1, 2, 8], "Gemma-3-27B": [1, 2, 4, 8], "Gemma-3-4B-shape": [1, 2, 8],
           "Gemma-3-1B-shape": [1, 2, 4]}
    pts = []
    for i, name, tp, block, kv in sweep(tps, (16, 32, 64)):
        cfg = HYBRID_MODELS[name]
        w = cfg["sliding_window"]
        # Below the window, just above it, and the derived length (above it).
        lens = [w // 2 + 7, w + 300, cfg["max_position_embeddings"]]
        mem = [40 * GIB + 12345, 3 * GIB + 777, GIB // 7, 12 * GIB + 5][i % 4]
        pts.append(point(name, tp, block, kv, lens[(i // 2) % 3], [8192, 2048, 512][i % 3], mem))
    return pts


def main_hybrid():
    out = []
    for p in hybrid_grid():
        cfg = HYBRID_MODELS[p["model"]]
        w, kvh = gemma_weights_per_rank(cfg, p["tensor_parallel_size"])
        dtype = kv_dtype(p)
        row = dict(p, weight_elements_per_rank=w, num_kv_heads_per_rank=kvh)
        specs = hybrid_specs(cfg, kvh, p["block_size"], dtype)
        row.update(hybrid_plan(specs, p["tensor_parallel_size"], p["block_size"], p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]))
        out.append(row)
        print(p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], p["max_model_len"], row["num_groups"],
              row.get("num_blocks"), (row.get("error") or "")[:40], file=sys.stderr)
    write_fixture("--hybrid", "vllm_serve_hybrid.json", HYBRID_MODELS, out)


# --- gpt-oss (`--gpt-oss`): MXFP4 experts re-laid out for the OAI Triton kernels, hybrid KV ---

GPT_OSS_20B = dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, head_dim=64,
                   num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=24, num_local_experts=32, num_experts_per_tok=4,
                   vocab_size=201088, sliding_window=128, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000,
                   attention_bias=True, swiglu_limit=7.0, tie_word_embeddings=False, torch_dtype="bfloat16",
                   quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                                             "model.embed_tokens", "lm_head"]})
GPT_OSS_MODELS = {
    "gpt-oss-20b": GPT_OSS_20B,
    "gpt-oss-120b": dict(GPT_OSS_20B, num_hidden_layers=36, num_local_experts=128),
}


def gpt_oss_experts_bytes(cfg, tp):
    """One layer's experts on one rank as GptOssMxfp4MoEMethod leaves them on SM 9.0 (module
    docstring): {name: (shape, dtype, bytes)}."""
    from vllm.model_executor.layers.fused_moe import config as mcfg
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import RoutingMethodType
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as om
    from vllm.model_executor.layers.quantization import mxfp4 as qm
    from vllm.model_executor.layers.quantization.utils import mxfp4_utils as mu
    from vllm.utils.import_utils import has_triton_kernels
    assert has_triton_kernels()  # vllm/third_party/triton_kernels, vendored in the wheel
    from triton_kernels.tensor_details import layout as tkl
    sm90 = types.SimpleNamespace(is_cuda=lambda: True, is_rocm=lambda: False, is_xpu=lambda: False, is_cpu=lambda: False,
                                 is_device_capability=lambda c: c in (90, (9, 0)), is_device_capability_family=lambda c: c == 90)
    pc = types.SimpleNamespace(enable_expert_parallel=False, all2all_backend="allgather_reducescatter", enable_eplb=False)
    with mock.patch.object(mcfg, "get_tensor_model_parallel_rank", return_value=0):
        par = mcfg.FusedMoEParallelConfig.make(tp, 1, 1, 1, pc)
    e, d = cfg["num_local_experts"], cfg["hidden_size"]
    conf = mcfg.FusedMoEConfig(num_experts=e, experts_per_token=cfg["num_experts_per_tok"], hidden_dim=d,
                               intermediate_size=cfg["intermediate_size"], num_local_experts=e, num_logical_experts=e,
                               activation=MoEActivation.SWIGLUOAI, device="meta", routing_method=RoutingMethodType.Renormalize,
                               moe_parallel_config=par, in_dtype=torch.bfloat16, has_bias=True)
    method = qm.GptOssMxfp4MoEMethod.__new__(qm.GptOssMxfp4MoEMethod)
    method.moe = conf
    # select_mxfp4_moe_backend's pick on SM 9.0 (oracle/mxfp4.py:402-435, 650-760).
    method.mxfp4_backend = om.Mxfp4MoeBackend.TRITON
    hidden, inter = method.maybe_roundup_sizes(d, conf.intermediate_size_per_partition, torch.bfloat16, par)
    layer = torch.nn.Module()
    patches = [mock.patch.object(mu, "current_platform", sm90), mock.patch.object(om, "current_platform", sm90),
               mock.patch.object(tkl, "cuda_capability_geq", lambda a, b=0: (9, 0) >= (a, b)),
               mock.patch.object(tkl, "is_hip_cdna4", lambda: False),
               mock.patch.object(mu, "should_use_gfx1250_mx_scale_swizzle", lambda: False)]
    for p in patches:
        p.start()
    try:
        with torch.device("meta"):
            method.create_weights(layer, num_experts=e, hidden_size=hidden, intermediate_size_per_partition=inter, params_dtype=torch.bfloat16)
        w13, w2, p13, p2, b13, b2 = om.convert_gpt_oss_weight_to_mxfp4_moe_kernel_format(
            om.Mxfp4MoeBackend.TRITON, layer, layer.w13_weight, layer.w2_weight, layer.w13_weight_scale, layer.w2_weight_scale,
            layer.w13_bias, layer.w2_bias)
    finally:
        for p in patches:
            p.stop()
    # The loaded values and scales are gone (oracle/mxfp4.py:1469-1472); the bf16 biases are
    # replaced by their float32 copies (replace_parameter, quantization/mxfp4.py:374-376).
    assert [n for n, _ in layer.named_parameters()] == ["w13_bias", "w2_bias"]
    out = {}
    for name, t in [("w13_weight", w13.storage.data), ("w2_weight", w2.storage.data),
                    ("w13_weight_scale", mu.weight_mx_scale(p13).storage.data), ("w2_weight_scale", mu.weight_mx_scale(p2).storage.data),
                    ("w13_bias", b13), ("w2_bias", b2)]:
        out[name] = dict(shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""), bytes=t.numel() * t.element_size())
    return out, hidden, inter


def gpt_oss_weight_bytes_per_rank(cfg, tp):
    """gpt_oss.py's layers at world size tp: the bf16 ones by element, the experts by
    gpt_oss_experts_bytes; the KV heads per rank."""
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear
    from vllm.model_executor.model_loader.weight_utils import make_attention_sink
    d, h, kv, hd, e = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["num_local_experts"]
    patches = tp_patches(tp)
    for p in patches:
        p.start()
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # vLLM builds the model under the model dtype
    try:
        with torch.device("meta"):
            dt = torch.bfloat16
            qkv = vlinear.QKVParallelLinear(d, hd, h, kv, bias=True, params_dtype=dt)
            o = vlinear.RowParallelLinear(h * hd, d, bias=True, params_dtype=dt)
            sinks = make_attention_sink(h // tp)
            router = GateLinear(d, e, bias=True, return_bias=False)
            emb = vvocab.VocabParallelEmbedding(cfg["vocab_size"], d, params_dtype=dt)
            head = vvocab.ParallelLMHead(cfg["vocab_size"], d, params_dtype=dt)
        bf16 = [numel(qkv), numel(o), sinks.numel(), numel(router), 2 * d]
        assert all(p.dtype == dt for m in (qkv, o, router, emb, head) for p in m.parameters()) and sinks.dtype == dt
    finally:
        torch.set_default_dtype(old)
        for p in patches:
            p.stop()
    experts, hidden, inter = gpt_oss_experts_bytes(cfg, tp)
    layer = 2 * sum(bf16) + sum(x["bytes"] for x in experts.values())
    total = cfg["num_hidden_layers"] * layer + 2 * (numel(emb) + numel(head) + d)
    return total, qkv.num_kv_heads, dict(experts=experts, intermediate_size_per_partition=inter, hidden_size=hidden,
                                         bf16_elements_per_layer=sum(bf16), embedding_elements=numel(emb), lm_head_elements=numel(head))


def gpt_oss_specs(cfg, kv_heads, block, dtype):
    """Even layers slide over sliding_window, odd ones are full (OAIAttention._build_attention,
    gpt_oss.py:175); each spec as `hybrid_specs` makes it (FlashAttention 3 on SM 9.0, which
    takes the sinks)."""
    from vllm.model_executor.layers.attention.attention import _largest_kernel_block_within
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    hd, w = cfg["head_dim"], cfg["sliding_window"]
    specs = {}
    for i in range(cfg["num_hidden_layers"]):
        if i % 2 == 0:
            one = FlashAttentionBackend.customize_spec(SlidingWindowSpec(block_size=1, num_kv_heads=kv_heads, head_size=hd, dtype=dtype, sliding_window=w))
            per_token = one.real_page_size_bytes
            sw_block = _largest_kernel_block_within(FlashAttentionBackend, per_token, per_token * block, block, one)
            spec = SlidingWindowSpec(block_size=sw_block, num_kv_heads=kv_heads, head_size=hd, dtype=dtype, sliding_window=w)
        else:
            spec = FullAttentionSpec(block_size=block, num_kv_heads=kv_heads, head_size=hd, dtype=dtype)
        specs[f"model.layers.{i}.self_attn.attn"] = spec
    return specs


def gpt_oss_grid():
    pts = []
    for i, name, tp, block, kv in sweep({name: [1, 2, 4, 8] for name in GPT_OSS_MODELS}, (16, 32, 64)):
        # Below the window, past it, 32k and the derived 128k; memories from a sliver to a whole
        # H200's.
        lens = [100, 4096 + 17, 32768, 131072]
        mem = [40 * GIB + 12345, 3 * GIB + 777, GIB // 7, 12 * GIB + 5, 100 * GIB + 1][i % 5]
        pts.append(point(name, tp, block, kv, lens[(i // 2) % 4], [8192, 2048, 16384][i % 3], mem))
    return pts


def main_gpt_oss():
    out, weights = [], {}
    for p in gpt_oss_grid():
        cfg, tp = GPT_OSS_MODELS[p["model"]], p["tensor_parallel_size"]
        key = f'{p["model"]}@tp{tp}'
        if key not in weights:
            weights[key] = gpt_oss_weight_bytes_per_rank(cfg, tp)
        w, kvh, parts = weights[key]
        dtype = kv_dtype(p)
        row = dict(p, weight_bytes_per_rank=w, num_kv_heads_per_rank=kvh, weight_parts=parts)
        specs = gpt_oss_specs(cfg, kvh, p["block_size"], dtype)
        row.update(hybrid_plan(specs, tp, p["block_size"], p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]))
        out.append(row)
        print(p["model"], tp, p["block_size"], p["kv_cache_dtype"], p["max_model_len"], w, row["num_groups"], row.get("num_blocks"),
              (row.get("error") or "")[:40], file=sys.stderr)
    notes = ("weight_bytes_per_rank is derived from vLLM 0.33.0's and its vendored triton_kernels' source run on the meta device "
              "(GptOssMxfp4MoEMethod.create_weights at maybe_roundup_sizes' intermediate size for the OAI Triton backend SM 9.0 picks, then "
              "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format(TRITON): HopperMXValueLayout / HopperMXScaleLayout, loaded tensors freed), "
              "tensor bytes without the caching allocator's 512-byte rounding and without buffers (the rotary cos/sin cache), as for the "
              "other serve grids; not measured on a card. The KV cache terms are vLLM's planning code run on CPU.")
    write_fixture("--gpt-oss", "vllm_serve_gpt_oss.json", GPT_OSS_MODELS, out, notes)


# --- OLMo-2 (`--olmo2`): vLLM's Transformers modeling backend ---

OLMO2_7B = {k: v for k, v in load("OLMo-2-1124-7B").items() if k != "transformers_version"}
OLMO2_MODELS = {
    # allenai/OLMo-2-1124-7B's config.json (saved in float32: vLLM's --dtype auto loads bfloat16 from SM 8.0).
    "OLMo-2-1124-7B": OLMO2_7B,
    # allenai/OLMo-2-0325-32B's shape: 40 heads over 8 KV heads.
    "OLMo-2-32B-shape": dict(OLMO2_7B, hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
                             num_key_value_heads=8),
    # A small shape with tied embeddings and a vocabulary vLLM pads (to a multiple of 64).
    "OLMo-2-small-tied-shape": dict(OLMO2_7B, hidden_size=1024, intermediate_size=4096, num_hidden_layers=6, num_attention_heads=16,
                                    num_key_value_heads=4, vocab_size=50280, tie_word_embeddings=True, max_position_embeddings=16384,
                                    torch_dtype="bfloat16", pad_token_id=1, eos_token_id=50279),
}


def olmo2_weights_per_rank(cfg, tp):
    """vLLM's own TransformersForCausalLM (model_executor/models/transformers/) built on the meta
    device at tensor-parallel world size tp (rank 0): transformers' Olmo2Model from the config,
    then vLLM's fusers (q/k/v into a head-sharded QKVParallelLinear, gate/up into a
    MergedColumnParallelLinear, o_proj/down_proj row-parallel, RMSNorms into TPAwareRMSNorm: q_norm
    and k_norm whole over the projection, gathered), the VocabParallelEmbedding and the
    ParallelLMHead (tied: the embedding). What is stubbed: the process groups (world size tp),
    torch.compile's class decoration, CustomOp's kernel dispatch, the logits processor, and the
    Attention class (its kwargs are what the KV cache spec takes). Returns the parameters'
    elements and the attention layers' (head_size, num_kv_heads) per rank."""
    from transformers import Olmo2Config
    from vllm.model_executor.models.transformers import base as tbase
    from vllm.model_executor.models.transformers import causal as tcausal
    from vllm.model_executor.models.transformers import TransformersForCausalLM
    hf = Olmo2Config(**{k: v for k, v in cfg.items() if k not in ("torch_dtype", "architectures")})
    hf.architectures = cfg["architectures"]
    attn = []

    class Attn:
        def __init__(self, **kw):
            attn.append(kw)
    # ModelArchitectureConfig's fields the backend reads (head_dim unset: hidden / heads), and
    # ModelConfig's own per-rank head counts (get_num_attention_heads, get_num_kv_heads) on it.
    from vllm.config.model import ModelConfig
    head_size = hf.hidden_size // hf.num_attention_heads
    arch = types.SimpleNamespace(head_size=head_size, total_num_attention_heads=hf.num_attention_heads,
                                 total_num_kv_heads=hf.num_key_value_heads)

    class ArchCfg:
        def __getitem__(self, i):
            return arch
    mcfg = types.SimpleNamespace(hf_config=hf, dtype=torch.bfloat16, trust_remote_code=False, model="olmo2", use_mla=False,
                                 model_arch_config=ArchCfg(), get_head_size=lambda: head_size,
                                 max_model_len=cfg["max_position_embeddings"])
    mcfg.get_num_attention_heads = lambda pc, a=None: ModelConfig.get_num_attention_heads(mcfg, pc, a)
    mcfg.get_num_kv_heads = lambda pc, a=None: ModelConfig.get_num_kv_heads(mcfg, pc, a)
    par = types.SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1, enable_expert_parallel=False)
    vc = types.SimpleNamespace(model_config=mcfg, cache_config=None, compilation_config=None, quant_config=None, parallel_config=par,
                               device_config=types.SimpleNamespace(device=torch.device("meta")))
    group = types.SimpleNamespace(world_size=tp, rank_in_group=0, is_first_rank=True, is_last_rank=True)
    pp = types.SimpleNamespace(world_size=1, rank_in_group=0, is_first_rank=True, is_last_rank=True)
    patches = tp_patches(tp) + [
        mock.patch.object(tbase, "get_tp_group", return_value=group),
        mock.patch.object(tbase, "get_pp_group", return_value=pp),
        mock.patch.object(tbase.Base, "_decorate_for_torch_compile", lambda self: None),
        mock.patch.object(tbase.Base, "_get_attn_cls", lambda self: Attn),
        mock.patch("vllm.model_executor.custom_op.CustomOp.dispatch_forward", lambda self, **k: None),
        mock.patch.object(tcausal, "LogitsProcessor", lambda *a, **k: None),
    ]
    for p in patches:
        p.start()
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # vLLM builds the model under the model dtype
    try:
        with torch.device("meta"):
            model = TransformersForCausalLM(vllm_config=vc)
    finally:
        torch.set_default_dtype(old)
        for p in patches:
            p.stop()
    params = dict(model.named_parameters())
    assert all(p.dtype == torch.bfloat16 for p in params.values())
    assert "model.layers.0.self_attn.qkv_proj.weight" in params and "model.layers.0.mlp.gate_up_proj.weight" in params, sorted(params)[:12]
    assert len(attn) == cfg["num_hidden_layers"] and len({(a["head_size"], a["num_kv_heads"]) for a in attn}) == 1
    layer0 = {k.removeprefix("model.layers.0."): list(v.shape) for k, v in params.items() if k.startswith("model.layers.0.")}
    return sum(p.numel() for p in params.values()), attn[0]["head_size"], attn[0]["num_kv_heads"], layer0


def olmo2_grid():
    tps = {"OLMo-2-1124-7B": [1, 2, 4, 8], "OLMo-2-32B-shape": [1, 2, 4, 8], "OLMo-2-small-tied-shape": [1, 2, 4]}
    pts = []
    for i, name, tp, block, kv in sweep(tps):
        lens = [1000, 2048 + 5, OLMO2_MODELS[name]["max_position_embeddings"]]
        mem = [40 * GIB + 12345, 3 * GIB + 777, GIB // 7, 12 * GIB + 5][i % 4]
        pts.append(point(name, tp, block, kv, lens[(i // 2) % 3], [8192, 2048, 512][i % 3], mem))
    return pts


def main_olmo2():
    out, built = [], {}
    for p in olmo2_grid():
        cfg, tp = OLMO2_MODELS[p["model"]], p["tensor_parallel_size"]
        key = (p["model"], tp)
        if key not in built:
            built[key] = olmo2_weights_per_rank(cfg, tp)
        w, hd, kvh, layer0 = built[key]
        m = dict(layers=cfg["num_hidden_layers"], hd=hd, sliding=None)
        dtype = kv_dtype(p)
        row = dict(p, weight_elements_per_rank=w, num_kv_heads_per_rank=kvh, head_size=hd, layer0_shapes=layer0)
        row.update(plan(m, kvh, tp, p["block_size"], dtype, p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]))
        out.append(row)
        print(p["model"], tp, p["block_size"], p["kv_cache_dtype"], p["max_model_len"], w, kvh, row.get("num_blocks"),
              (row.get("error") or "")[:40], file=sys.stderr)
    notes = ("weight_elements_per_rank: the parameters of vLLM 0.33.0's TransformersForCausalLM (its Transformers modeling backend, "
              "which serves Olmo2ForCausalLM) built on the meta device at the point's TP world size (rank 0), in the load dtype "
              "(bfloat16); buffers (the rotary inv_freq) left out as in the other serve grids. The KV cache terms are vLLM's planning "
              "code run on CPU over one FullAttentionSpec per layer of the Attention kwargs the backend passes.")
    write_fixture("--olmo2", "vllm_serve_olmo2.json", OLMO2_MODELS, out, notes)


# --- MoE configs with a sliding window (`--moe-sliding`: tests/fixtures/vllm_serve_moe_sliding.json) ---

MOE_SLIDING_MODELS = {
    # Mixtral-8x7B-v0.1's first config.json (sliding_window 4096): MixtralConfig has no layer_types.
    "Mixtral-8x7B-sliding-4096": dict(MIXTRAL, sliding_window=4096),
    # Qwen3-30B-A3B with use_sliding_window: Qwen3MoeConfig keeps the window, no layer_types.
    "Qwen3-30B-A3B-sliding": dict(QWEN3_MOE, use_sliding_window=True, sliding_window=4096),
    # Qwen1.5-MoE-A2.7B with use_sliding_window: Qwen2MoeConfig's layer_types mix sliding (even,
    # below max_window_layers) and full layers.
    "Qwen1.5-MoE-A2.7B-sliding-mixed": dict(QWEN2_MOE, use_sliding_window=True, sliding_window=1024),
    # ... and with layer_types all "sliding_attention".
    "Qwen1.5-MoE-A2.7B-sliding-all": dict(QWEN2_MOE, use_sliding_window=True, sliding_window=1024,
                                          layer_types=["sliding_attention"] * QWEN2_MOE["num_hidden_layers"]),
}


def vllm_cache_sliding_window(cfg):
    """CacheConfig.sliding_window as vLLM 0.33.0 sets it from transformers' config class: a
    window of 0 is none (ModelConfig.__post_init__, config/model.py:815-821), and the window is
    kept only when the config has no layer_types or every layer is "sliding_attention"
    (EngineArgs.create_engine_config, engine/arg_utils.py:2288-2294). mixtral.py, qwen3_moe.py
    and qwen2_moe.py pass no per-layer window to Attention, so every layer takes this one
    (model_executor/layers/attention/attention.py:266-273) or none."""
    from transformers import AutoConfig
    hf = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    window = getattr(hf, "sliding_window", None)
    if window == 0:
        window = None
    layer_types = getattr(hf, "layer_types", None)
    if layer_types is None or all(t == "sliding_attention" for t in layer_types):
        return window, layer_types
    return None, layer_types


def moe_sliding_grid():
    tps = {"Mixtral-8x7B-sliding-4096": [1, 2, 4], "Qwen3-30B-A3B-sliding": [1, 2, 4], "Qwen1.5-MoE-A2.7B-sliding-mixed": [1, 2],
           "Qwen1.5-MoE-A2.7B-sliding-all": [1, 4]}
    pts = []
    for i, name, tp, block, kv in sweep(tps):
        w = MOE_SLIDING_MODELS[name]["sliding_window"]
        lens = [w // 2 + 3, w + 300, MOE_SLIDING_MODELS[name]["max_position_embeddings"]]
        mem = [40 * GIB + 12345, 3 * GIB + 777, GIB // 7, 12 * GIB + 5][i % 4]
        pts.append(point(name, tp, block, kv, lens[(i // 2) % 3], [8192, 2048, 512][i % 3], mem))
    return pts


def main_moe_sliding():
    out = []
    for p in moe_sliding_grid():
        cfg = MOE_SLIDING_MODELS[p["model"]]
        m = model_shape(cfg)
        window, layer_types = vllm_cache_sliding_window(cfg)
        m["sliding"] = window
        w, kvh = weights_per_rank(m, p["tensor_parallel_size"])
        dtype = kv_dtype(p)
        row = dict(p, weight_elements_per_rank=w, num_kv_heads_per_rank=kvh, cache_sliding_window=window,
                   sliding_layers=None if layer_types is None else sum(t == "sliding_attention" for t in layer_types))
        row.update(plan(m, kvh, p["tensor_parallel_size"], p["block_size"], dtype, p["max_model_len"], p["max_num_batched_tokens"],
                        p["available_memory"]))
        out.append(row)
        print(p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], p["max_model_len"], window, row.get("num_blocks"),
              (row.get("error") or "")[:40], file=sys.stderr)
    write_fixture("--moe-sliding", "vllm_serve_moe_sliding.json", MOE_SLIDING_MODELS, out)


if __name__ == "__main__":
    if "--moe-sliding" in sys.argv[1:]:
        main_moe_sliding()
    elif "--olmo2" in sys.argv[1:]:
        main_olmo2()
    elif "--gpt-oss" in sys.argv[1:]:
        main_gpt_oss()
    elif "--hybrid" in sys.argv[1:]:
        main_hybrid()
    else:
        main()
