#!/usr/bin/env python3
"""make_generate_grid.py -- the fixture grid of `--profile-type generate` (issue #28): what
transformers' greedy `generate()` allocates with the default DynamicCache, per phase (data,
prefill, decode_1 .. decode_{N-1}), measured by measure_generate.py (mode-free, one
torch.profiler session per point, requested bytes of blocks >= 512 B, absolute), written to
tests/fixtures/pytorch_grid/generate.json.

The grid: each model_type (llama, mistral, qwen2, qwen3) x weights fp32|bf16 x attn sdpa|eager
(sdpa on half of them), on shapes that vary per point: batch 1-4, prompt 8-300 tokens,
max_new_tokens 1-16, GQA ratios 1-4, vocabularies whose logits rows are not multiples of 512 B.

    python3 make_generate_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_generate_grid.py --quick    # the first point of each model type only
    python3 make_generate_grid.py --qlora    # generate_qlora.json: 4-bit weights and LoRA adapters
    python3 make_generate_grid.py --options  # generate_options.json: static cache, sampling, min_new_tokens
    python3 make_generate_grid.py --beams    # generate_beams.json: beam search, num_beams 2-4
    python3 make_generate_grid.py --families # generate_families.json: phi3 and olmo2 (issue #30)
    python3 make_generate_grid.py --moe      # generate_moe.json: mixtral, qwen3_moe, qwen2_moe (issue #30)
    python3 make_generate_grid.py --gemma    # generate_gemma.json: gemma2, gemma3_text (issue #30)
    python3 make_generate_grid.py --sliding  # generate_sliding.json: mistral past its sliding window
    python3 make_generate_grid.py --gpt-oss  # generate_gpt_oss.json: gpt_oss (issue #30)
    python3 make_generate_grid.py --static-sliding  # generate_static_sliding.json: StaticCache with a window
    python3 make_generate_grid.py --static-families  # generate_static_families.json: StaticCache on phi3, qwen3, mixtral, qwen3_moe, deepseek_v3
    python3 make_generate_grid.py --static-mixed  # generate_static_mixed.json: StaticCache on qwen2/qwen3 with full and sliding layers
    python3 make_generate_grid.py --deepseek # generate_deepseek.json: deepseek_v3's DynamicCache of MLA latents
    python3 make_generate_grid.py --qwen2-moe-sliding  # generate_qwen2_moe_sliding.json: qwen2_moe with use_sliding_window
    python3 make_generate_grid.py --adapters-models  # generate_models_adapters.json: LoRA / 4-bit on issue 30's nine models
    python3 make_generate_grid.py --adapters-extras  # generate_models_extras.json: lora bias, DoRA, modules_to_save on them
    python3 make_generate_grid.py --adapters-int8  # generate_models_int8.json: 8-bit weights, prepare_model_for_kbit_training on them
    python3 make_generate_grid.py --dense-extras  # generate_dense_extras.json: lora bias, DoRA, modules_to_save, 8-bit on llama, mistral, qwen2, qwen3

The --static-sliding grid (issue #30): cache_implementation="static" on gemma2, gemma3_text,
gpt_oss, mistral and qwen2 (use_sliding_window, every layer sliding), 13 points each (STATIC_RUNS):
the window below the prompt, crossed while decoding, at the prompt and above everything; run
under PYTHONHASHSEED=0 (the script re-executes itself) so that create_masks_for_generate's
set(layer_types) builds the full mask first. The --deepseek grid: DeepSeek-V3 through generate()
with the DynamicCache, make_deepseek_grid.py's rows with FAMILY_RUNS' prompts and options.

The --families and --moe grids (issue #30): per model type 12 points over greedy, sampling
(num_return_sequences too), beams 2-3, the DynamicCache and a StaticCache, batch 1-3, prompts
8-64 tokens, max_new_tokens 1-8, sdpa and eager, fp32 and bf16. The MoE points force the
routing as measure_moe.py does, for each forward's token count (rows x S in the prefill, one
per row in a decode step: measure_generate.install_generate_routing), over the three experts
implementations, balanced and worst.

The --gemma grid (issue 30): Gemma 2 and Gemma 3 text with alternating sliding and full layers
(make_family_grid.gemma_point's config: tied head, query_pre_attn_scalar 24, Gemma 2's
soft-capping), the default DynamicCache (a DynamicSlidingWindowLayer per sliding layer) and a
StaticCache (StaticSlidingWindowLayer), the window below the prompt, inside the decode steps
(crossed while generating), at the prompt and above everything, greedy, sampling, beams 2-3,
batch 1-3, fp32/bf16, eager (Gemma 2 has no sdpa) and sdpa (Gemma 3).

The --sliding grid: Mistral (and four Phi-3 and four Mixtral points) whose sliding window the prompt and new tokens pass (below the
prompt, crossed while decoding, at the prompt), the DynamicCache's DynamicSlidingWindowLayers,
greedy, sampling (num_return_sequences too), beams 2-3, batch 1-3, sdpa and eager, fp32 and bf16.

The --qlora grid (issue #28's leftovers): each model_type x {4-bit without adapters, 4-bit + LoRA
q,v, 4-bit + LoRA all-linear (twice: nf4/fp4, double quantization on/off, compute bf16/fp32),
bf16 weights + LoRA}, r 8-32, batch 1-3, prompts 5-96 tokens, max_new_tokens 1-8; then one point
with prepare_model_for_kbit_training (what a user who reuses the training script's setup runs).
The 4-bit models are saved and reloaded by from_pretrained (measure_hf.load_4bit), adapters are
get_peft_model's (unmerged), the model in eval mode, bitsandbytes' CPU gemm_4bit (dequantize +
F.linear at every M).
Needs the pinned torch 2.15.0 + transformers 5.23.0.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import make_hf_grid as G
import measure_generate as MG
import measure_hf as H

OUT = os.path.join(HERE, "../../tests/fixtures/pytorch_grid")

# (hidden, intermediate, layers, heads, kv_heads, head_dim or None, vocab, S, B, N)
SHAPES = [
    (128, 384, 2, 4, 2, None, 1000, 64, 2, 4),
    (96, 256, 1, 6, 3, None, 777, 8, 1, 16),
    (64, 192, 3, 4, 4, None, 2048, 300, 1, 3),
    (128, 320, 2, 8, 2, None, 1000, 16, 4, 8),
    (160, 448, 2, 5, 1, None, 512, 40, 3, 1),
    (64, 128, 2, 4, 2, 32, 777, 120, 2, 6),
]


def point(mt, i, **opts):
    h, f, L, nh, kv, hd, V, S, B, N = SHAPES[i % len(SHAPES)]
    if hd and mt != "qwen3":
        hd = None
    p = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
             head_dim=hd, vocab_size=V, max_position_embeddings=4096, tied=False, seq=S, batch=B, max_new_tokens=N,
             attn="sdpa", dtype="fp32")
    p.update(opts)
    return p


# (hidden, intermediate, layers, heads, kv_heads, head_dim or None, vocab, S, B, N)
QSHAPES = [
    (128, 384, 2, 4, 2, None, 1000, 24, 2, 4),
    (128, 256, 1, 4, 4, None, 777, 96, 1, 6),
    (192, 512, 2, 6, 2, None, 1000, 5, 3, 8),
    (128, 320, 2, 8, 2, None, 512, 40, 1, 1),
    (128, 192, 2, 4, 2, 64, 777, 17, 3, 3),
]
# (load_in_4bit, quant_type, double_quant, compute_dtype, lora_r, target_modules)
QVARIANTS = [
    (True, "nf4", True, "bf16", None, None),
    (True, "fp4", False, "bf16", 8, "q_proj,v_proj"),
    (True, "nf4", False, "bf16", 16, "all-linear"),
    (True, "fp4", True, "fp32", 32, "all-linear"),
    (False, None, None, None, 16, "all-linear"),
]


def qpoint(mt, i, v):
    bits, qt, dq, compute, r, targets = QVARIANTS[v]
    h, f, L, nh, kv, hd, V, S, B, N = QSHAPES[i % len(QSHAPES)]
    if hd and mt != "qwen3":
        hd = None
    p = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
             head_dim=hd, vocab_size=V, max_position_embeddings=4096, tied=False, seq=S, batch=B, max_new_tokens=N,
             attn="sdpa" if (i + v) % 3 else "eager", dtype="bf16")
    if r:
        p.update(lora_r=r, lora_alpha=2 * r if r < 32 else r, lora_dropout=0.0, target_modules=targets)
    if bits:
        p.update(load_in_4bit=True, quant_type=qt, double_quant=dq, compute_dtype=compute, prepare=False, checkpoint="none")
    return p


def qgrid(quick=False):
    todo = []
    for t, mt in enumerate(H.MODEL_TYPES):
        for v in range(len(QVARIANTS)):
            if quick and v > 0:
                continue
            p = qpoint(mt, t + v, v)
            if v == 4 and t % 2:
                p.update(lora_r=8, lora_alpha=16, target_modules="q_proj,v_proj")
            todo.append(p)
    if not quick:
        p = qpoint("llama", 1, 2)
        p["prepare"] = True
        todo.append(p)
    return todo


# generate()'s options (issue #28 item 1): (model_type, shape index, attn, dtype, options).
OPTIONS = [
    # StaticCache (disable_compile=True), greedy
    ("llama", 0, "sdpa", "fp32", dict(cache="static")),
    ("mistral", 1, "sdpa", "bf16", dict(cache="static")),
    ("qwen2", 2, "eager", "fp32", dict(cache="static")),
    ("qwen3", 3, "eager", "bf16", dict(cache="static")),
    ("llama", 5, "eager", "fp32", dict(cache="static", max_new_tokens=32)),
    ("mistral", 3, "sdpa", "fp32", dict(cache="static")),
    ("qwen2", 4, "sdpa", "bf16", dict(cache="static")),
    ("qwen3", 5, "sdpa", "fp32", dict(cache="static")),
    ("llama", 2, "sdpa", "bf16", dict(cache="static", batch=4, seq=100)),
    ("mistral", 0, "eager", "bf16", dict(cache="static", seq=8, max_new_tokens=64)),
    # sampling: GenerationConfig's defaults (top_k 50), temperature, top_k
    ("llama", 1, "sdpa", "fp32", dict(do_sample=True)),
    ("mistral", 2, "eager", "bf16", dict(do_sample=True, temperature=0.7)),
    ("qwen2", 3, "sdpa", "fp32", dict(do_sample=True, top_k=20, temperature=1.3)),
    ("qwen3", 0, "eager", "fp32", dict(do_sample=True, top_k=0)),
    ("llama", 4, "sdpa", "bf16", dict(do_sample=True, cache="static")),
    ("qwen2", 5, "eager", "bf16", dict(do_sample=True, cache="static", temperature=0.5, top_k=7)),
    ("mistral", 4, "sdpa", "fp32", dict(do_sample=True, top_k=600)),
    ("qwen3", 1, "sdpa", "bf16", dict(do_sample=True, batch=4)),
    # min_new_tokens (llama/mistral configs have eos 2; qwen's have none: no processor)
    ("llama", 3, "eager", "fp32", dict(min_new_tokens=3)),
    ("mistral", 5, "sdpa", "bf16", dict(min_new_tokens=6)),
    ("llama", 0, "sdpa", "bf16", dict(min_new_tokens=2, do_sample=True)),
    ("mistral", 1, "eager", "fp32", dict(min_new_tokens=16, cache="static")),
    ("qwen2", 1, "sdpa", "fp32", dict(min_new_tokens=4)),
    ("llama", 2, "eager", "bf16", dict(min_new_tokens=1, do_sample=True, temperature=0.9, cache="static")),
    # num_return_sequences (sampling): the batch repeated before the prefill
    ("llama", 3, "sdpa", "fp32", dict(do_sample=True, num_return_sequences=2)),
    ("mistral", 0, "eager", "bf16", dict(do_sample=True, num_return_sequences=3, cache="static")),
    ("qwen2", 1, "sdpa", "bf16", dict(do_sample=True, num_return_sequences=4, top_k=5)),
    ("qwen3", 5, "eager", "fp32", dict(do_sample=True, num_return_sequences=2, min_new_tokens=2, batch=3)),
    # over 4-bit weights with LoRA adapters, and bf16 weights with adapters
    ("llama", 0, "sdpa", "bf16", dict(cache="static", load_in_4bit=True, quant_type="nf4", double_quant=True,
                                      compute_dtype="bf16", prepare=False, checkpoint="none", lora_r=8, lora_alpha=16,
                                      lora_dropout=0.0, target_modules="q_proj,v_proj")),
    ("qwen2", 3, "eager", "bf16", dict(cache="static", do_sample=True, lora_r=16, lora_alpha=32, lora_dropout=0.0,
                                       target_modules="all-linear")),
]


# beam search (issue #28 item 1): (model_type, shape index, attn, dtype, options); num_beams
# 2-4, num_return_sequences 1..beams (a copy of the best beams when they are not all of them
# and the batch has several prompts), DynamicCache and StaticCache, min_new_tokens.
BEAMS = [
    ("llama", 0, "sdpa", "fp32", dict(num_beams=2)),
    ("mistral", 1, "sdpa", "bf16", dict(num_beams=3)),
    ("qwen2", 2, "eager", "fp32", dict(num_beams=4)),
    ("qwen3", 3, "eager", "bf16", dict(num_beams=2)),
    ("llama", 4, "sdpa", "bf16", dict(num_beams=3)),
    ("mistral", 5, "eager", "fp32", dict(num_beams=4)),
    ("qwen2", 0, "sdpa", "bf16", dict(num_beams=2, num_return_sequences=2)),
    ("qwen3", 1, "sdpa", "fp32", dict(num_beams=4, num_return_sequences=2, batch=3)),
    ("llama", 2, "eager", "bf16", dict(num_beams=3, num_return_sequences=3, batch=2, seq=40)),
    ("mistral", 3, "sdpa", "fp32", dict(num_beams=4, num_return_sequences=3)),
    ("llama", 5, "sdpa", "fp32", dict(num_beams=2, batch=1, seq=8, max_new_tokens=64)),
    ("qwen2", 4, "eager", "fp32", dict(num_beams=4, num_return_sequences=4)),
    ("qwen3", 0, "sdpa", "fp32", dict(num_beams=4, batch=4, max_new_tokens=12)),
    ("qwen2", 5, "sdpa", "fp32", dict(num_beams=2, max_new_tokens=32, num_return_sequences=2)),
    ("mistral", 4, "sdpa", "bf16", dict(num_beams=2, batch=4, seq=24, max_new_tokens=10)),
    ("llama", 0, "eager", "fp32", dict(num_beams=4, batch=3, seq=30, max_new_tokens=20, num_return_sequences=2)),
    # StaticCache: reorder_cache index_selects the whole max_cache_len buffers
    ("llama", 1, "sdpa", "fp32", dict(num_beams=2, cache="static")),
    ("mistral", 0, "eager", "bf16", dict(num_beams=3, cache="static", num_return_sequences=2)),
    ("qwen2", 3, "sdpa", "bf16", dict(num_beams=4, cache="static")),
    ("qwen3", 5, "eager", "fp32", dict(num_beams=3, cache="static", num_return_sequences=2)),
    # min_new_tokens: the processors on the log-probabilities
    ("llama", 3, "sdpa", "bf16", dict(num_beams=2, min_new_tokens=4)),
    ("mistral", 2, "eager", "fp32", dict(num_beams=3, min_new_tokens=2)),
    # beam sampling (do_sample with num_beams > 1): the warpers on the log-probabilities
    # (TopK keeps at least n_eos + 1 tokens), multinomial without replacement of 2 x beams
    # candidates over the (B, beams x V) softmax
    ("llama", 0, "sdpa", "fp32", dict(num_beams=2, do_sample=True)),
    ("mistral", 1, "eager", "bf16", dict(num_beams=3, do_sample=True, temperature=0.7)),
    ("qwen2", 3, "sdpa", "fp32", dict(num_beams=4, do_sample=True, top_k=1, num_return_sequences=2)),
    ("qwen3", 5, "sdpa", "bf16", dict(num_beams=2, do_sample=True, top_k=0, cache="static")),
    ("llama", 2, "eager", "bf16", dict(num_beams=3, do_sample=True, top_k=20, temperature=1.3, num_return_sequences=3)),
    ("qwen2", 1, "sdpa", "fp32", dict(num_beams=4, do_sample=True, batch=2)),
]


# (hidden, intermediate, layers, heads, kv_heads, head_dim or None, vocab, S, B, N)
FSHAPES = [
    (128, 384, 2, 4, 2, None, 1000, 24, 2, 4),
    (96, 256, 1, 6, 3, None, 777, 8, 1, 8),
    (64, 192, 2, 4, 4, None, 640, 64, 1, 3),
    (128, 320, 2, 8, 2, None, 1000, 16, 3, 5),
    (160, 448, 1, 5, 1, None, 512, 40, 2, 1),
    (64, 128, 2, 4, 2, None, 777, 33, 2, 6),
]
# (shape index, attn, dtype, options) for each family.
FAMILY_RUNS = [
    (0, "sdpa", "fp32", {}),
    (1, "eager", "bf16", {}),
    (2, "sdpa", "bf16", {}),
    (3, "eager", "fp32", {}),
    (4, "sdpa", "fp32", dict(cache="static")),
    (5, "eager", "bf16", dict(cache="static")),
    (0, "eager", "fp32", dict(do_sample=True)),
    (1, "sdpa", "bf16", dict(do_sample=True, top_k=20, temperature=0.7, num_return_sequences=2)),
    (2, "sdpa", "fp32", dict(num_beams=2)),
    (3, "eager", "bf16", dict(num_beams=3, num_return_sequences=2)),
    (5, "sdpa", "fp32", dict(num_beams=2, cache="static")),
    (4, "eager", "bf16", dict(min_new_tokens=1, do_sample=True, cache="static")),
]


def fpoint(mt, i, attn, dtype, opts):
    h, f, L, nh, kv, hd, V, S, B, N = FSHAPES[i]
    p = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
             head_dim=hd, vocab_size=V, max_position_embeddings=4096, tied=False, seq=S, batch=B, max_new_tokens=N,
             attn=attn, dtype=dtype)
    p.update(opts)
    return p


def fgrid(quick=False):
    runs = FAMILY_RUNS[:2] if quick else FAMILY_RUNS
    return [fpoint(mt, i, attn, dtype, opts) for mt in ("phi3", "olmo2") for i, attn, dtype, opts in runs]


# The MoE points: (shape index, experts, top_k, experts_implementation, routing, shared width)
# beside FAMILY_RUNS' attention, dtype and options (per-expert intermediate = the shape's / 2).
MOE_RUNS = [
    (4, 2, "grouped_mm", "balanced"),
    (8, 1, "eager", "worst"),
    (6, 3, "batched_mm", "balanced"),
    (16, 4, "grouped_mm", "worst"),
    (5, 2, "eager", "balanced"),
    (12, 2, "batched_mm", "worst"),
    (8, 2, "grouped_mm", "worst"),
    (4, 1, "eager", "balanced"),
    (6, 2, "batched_mm", "worst"),
    (10, 3, "grouped_mm", "balanced"),
    (4, 2, "eager", "worst"),
    (8, 4, "grouped_mm", "balanced"),
]


def mpoint(mt, r):
    i, attn, dtype, opts = FAMILY_RUNS[r]
    p = fpoint(mt, i, attn, dtype, opts)
    E, k, impl, routing = MOE_RUNS[r]
    p.update(intermediate_size=p["intermediate_size"] // 4, num_experts=E, top_k=k, experts=impl, routing=routing)
    if mt == "qwen3_moe":
        p["head_dim"] = 32
    if mt == "qwen2_moe":
        p["shared_intermediate_size"] = (48, 96, 64, 128)[r % 4]
    return p


# Gemma points: (shape index, attn, dtype, window, options). window: "below" (S // 2), "cross"
# (S + N // 2, crossed by the decode steps), "at" (S), "above" (S + N + 4).
GEMMA_RUNS = [
    (0, "eager", "fp32", "below", {}),
    (1, "sdpa", "bf16", "cross", {}),
    (2, "eager", "bf16", "above", {}),
    (3, "sdpa", "fp32", "cross", {}),
    (5, "eager", "fp32", "at", {}),
    (0, "sdpa", "bf16", "below", dict(max_new_tokens=12)),
    (4, "eager", "fp32", "below", dict(cache="static")),
    (5, "sdpa", "bf16", "cross", dict(cache="static")),
    (3, "eager", "bf16", "cross", dict(cache="static")),
    (0, "eager", "fp32", "cross", dict(do_sample=True)),
    (1, "sdpa", "bf16", "below", dict(do_sample=True, top_k=20, temperature=0.7, num_return_sequences=2)),
    (2, "sdpa", "fp32", "cross", dict(num_beams=2)),
    (3, "eager", "bf16", "below", dict(num_beams=3, num_return_sequences=2)),
    (5, "sdpa", "fp32", "below", dict(num_beams=2, cache="static")),
    (4, "eager", "bf16", "cross", dict(min_new_tokens=1, do_sample=True, cache="static")),
    (5, "sdpa", "bf16", "cross", {}),
    (1, "eager", "fp32", "above", dict(do_sample=True, batch=3)),
    (0, "sdpa", "fp32", "below", dict(num_beams=2)),
]


def gpoint(mt, r):
    import make_family_grid as FG
    i, attn, dtype, window, opts = GEMMA_RUNS[r]
    p = fpoint(mt, i, attn, dtype, opts)
    S, N = p["seq"], p["max_new_tokens"]
    L = max(p["num_layers"], 2)
    p.update(num_layers=L, tied=True, head_dim=None,
             sliding_window={"below": S // 2, "cross": S + max(N // 2, 1), "at": S, "above": S + N + 4}[window],
             layer_types=["sliding_attention" if (j + 1) % 2 else "full_attention" for j in range(L)],
             query_pre_attn_scalar=24)
    if mt == "gemma2":
        # Gemma 2 has no sdpa in transformers 5.23 (_supports_sdpa = False).
        p.update(attn="eager", attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    return p


def ggrid(quick=False):
    return [gpoint(mt, r) for mt in ("gemma2", "gemma3_text") for r in range(2 if quick else len(GEMMA_RUNS))]


# gpt-oss points (eager only: _supports_sdpa = False): (FAMILY_RUNS row, window, experts,
# top_k, experts_implementation, routing); the config's alternating layer_types (sliding first).
OSS_RUNS = [
    (0, "below", 4, 2, "grouped_mm", "balanced"),
    (1, "cross", 8, 1, "eager", "worst"),
    (2, "above", 6, 3, "batched_mm", "balanced"),
    (3, "cross", 16, 4, "grouped_mm", "worst"),
    (5, "below", 5, 2, "eager", "balanced"),
    (6, "cross", 12, 2, "batched_mm", "worst"),
    (7, "below", 8, 2, "grouped_mm", "worst"),
    (8, "cross", 4, 1, "eager", "balanced"),
    (9, "below", 6, 2, "batched_mm", "worst"),
    (0, "cross", 10, 3, "grouped_mm", "balanced"),
    (3, "at", 4, 2, "eager", "worst"),
    (1, "below", 8, 4, "grouped_mm", "balanced"),
]


def opoint(r):
    row, window, E, k, impl, routing = OSS_RUNS[r]
    i, _, dtype, opts = FAMILY_RUNS[row]
    p = fpoint("gpt_oss", i, "eager", dtype, opts)
    S, N = p["seq"], p["max_new_tokens"]
    p.update(intermediate_size=p["intermediate_size"] // 4, num_experts=E, top_k=k, experts=impl, routing=routing,
             head_dim=16, num_layers=max(p["num_layers"], 2),
             sliding_window={"below": S // 2, "cross": S + max(N // 2, 1), "at": S, "above": S + N + 4}[window])
    return p


def oggrid(quick=False):
    return [opoint(r) for r in range(2 if quick else len(OSS_RUNS))]


# Mistral with a sliding window shorter than what generate() reaches (DynamicCache: a
# DynamicSlidingWindowLayer per layer): (SHAPES row, attn, dtype, window, options).
SLIDING_RUNS = [
    (0, "sdpa", "fp32", "below", {}),
    (1, "eager", "fp32", "cross", {}),
    (3, "sdpa", "bf16", "cross", {}),
    (5, "eager", "bf16", "below", {}),
    (0, "eager", "fp32", "cross", dict(do_sample=True)),
    (3, "sdpa", "fp32", "below", dict(num_beams=2, batch=1)),
    (1, "sdpa", "bf16", "cross", dict(num_beams=3)),
    (5, "sdpa", "fp32", "cross", dict(do_sample=True, num_return_sequences=2, batch=1)),
    (4, "eager", "fp32", "below", dict(batch=3)),
    (2, "sdpa", "bf16", "below", {}),
    (0, "sdpa", "bf16", "at", dict(batch=3)),
    (3, "eager", "bf16", "below", dict(num_beams=2, batch=2)),
    # Phi-3 (its config's sliding_window, every layer): the same cache layers.
    (0, "sdpa", "fp32", "below", dict(model_type="phi3")),
    (1, "eager", "bf16", "cross", dict(model_type="phi3", do_sample=True)),
    (3, "sdpa", "bf16", "cross", dict(model_type="phi3", num_beams=2, batch=1)),
    (5, "eager", "fp32", "below", dict(model_type="phi3", batch=3)),
    # Mixtral (sliding_window set: every layer, as Mistral), routing forced as --moe (SLIDING_MOE).
    (0, "sdpa", "fp32", "below", dict(model_type="mixtral")),
    (1, "eager", "bf16", "cross", dict(model_type="mixtral", do_sample=True)),
    (3, "sdpa", "bf16", "cross", dict(model_type="mixtral", num_beams=2, batch=1)),
    (5, "eager", "fp32", "below", dict(model_type="mixtral", batch=3)),
]
# Mixtral's experts on its SLIDING_RUNS rows, in order: (experts, top_k, experts_implementation, routing).
SLIDING_MOE = [(4, 2, "grouped_mm", "balanced"), (8, 2, "eager", "worst"), (6, 3, "batched_mm", "balanced"),
               (5, 2, "eager", "worst")]


def wpoint(r):
    i, attn, dtype, window, opts = SLIDING_RUNS[r]
    opts = dict(opts)
    p = point(opts.pop("model_type", "mistral"), i, attn=attn, dtype=dtype, **opts)
    S, N = p["seq"], p["max_new_tokens"]
    p["sliding_window"] = {"below": S // 2, "cross": S + max(N // 2, 1), "at": S}[window]
    if p["model_type"] == "mixtral":
        E, k, impl, routing = SLIDING_MOE[sum(1 for q in SLIDING_RUNS[:r] if q[4].get("model_type") == "mixtral")]
        p.update(intermediate_size=p["intermediate_size"] // 4, num_experts=E, top_k=k, experts=impl, routing=routing)
    return p


def wgrid(quick=False):
    return [wpoint(r) for r in range(2 if quick else len(SLIDING_RUNS))]


# StaticCache (disable_compile=True) on models with a sliding window: StaticSlidingWindowLayer
# (min(window, max_cache_len) positions, index_copy_ until full, then roll/cat and copy_ back)
# beside StaticLayer on the full layers, and create_masks_for_generate's mask per layer type.
# (shape index, attn, dtype, window, options); every point cache="static". gpt-oss runs eager
# (no sdpa); Gemma 2 too.
STATIC_RUNS = [
    (0, "eager", "fp32", "below", {}),
    (1, "sdpa", "bf16", "cross", {}),
    (2, "eager", "bf16", "above", {}),
    (3, "sdpa", "fp32", "cross", {}),
    (5, "eager", "fp32", "at", {}),
    (0, "sdpa", "bf16", "below", dict(max_new_tokens=12)),
    (4, "eager", "fp32", "below", {}),
    (0, "eager", "fp32", "cross", dict(do_sample=True)),
    (1, "sdpa", "bf16", "below", dict(do_sample=True, top_k=20, temperature=0.7, num_return_sequences=2)),
    (2, "sdpa", "fp32", "cross", dict(num_beams=2)),
    (3, "eager", "bf16", "below", dict(num_beams=3, num_return_sequences=2)),
    (5, "sdpa", "bf16", "cross", dict(min_new_tokens=1, do_sample=True)),
    (1, "eager", "fp32", "above", dict(do_sample=True, batch=3)),
]
STATIC_TYPES = ("gemma2", "gemma3_text", "gpt_oss", "mistral", "qwen2")
# gpt-oss's experts for each STATIC_RUNS row: (experts, top_k, experts_implementation, routing).
STATIC_OSS = [(4, 2, "grouped_mm", "balanced"), (8, 1, "eager", "worst"), (6, 3, "batched_mm", "balanced"),
              (16, 4, "grouped_mm", "worst"), (5, 2, "eager", "balanced"), (12, 2, "batched_mm", "worst"),
              (8, 2, "grouped_mm", "worst"), (4, 1, "eager", "balanced"), (6, 2, "batched_mm", "worst"),
              (10, 3, "grouped_mm", "balanced"), (4, 2, "eager", "worst"), (8, 4, "grouped_mm", "balanced"),
              (6, 2, "eager", "balanced")]


def spoint(mt, r):
    i, attn, dtype, window, opts = STATIC_RUNS[r]
    p = fpoint(mt, i, attn, dtype, dict(opts, cache="static"))
    S, N = p["seq"], p["max_new_tokens"]
    w = {"below": S // 2, "cross": S + max(N // 2, 1), "at": S, "above": S + N + 4}[window]
    L = max(p["num_layers"], 2)
    if mt in ("gemma2", "gemma3_text"):
        p.update(num_layers=L, tied=True, head_dim=None, sliding_window=w, query_pre_attn_scalar=24,
                 layer_types=["sliding_attention" if (j + 1) % 2 else "full_attention" for j in range(L)])
        if mt == "gemma2":
            p.update(attn="eager", attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    elif mt == "gpt_oss":
        E, k, impl, routing = STATIC_OSS[r]
        p.update(attn="eager", intermediate_size=p["intermediate_size"] // 4, num_experts=E, top_k=k, experts=impl,
                 routing=routing, head_dim=16, num_layers=L, sliding_window=w)
    elif mt in ("mixtral", "qwen3_moe"):
        # Mixtral's sliding_window, Qwen3-MoE's with use_sliding_window (every layer, no
        # layer_types), routing forced as --moe.
        E, k, impl, routing = STATIC_OSS[r]
        p.update(intermediate_size=p["intermediate_size"] // 4, num_experts=E, top_k=k, experts=impl,
                 routing=routing, sliding_window=w)
        if mt == "qwen3_moe":
            p["head_dim"] = 32
    else:
        p["sliding_window"] = w
    return p


def sgrid(quick=False):
    return [spoint(mt, r) for mt in STATIC_TYPES for r in range(2 if quick else len(STATIC_RUNS))]


# The --static-families grid: a StaticCache on the models the --static-sliding grid left out.
# Phi-3 (its config's sliding_window on every layer), Qwen3 (use_sliding_window, max_window_layers
# 0: every layer sliding), Mixtral and Qwen3-MoE (their window, routing forced) on these STATIC_RUNS
# rows; DeepSeek-V3 (no window: a StaticLayer per layer holding the MLA latent and k_rot) on
# DS_STATIC_ROWS (make_deepseek_grid.py's rows with FAMILY_RUNS' options, as --deepseek).
STATIC_FAMILY_TYPES = ("phi3", "qwen3", "mixtral", "qwen3_moe")
STATIC_FAMILY_ROWS = (0, 1, 2, 5, 7, 9, 10, 12)
DS_STATIC_ROWS = (0, 1, 6, 8, 9, 11)


def dspoint(r, square=False):
    """DeepSeek-V3 with a StaticCache: dpoint(r); `square`: v_head_dim = qk_nope + qk_rope (q, k
    and v of one head size, so CPU's sdpa runs its flash kernel with the static mask)."""
    p = dpoint(r)
    p["cache"] = "static"
    if square:
        p["v_head_dim"] = p["qk_nope_head_dim"] + p["qk_rope_head_dim"]
    return p


def mixed_point(mt, j, r):
    """Qwen2/Qwen3 whose max_window_layers keeps the first layers full (StaticLayer) and slides the
    rest (StaticSlidingWindowLayer): STATIC_RUNS row r, 2 or 3 layers, max_window_layers 1 or 2."""
    p = spoint(mt, r)
    L = max(p["num_layers"], 2) + j % 2
    p.update(num_layers=L, max_window_layers=min(1 + (j % 3 == 2), L - 1))
    return p


def smgrid(quick=False):
    rows = STATIC_FAMILY_ROWS[:2] if quick else STATIC_FAMILY_ROWS
    return [mixed_point(mt, j, r) for mt in ("qwen2", "qwen3") for j, r in enumerate(rows)]


def sfgrid(quick=False):
    rows = STATIC_FAMILY_ROWS[:2] if quick else STATIC_FAMILY_ROWS
    todo = [spoint(mt, r) for mt in STATIC_FAMILY_TYPES for r in rows]
    todo += [dspoint(r) for r in (DS_STATIC_ROWS[:2] if quick else DS_STATIC_ROWS)]
    if not quick:
        todo += [dspoint(2, square=True)]
    return todo


# Qwen2-MoE with use_sliding_window (issue 30): Qwen2MoeConfig slides layers 0, 2, ... below
# max_window_layers (the rest full): the DynamicCache gives those a DynamicSlidingWindowLayer,
# a StaticCache a StaticSlidingWindowLayer (create_masks_for_generate's masks per layer type,
# PYTHONHASHSEED=0 as --static-mixed). (FSHAPES row, attn, dtype, window, layers,
# max_window_layers, experts, top_k, experts_implementation, routing, shared width, options).
Q2M_RUNS = [
    (0, "sdpa", "fp32", "below", 3, 28, 4, 2, "grouped_mm", "balanced", 96, {}),
    (1, "eager", "bf16", "cross", 2, 2, 8, 1, "eager", "worst", 48, {}),
    (2, "sdpa", "bf16", "at", 3, 1, 6, 3, "batched_mm", "balanced", 64, {}),
    (3, "eager", "fp32", "cross", 3, 28, 16, 4, "grouped_mm", "worst", 128, {}),
    (5, "eager", "bf16", "below", 2, 1, 5, 2, "eager", "balanced", 96, dict(batch=1)),
    (0, "sdpa", "bf16", "above", 2, 28, 12, 2, "batched_mm", "worst", 64, {}),
    (5, "sdpa", "fp32", "cross", 3, 2, 8, 2, "grouped_mm", "worst", 48, {}),
    (4, "eager", "fp32", "below", 1, 28, 4, 1, "eager", "balanced", 64, {}),
    (0, "sdpa", "fp32", "below", 2, 0, 6, 2, "batched_mm", "balanced", 96, {}),
    (0, "eager", "fp32", "cross", 3, 28, 10, 3, "grouped_mm", "balanced", 64, dict(do_sample=True)),
    (2, "sdpa", "fp32", "below", 2, 28, 4, 2, "eager", "worst", 128, dict(num_beams=2)),
    (4, "sdpa", "fp32", "below", 2, 28, 8, 4, "grouped_mm", "balanced", 96, dict(cache="static")),
    (5, "eager", "bf16", "cross", 3, 1, 6, 2, "batched_mm", "worst", 64, dict(cache="static")),
    (1, "sdpa", "bf16", "below", 2, 28, 4, 2, "eager", "balanced", 48,
     dict(cache="static", do_sample=True, num_return_sequences=2)),
]


def q2mpoint(r):
    i, attn, dtype, window, L, mwl, E, k, impl, routing, shared, opts = Q2M_RUNS[r]
    opts = dict(opts)
    batch = opts.pop("batch", None)
    p = fpoint("qwen2_moe", i, attn, dtype, opts)
    if batch:
        p["batch"] = batch
    S, N = p["seq"], p["max_new_tokens"]
    p.update(intermediate_size=p["intermediate_size"] // 4, num_experts=E, top_k=k, experts=impl, routing=routing,
             shared_intermediate_size=shared, num_layers=L, max_window_layers=mwl,
             sliding_window={"below": S // 2, "cross": S + max(N // 2, 1), "at": S, "above": S + N + 4}[window])
    return p


def q2mgrid(quick=False):
    return [q2mpoint(r) for r in range(2 if quick else len(Q2M_RUNS))]


def dpoint(r):
    """DeepSeek-V3 (multi-head latent attention; the DynamicCache keeps the latent and k_rot) through
    generate(): make_deepseek_grid.py's row r (its MoE and MLA shapes, experts implementation and
    routing) with FAMILY_RUNS[r]'s prompt, batch, new tokens, attention, dtype and options (the
    DynamicCache only)."""
    import make_deepseek_grid as DG
    p = DG.point(DG.POINTS[r])
    for k in ("use_cache", "logits_to_keep", "checkpoint", "optimizer", "max_grad_norm", "attention_mask"):
        p.pop(k)
    i, attn, dtype, opts = FAMILY_RUNS[r]
    _, _, _, _, _, _, _, S, B, N = FSHAPES[i]
    p.update(seq=S, batch=B, max_new_tokens=N, attn=attn, dtype=dtype)
    # (The router's top_k wins over a sampling top_k, as in mpoint: measure_generate passes the
    # point's top_k to a sampling generate() too.)
    p.update({k: v for k, v in opts.items() if k not in ("cache", "top_k")})
    # vramscope's reader refuses zero-width shared experts (n_shared_experts 0): one instead.
    p["n_shared_experts"] = max(p["n_shared_experts"], 1)
    return p


def dgrid(quick=False):
    return [dpoint(r) for r in range(2 if quick else len(FAMILY_RUNS))]


# generate() with peft's unmerged LoRA and bitsandbytes 4-bit weights on issue 30's models (the
# --adapters-models grid): each point is one of the grids above (fpoint, gpoint, mpoint, opoint,
# dpoint: their shapes, windows, routing and options) with adapters, 4-bit weights or both. The
# 4-bit points load bf16 weights (measure_hf.load_4bit, not prepared: an inference script);
# LoRA targets the families' projections, the MoE models' attention, Qwen2-MoE's shared expert,
# and (not over 4-bit weights: vramscope refuses that pair) the experts through peft's
# ParamWrapper (target_parameters), named or converted from transformers-4 names (all-linear on
# mixtral).
def _lora(r, targets, params=None):
    d = dict(lora_r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=targets)
    if params:
        d["target_parameters"] = params
    return d


def _q4(qt, dq, compute):
    return dict(load_in_4bit=True, quant_type=qt, double_quant=dq, compute_dtype=compute, prepare=False,
                checkpoint="none", dtype="bf16")


EXPERTS = "mlp.experts.gate_up_proj,mlp.experts.down_proj"
# (builder, builder's arguments, adapter options)
ADAPTER_RUNS = [
    ("f", ("phi3", 0, "sdpa", "bf16", {}), dict(_q4("nf4", True, "bf16"), **_lora(16, "all-linear"))),
    ("f", ("phi3", 3, "eager", "bf16", dict(do_sample=True)), _lora(8, "qkv_proj,o_proj")),
    ("f", ("phi3", 5, "sdpa", "bf16", dict(num_beams=2)), dict(_q4("fp4", False, "fp32"), **_lora(8, "gate_up_proj,down_proj"))),
    ("f", ("olmo2", 1, "eager", "bf16", {}), dict(_q4("fp4", False, "fp32"), **_lora(8, "q_proj,v_proj"))),
    ("f", ("olmo2", 5, "sdpa", "fp32", dict(num_beams=2)), _lora(16, "all-linear")),
    ("f", ("olmo2", 0, "sdpa", "bf16", {}), _q4("nf4", True, "bf16")),
    ("g", ("gemma2", 1), dict(_q4("nf4", True, "bf16"), **_lora(8, "all-linear"))),
    ("g", ("gemma2", 0), _lora(16, "q_proj,v_proj")),
    ("g", ("gemma3_text", 3), dict(_q4("fp4", True, "fp32"), **_lora(16, "all-linear"))),
    ("g", ("gemma3_text", 10), _lora(8, "q_proj,k_proj,v_proj,o_proj")),
    ("g", ("gemma3_text", 2), _q4("nf4", False, "bf16")),
    ("m", ("mixtral", 0), dict(_q4("nf4", True, "bf16"), **_lora(16, "q_proj,v_proj"))),
    ("m", ("mixtral", 2), _lora(8, "", EXPERTS)),
    ("m", ("mixtral", 3), _lora(8, "all-linear")),
    ("m", ("qwen3_moe", 1), dict(_q4("fp4", False, "bf16"), **_lora(8, "q_proj,k_proj,v_proj,o_proj"))),
    ("m", ("qwen3_moe", 6), _lora(16, "q_proj,v_proj", EXPERTS)),
    ("m", ("qwen2_moe", 0), dict(_q4("nf4", True, "bf16"), **_lora(8, "all-linear"))),
    ("m", ("qwen2_moe", 3), _lora(16, "gate_proj,up_proj,down_proj")),
    ("m", ("qwen2_moe", 8), _lora(8, "q_proj,v_proj", EXPERTS)),
    ("o", (1,), dict(_q4("nf4", True, "bf16"), **_lora(8, "q_proj,v_proj"))),
    ("o", (0,), _lora(8, "", EXPERTS)),
    ("o", (3,), _lora(16, "all-linear")),
    ("d", (1,), dict(_q4("nf4", True, "bf16"), **_lora(8, "kv_a_proj_with_mqa,kv_b_proj,o_proj"))),
    ("d", (0,), _lora(8, "o_proj,kv_b_proj", EXPERTS)),
    ("d", (3,), _q4("fp4", True, "fp32")),
    # a StaticCache (PYTHONHASHSEED=0, as --static-sliding) and the windows of --sliding,
    # --static-families and --qwen2-moe-sliding under adapters
    ("f", ("phi3", 5, "eager", "bf16", dict(cache="static")), dict(_q4("nf4", True, "bf16"), **_lora(8, "qkv_proj,o_proj"))),
    ("s", ("gemma3_text", 1), _lora(16, "all-linear")),
    ("s", ("gpt_oss", 7), dict(_q4("nf4", False, "bf16"), **_lora(8, "q_proj,v_proj"))),
    ("w", (16,), dict(_q4("nf4", True, "bf16"), **_lora(8, "q_proj,v_proj"))),
    ("s", ("qwen3_moe", 2), _lora(8, "q_proj,k_proj,v_proj,o_proj")),
    ("ds", (1,), _lora(8, "kv_b_proj,o_proj")),
    ("ds", (6,), dict(_q4("fp4", False, "bf16"), **_lora(16, "kv_a_proj_with_mqa"))),
    ("q2m", (1,), dict(_q4("nf4", True, "bf16"), **_lora(8, "all-linear"))),
]


def adpoint(r):
    kind, args, ad = ADAPTER_RUNS[r]
    p = {"f": lambda: fpoint(*args), "g": lambda: gpoint(*args), "m": lambda: mpoint(*args), "o": lambda: opoint(*args),
         "d": lambda: dpoint(*args), "s": lambda: spoint(*args), "w": lambda: wpoint(*args), "ds": lambda: dspoint(*args),
         "q2m": lambda: q2mpoint(*args)}[kind]()
    p.update(ad)
    return p


def adgrid(quick=False):
    return [adpoint(r) for r in range(len(ADAPTER_RUNS)) if not quick or r in (0, 11)]


# The --adapters-extras grid: peft's other LoRA options with generate() on issue 30's models, over
# unquantized weights (vramscope refuses DoRA and modules_to_save over 4-bit or 8-bit weights on
# them): bias "all" (the base layers' biases trainable: gpt-oss's and Qwen2-MoE's attention
# biases) and "lora_only" (a bias on each lora_B), DoRA (the magnitude vector, the weight norm
# recomputed at every forward) and modules_to_save (a ModulesToSaveWrapper's trainable copy of
# lm_head or embed_tokens, the copy the forward runs). Points of ADAPTER_RUNS' builders.
def _extra(r, targets, bias=None, dora=False, save=None):
    d = _lora(r, targets)
    if bias:
        d["lora_bias"] = bias
    if dora:
        d["use_dora"] = True
    if save:
        d["modules_to_save"] = save
    return d


EXTRA_RUNS = [
    ("f", ("phi3", 0, "sdpa", "bf16", {}), _extra(8, "qkv_proj,o_proj", dora=True)),
    ("f", ("phi3", 3, "eager", "fp32", dict(do_sample=True)), _extra(16, "all-linear", bias="all", save="lm_head")),
    ("f", ("olmo2", 1, "eager", "bf16", {}), _extra(8, "q_proj,v_proj", bias="lora_only")),
    ("f", ("olmo2", 5, "sdpa", "fp32", dict(num_beams=2)), _extra(16, "all-linear", dora=True)),
    ("f", ("olmo2", 2, "sdpa", "bf16", {}), _extra(8, "q_proj,v_proj", save="embed_tokens,lm_head")),
    ("g", ("gemma2", 1), _extra(8, "all-linear", dora=True)),
    ("g", ("gemma2", 3), _extra(16, "q_proj,v_proj", bias="all", save="lm_head")),
    ("g", ("gemma3_text", 0), _extra(8, "all-linear", bias="lora_only")),
    ("g", ("gemma3_text", 7), _extra(8, "q_proj,v_proj", dora=True)),
    ("g", ("gemma3_text", 9), _extra(16, "q_proj,k_proj,v_proj,o_proj", save="embed_tokens")),
    ("m", ("mixtral", 0), _extra(8, "q_proj,v_proj", dora=True)),
    ("m", ("mixtral", 3), _extra(16, "q_proj,v_proj", bias="lora_only", save="lm_head")),
    ("m", ("qwen3_moe", 1), _extra(8, "q_proj,k_proj,v_proj,o_proj", bias="all")),
    ("m", ("qwen3_moe", 8), _extra(8, "v_proj,o_proj", dora=True, save="embed_tokens")),
    ("m", ("qwen2_moe", 0), _extra(8, "q_proj,v_proj", bias="all")),
    ("m", ("qwen2_moe", 4), _extra(8, "all-linear", dora=True)),
    ("m", ("qwen2_moe", 10), _extra(16, "q_proj,k_proj,v_proj,o_proj", bias="lora_only", save="lm_head")),
    ("o", (1,), _extra(8, "q_proj,k_proj,v_proj,o_proj", dora=True)),
    ("o", (3,), _extra(16, "q_proj,v_proj", bias="all", save="lm_head")),
    ("o", (0,), _extra(8, "k_proj,o_proj", bias="lora_only")),
    ("d", (0,), _extra(8, "o_proj,kv_b_proj", dora=True)),
    ("d", (3,), _extra(8, "o_proj", bias="all", save="embed_tokens,lm_head")),
    ("d", (1,), _extra(16, "kv_a_proj_with_mqa", bias="lora_only")),
    ("q2m", (1,), _extra(8, "q_proj,v_proj", dora=True, save="lm_head")),
]


def _q8(threshold, prepare=False):
    return dict(load_in_8bit=True, llm_int8_threshold=threshold, prepare=prepare, checkpoint="none", dtype="bf16")


# The --adapters-int8 grid: LLM.int8() weights (load_in_8bit; CUDA's MatMul8bitLt on CPU as
# measure_hf.load_4bit runs it; qwen2_moe and deepseek_v3 have no 8-bit load vramscope models)
# and peft's prepare_model_for_kbit_training (fp32 casts of every unquantized parameter, what a
# training script's setup leaves) under 4-bit and 8-bit weights, with and without LoRA.
INT8_RUNS = [
    ("f", ("phi3", 0, "sdpa", "bf16", {}), dict(_q8(6.0), **_lora(8, "all-linear"))),
    ("f", ("phi3", 4, "sdpa", "bf16", dict(cache="static")), _q8(0.0)),
    ("f", ("olmo2", 1, "eager", "bf16", {}), dict(_q8(6.0, True), **_lora(8, "q_proj,v_proj"))),
    ("f", ("olmo2", 5, "sdpa", "bf16", dict(num_beams=2)), dict(_q4("nf4", True, "bf16"), prepare=True, **_lora(16, "all-linear"))),
    ("g", ("gemma2", 1), dict(_q8(0.0), **_lora(8, "all-linear"))),
    ("g", ("gemma3_text", 3), _q8(0.0, True)),
    ("g", ("gemma3_text", 0), dict(_q4("fp4", False, "fp32"), prepare=True, **_lora(8, "q_proj,v_proj"))),
    ("m", ("mixtral", 0), dict(_q8(6.0), **_lora(8, "q_proj,v_proj"))),
    ("m", ("qwen3_moe", 1), dict(_q8(0.0, True), **_lora(8, "q_proj,k_proj,v_proj,o_proj"))),
    ("m", ("qwen2_moe", 0), dict(_q4("nf4", True, "bf16"), prepare=True, **_lora(8, "all-linear"))),
    ("o", (1,), dict(_q8(6.0), **_lora(8, "q_proj,v_proj"))),
    ("o", (3,), dict(_q4("nf4", False, "bf16"), prepare=True)),
    ("d", (1,), dict(_q4("nf4", True, "bf16"), prepare=True, **_lora(8, "kv_a_proj_with_mqa,kv_b_proj,o_proj"))),
    ("m", ("mixtral", 4), _q8(0.0, True)),
]


# The --dense-extras grid: the same options on llama, mistral, qwen2 and qwen3 (SHAPES' points):
# bias all / lora_only, DoRA, modules_to_save over unquantized weights and LLM.int8() weights,
# unprepared and prepared. (model_type, SHAPES index, attn, dtype, options)
DENSE_EXTRA_RUNS = [
    ("llama", 0, "sdpa", "bf16", _extra(8, "q_proj,v_proj", dora=True)),
    ("mistral", 1, "eager", "fp32", _extra(16, "all-linear", bias="lora_only", save="lm_head")),
    ("qwen2", 3, "sdpa", "fp32", dict(do_sample=True, **_extra(8, "q_proj,k_proj,v_proj", bias="all", dora=True))),
    ("qwen3", 5, "eager", "bf16", dict(num_beams=2, **_extra(8, "q_proj,v_proj", bias="all", save="embed_tokens"))),
    ("llama", 4, "sdpa", "fp32", dict(cache="static", **_extra(8, "o_proj", bias="lora_only", save="embed_tokens,lm_head"))),
    ("qwen2", 2, "eager", "bf16", _extra(16, "all-linear", dora=True)),
    ("llama", 1, "sdpa", "bf16", dict(_q8(6.0), **_lora(8, "q_proj,v_proj"))),
    ("mistral", 3, "eager", "bf16", _q8(0.0, True)),
    ("qwen2", 0, "sdpa", "bf16", dict(_q8(0.0), **_lora(16, "all-linear"))),
    ("qwen3", 4, "sdpa", "bf16", dict(cache="static", **_q8(6.0, True), **_lora(8, "q_proj,v_proj"))),
]


def dxgrid(quick=False):
    todo = []
    for mt, i, attn, dtype, opts in DENSE_EXTRA_RUNS[:2] if quick else DENSE_EXTRA_RUNS:
        p = point(mt, i, attn=attn, dtype=dtype)
        p.update(opts)
        todo.append(p)
    return todo


def _runs_point(runs, r):
    kind, args, ad = runs[r]
    p = {"f": lambda: fpoint(*args), "g": lambda: gpoint(*args), "m": lambda: mpoint(*args), "o": lambda: opoint(*args),
         "d": lambda: dpoint(*args), "q2m": lambda: q2mpoint(*args)}[kind]()
    p.update(ad)
    return p


def xgrid(quick=False):
    return [_runs_point(EXTRA_RUNS, r) for r in range(2 if quick else len(EXTRA_RUNS))]


def i8grid(quick=False):
    return [_runs_point(INT8_RUNS, r) for r in range(2 if quick else len(INT8_RUNS))]


def mgrid(quick=False):
    return [mpoint(mt, r) for mt in ("mixtral", "qwen3_moe", "qwen2_moe") for r in range(2 if quick else len(MOE_RUNS))]


def bgrid(quick=False):
    return [point(mt, i, attn=attn, dtype=dtype, **opts) for mt, i, attn, dtype, opts in (BEAMS[:4] if quick else BEAMS)]


def ogrid(quick=False):
    todo = []
    for mt, i, attn, dtype, opts in OPTIONS[:4] if quick else OPTIONS:
        todo.append(point(mt, i, attn=attn, dtype=dtype, **opts))
    return todo


def name_job(p):
    return name_of(p)


def name_of(p):
    return (f"{p['model_type']} d{p['hidden_size']} F{p['intermediate_size']} L{p['num_layers']} h{p['num_heads']} "
            f"kv{p['num_kv_heads']}{' hd' + str(p['head_dim']) if p['head_dim'] else ''} V{p['vocab_size']} "
            f"S{p['seq']} B{p['batch']} N{p['max_new_tokens']} {p['attn']} {p['dtype']}{' tied' if p['tied'] else ''}{extras(p)} generate")


def extras(p):
    tag = ""
    if p.get("load_in_4bit"):
        tag += f" 4bit {p['quant_type']}{' dq' if p['double_quant'] else ''} compute={p['compute_dtype']}{' prepared' if p['prepare'] else ''}"
    if p.get("load_in_8bit"):
        tag += f" 8bit threshold={p['llm_int8_threshold']}{' prepared' if p['prepare'] else ''}"
    if p.get("lora_r"):
        tag += f" lora r{p['lora_r']} a{p['lora_alpha']} {p['target_modules']}"
        for k in ("lora_bias", "modules_to_save"):
            if p.get(k):
                tag += f" {k}={p[k]}"
        if p.get("use_dora"):
            tag += " dora"
        if p.get("target_parameters"):
            tag += f" params={p['target_parameters']}"
    if p.get("cache", "dynamic") != "dynamic":
        tag += f" cache={p['cache']}"
    if p.get("do_sample"):
        tag += " sample" + "".join(f" {k}={p[k]}" for k in ("temperature", "top_k", "top_p") if p.get(k) is not None)
    if p.get("min_new_tokens"):
        tag += f" min_new_tokens={p['min_new_tokens']}"
    if p.get("num_beams", 1) > 1:
        tag += f" num_beams={p['num_beams']}"
    if p.get("num_return_sequences", 1) > 1:
        tag += f" num_return_sequences={p['num_return_sequences']}"
    if p.get("sliding_window"):
        tag += f" sliding_window={p['sliding_window']}"
    if p.get("max_window_layers"):
        tag += f" max_window_layers={p['max_window_layers']}"
    if "layer_types" in p:
        tag += " layers=" + "".join("s" if t == "sliding_attention" else "f" for t in p["layer_types"])
    for k in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"):
        if k in p:
            tag += f" {k}={p[k]}"
    if "kv_lora_rank" in p:
        tag += (f" Fd{p['dense_intermediate_size']} dense{p['first_k_dense_replace']} shared{p['n_shared_experts']}"
                f" g{p['n_group']}/{p['topk_group']} q{p['q_lora_rank']} kv{p['kv_lora_rank']} nope{p['qk_nope_head_dim']}"
                f" rope{p['qk_rope_head_dim']} v{p['v_head_dim']}{' interleave' if p['rope_interleave'] else ''}"
                f"{' yarn' + str(p['yarn_factor']) if p['yarn_factor'] else ''}")
    if p.get("experts"):
        tag += f" E{p['num_experts']} k{p['top_k']} {p['experts']} {p['routing']}"
        if p.get("shared_intermediate_size"):
            tag += f" shared{p['shared_intermediate_size']}"
    return tag


def grid(quick=False):
    todo = []
    for t, mt in enumerate(H.MODEL_TYPES):
        for k, (attn, dtype) in enumerate((("sdpa", "fp32"), ("sdpa", "bf16"), ("eager", "fp32"), ("eager", "bf16"),
                                           ("sdpa", "fp32"), ("eager", "bf16"))):
            if quick and k > 0:
                continue
            todo.append(point(mt, t + k, attn=attn, dtype=dtype))
    if not quick:
        todo.append(point("llama", 0, tied=True))
    return todo


def run_job(job):
    return run_one(*job)


def run_one(p):
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    try:
        per, _, info = MG.measure(p)
    except Exception as e:
        return dict(name=name_of(p), error=f"{type(e).__name__}: {e}")
    phases = {ph: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"],
                       peak_node=s["peak_node"], start=s["start"], end=s.get("end", s["start"]),
                       peak_with_cpu_scratch=s["peak_with_cpu_scratch"], cpu_scratch_left_out=s["cpu_scratch"])
              for ph, s in per.items()}
    excess = {ph: v["peak_with_cpu_scratch"] - v["peak"] for ph, v in phases.items() if v["peak_with_cpu_scratch"] != v["peak"]}
    return dict(name=name_of(p), point=p, profile_type="generate", info=info, phases=phases, cpu_scratch_peak_excess=excess)


def releases(adapters):
    """The releases a fixture was measured with (peft and bitsandbytes where points use them)."""
    import transformers
    versions = dict(torch=torch.__version__, transformers=transformers.__version__)
    if adapters:
        import bitsandbytes
        import peft
        versions.update(peft=peft.__version__, bitsandbytes=bitsandbytes.__version__)
    return versions


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--qlora", action="store_true")
    ap.add_argument("--options", action="store_true", help="generate_options.json: static cache, sampling, min_new_tokens")
    ap.add_argument("--beams", action="store_true", help="generate_beams.json: beam search (num_beams 2-4)")
    ap.add_argument("--families", action="store_true", help="generate_families.json: phi3 and olmo2")
    ap.add_argument("--moe", action="store_true", help="generate_moe.json: mixtral, qwen3_moe, qwen2_moe with forced routing")
    ap.add_argument("--gpt-oss", action="store_true", help="generate_gpt_oss.json: gpt_oss (sliding and full layers, forced routing)")
    ap.add_argument("--gemma", action="store_true", help="generate_gemma.json: gemma2, gemma3_text (sliding and full layers)")
    ap.add_argument("--sliding", action="store_true", help="generate_sliding.json: mistral with a window shorter than the sequence")
    ap.add_argument("--deepseek", action="store_true", help="generate_deepseek.json: deepseek_v3 (MLA, forced routing)")
    ap.add_argument("--static-sliding", action="store_true", help="generate_static_sliding.json: StaticCache with a sliding window")
    ap.add_argument("--static-mixed", action="store_true", help="generate_static_mixed.json: StaticCache on qwen2/qwen3 with sliding and full layers (max_window_layers)")
    ap.add_argument("--static-families", action="store_true", help="generate_static_families.json: StaticCache on phi3, qwen3, mixtral, qwen3_moe (windowed) and deepseek_v3")
    ap.add_argument("--qwen2-moe-sliding", action="store_true", help="generate_qwen2_moe_sliding.json: qwen2_moe with use_sliding_window (max_window_layers), forced routing, DynamicCache and StaticCache")
    ap.add_argument("--adapters-models", action="store_true", help="generate_models_adapters.json: peft LoRA and bitsandbytes 4-bit on phi3, olmo2, gemma2, gemma3_text, mixtral, qwen3_moe, qwen2_moe, gpt_oss, deepseek_v3")
    ap.add_argument("--adapters-extras", action="store_true", help="generate_models_extras.json: peft's bias, DoRA and modules_to_save on issue 30's nine models")
    ap.add_argument("--adapters-int8", action="store_true", help="generate_models_int8.json: LLM.int8() weights and prepare_model_for_kbit_training on issue 30's models")
    ap.add_argument("--dense-extras", action="store_true", help="generate_dense_extras.json: lora bias, DoRA, modules_to_save and 8-bit weights on llama, mistral, qwen2, qwen3")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", help="with --options, --beams, --gemma or --adapters-models: re-measure the points whose name contains this; keep the fixture's others")
    a = ap.parse_args()
    if (a.static_sliding or a.static_families or a.static_mixed or a.qwen2_moe_sliding or a.adapters_models or a.adapters_extras or a.adapters_int8 or a.dense_extras) and os.environ.get("PYTHONHASHSEED") != "0":
        # create_masks_for_generate iterates set(layer_types): a fixed hash seed fixes the
        # order its masks are built in (recorded per point as info.mask_order).
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, PYTHONHASHSEED="0"))
    import transformers
    if a.only and a.adapters_models:
        path = os.path.join(a.out, "generate_models_adapters.json")
        doc, t0 = G.measure_only(path, [(p,) for p in adgrid(False)], run_job, name_job, a.only, maxtasksperchild=1)
        doc.update(releases(True))
        return G.write_fixture(path, doc, t0)
    if a.only:
        path = os.path.join(a.out, "generate_gemma.json" if a.gemma else "generate_beams.json" if a.beams else "generate_options.json")
        doc, t0 = G.measure_only(path, [(p,) for p in (ggrid() if a.gemma else bgrid() if a.beams else ogrid())], run_job, name_job, a.only, maxtasksperchild=1)
        doc.update(releases(not a.gemma))
        return G.write_fixture(path, doc, t0)
    if a.adapters_models:
        results, t0 = G.measure_all(adgrid(a.quick), run_one, maxtasksperchild=1)
        doc = dict(generator="tools/pytorch/make_generate_grid.py --adapters-models" + (" --quick" if a.quick else ""), **releases(True),
                   counted="requested bytes of blocks >= 512 B, absolute (parameters, buffers, input_ids included); "
                           "CPU-only kernel scratch left out, as make_grid.py; the step is model.generate(input_ids, "
                           "**measure_generate.gen_kwargs(point)) on peft's get_peft_model (unmerged adapters, eval mode) "
                           "and/or from_pretrained with BitsAndBytesConfig(load_in_4bit=True) (measure_hf.load_4bit, not "
                           "prepared); the MoE router's top-k indices forced to the point's routing for each forward's "
                           "token count (measure_generate.install_generate_routing)",
                   points=results)
        return G.write_fixture(os.path.join(a.out, "generate_models_adapters.json"), doc, t0)
    if a.adapters_extras or a.adapters_int8 or a.dense_extras:
        flag, todo, name = (("--adapters-extras", xgrid, "generate_models_extras.json") if a.adapters_extras
                            else ("--adapters-int8", i8grid, "generate_models_int8.json") if a.adapters_int8
                            else ("--dense-extras", dxgrid, "generate_dense_extras.json"))
        results, t0 = G.measure_all(todo(a.quick), run_one, maxtasksperchild=1)
        doc = dict(generator=f"tools/pytorch/make_generate_grid.py {flag}" + (" --quick" if a.quick else ""), **releases(True),
                   counted="requested bytes of blocks >= 512 B, absolute (parameters, buffers, input_ids included); "
                           "CPU-only kernel scratch left out, as make_grid.py; the step is model.generate(input_ids, "
                           "**measure_generate.gen_kwargs(point)) on peft's get_peft_model (unmerged adapters with the "
                           "point's bias, use_dora and modules_to_save, eval mode) and/or from_pretrained with "
                           "BitsAndBytesConfig(load_in_4bit=True or load_in_8bit=True: CUDA's MatMul8bitLt, "
                           "measure_hf.load_4bit; prepare_model_for_kbit_training where the point says prepared); the MoE "
                           "router's top-k indices forced to the point's routing for each forward's token count "
                           "(measure_generate.install_generate_routing)",
                   points=results)
        return G.write_fixture(os.path.join(a.out, name), doc, t0)
    if a.families or a.moe or a.gemma or a.gpt_oss or a.static_sliding or a.static_families or a.static_mixed or a.deepseek or a.sliding or a.qwen2_moe_sliding:
        which = ("--families" if a.families else "--moe" if a.moe else "--gemma" if a.gemma else "--gpt-oss" if a.gpt_oss
                 else "--static-sliding" if a.static_sliding else "--static-families" if a.static_families
                 else "--static-mixed" if a.static_mixed
                 else "--sliding" if a.sliding else "--qwen2-moe-sliding" if a.qwen2_moe_sliding else "--deepseek")
        todo = (fgrid if a.families else mgrid if a.moe else ggrid if a.gemma else oggrid if a.gpt_oss else sgrid
                if a.static_sliding else sfgrid if a.static_families else smgrid if a.static_mixed else wgrid if a.sliding else q2mgrid if a.qwen2_moe_sliding else dgrid)(a.quick)
        results, t0 = G.measure_all(todo, run_one, maxtasksperchild=1)
        doc = dict(generator=f"tools/pytorch/make_generate_grid.py {which}" + (" --quick" if a.quick else ""), **releases(False),
                   counted="requested bytes of blocks >= 512 B, absolute (parameters, buffers, input_ids included); "
                           "CPU-only kernel scratch left out, as make_grid.py; the step is model.generate(input_ids, "
                           "**measure_generate.gen_kwargs(point))" + ("; the router's top-k indices forced to the point's "
                           "routing for each forward's token count (measure_generate.install_generate_routing)" if a.moe or a.gpt_oss or a.static_families or a.qwen2_moe_sliding else ""),
                   points=results)
        name = ("generate_families.json" if a.families else "generate_moe.json" if a.moe else "generate_gemma.json" if a.gemma
                else "generate_gpt_oss.json" if a.gpt_oss else "generate_static_sliding.json" if a.static_sliding
                else "generate_static_families.json" if a.static_families
                else "generate_static_mixed.json" if a.static_mixed
                else "generate_sliding.json" if a.sliding
                else "generate_qwen2_moe_sliding.json" if a.qwen2_moe_sliding else "generate_deepseek.json")
        return G.write_fixture(os.path.join(a.out, name), doc, t0)
    results, t0 = G.measure_all((qgrid if a.qlora else ogrid if a.options else bgrid if a.beams else grid)(a.quick), run_one, maxtasksperchild=1)
    versions = releases(a.qlora or a.options)
    doc = dict(generator="tools/pytorch/make_generate_grid.py" + (" --qlora" if a.qlora else "") + (" --options" if a.options else "") + (" --beams" if a.beams else "") + (" --quick" if a.quick else ""),
               **versions,
               counted="requested bytes of blocks >= 512 B, absolute (parameters, buffers, input_ids included); "
                       "CPU-only kernel scratch left out, as make_grid.py; the step is model.generate(input_ids, "
                       "max_new_tokens=N, do_sample=False) (measure_generate.py), or with the point's options (measure_generate.gen_kwargs)",
               points=results)
    name = "generate_qlora.json" if a.qlora else "generate_options.json" if a.options else "generate_beams.json" if a.beams else "generate.json"
    G.write_fixture(os.path.join(a.out, name), doc, t0)


if __name__ == "__main__":
    main()
