#!/usr/bin/env python3
"""make_gptoss_deepseek_autocast_grid.py -- the fixture grid of gpt-oss and DeepSeek-V3 under autocast
(the Trainer's `bf16=True`): what transformers 5.23's GptOssForCausalLM and DeepseekV3ForCausalLM
allocate with `torch.autocast("cpu", dtype=torch.bfloat16)` around forward and loss (measure_hf.py's
`autocast`, with CUDA's op policies registered on CPU: `cuda_autocast_policies`), per phase,
measured by measure_moe.py (mode-free, one torch.profiler session per measurement, requested bytes
of blocks >= 512 B, absolute; routing forced as vramscope's `--routing`), written to
tests/fixtures/moe_grid/autocast_gpt_oss_deepseek.json.

What autocast changes in them (tools/pytorch/README.md, "MoE autocast"): gpt-oss's attention
matmuls run in bf16 and the sinks' cat promotes to the mask's and sinks' type; its router is an
autocast linear (bf16 logits, softmax with dtype=bf16); its eager experts' `@` are matmuls (bf16),
batched_mm's bmm casts the gathered weights, grouped_mm runs in the weights' dtype. DeepSeek-V3's
router casts to fp32 and F.linear then runs in bf16 anyway (bf16 logits, sigmoid, the
group-limited top-k and its sums in fp32 on CUDA); MLA's projections are bf16, the roped halves
take the cos/sin type, and cat((q_pass, q_rot)) mixes bf16 and fp32 over fp32 weights (CPU
autocast would promote it, CUDA's does not: the policy is registered).

The grid: per family six shapes over fp32 weights (fp32 master weights) and bf16 weights, every
experts implementation, top-k 1-4, 4-16 experts, balanced and worst routing, inference, forward
and training, gradient checkpointing off, non-reentrant and reentrant; gpt-oss with the sliding
window shorter and longer than S; DeepSeek-V3 with q_lora_rank null and set, first_k_dense_replace
0 and 1, rope_interleave on and off, eager and sdpa (equal head sizes: the CPU flash kernel).

    python3 make_gptoss_deepseek_autocast_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_gptoss_deepseek_autocast_grid.py --only deepseek   # re-measure the points whose name contains it
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import make_deepseek_grid as DG
import make_gptoss_grid as GG
import make_moe_autocast_grid as MA

OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid")
ALL3 = ("inference", "forward", "training")

# make_gptoss_grid.py's rows: (hidden, intermediate (per expert), layers, heads, kv_heads, head_dim,
# vocab, S, B, experts, top_k, experts_implementation, routing, dtype, sliding_window), then
# (checkpoints, profile types).
GPT_OSS = [
    ((64, 48, 2, 4, 2, 16, 1000, 16, 2, 4, 2, "grouped_mm", "balanced", "fp32", 8), ("non-reentrant",), ALL3),
    ((96, 64, 2, 6, 2, 16, 777, 24, 1, 8, 1, "eager", "balanced", "fp32", 32), (), ALL3),
    ((64, 64, 2, 4, 2, 16, 512, 24, 2, 8, 2, "batched_mm", "worst", "fp32", 8), ("reentrant",), ALL3),
    ((128, 64, 2, 8, 2, 16, 1000, 12, 2, 16, 4, "grouped_mm", "worst", "bf16", 4), (), ("training",)),
    ((80, 48, 2, 4, 2, 20, 600, 18, 1, 9, 3, "eager", "worst", "bf16", 5), (), ("forward", "training")),
    ((96, 80, 2, 6, 2, 16, 640, 16, 1, 4, 4, "batched_mm", "balanced", "bf16", 24), (), ("training",)),
]

# make_deepseek_grid.py's rows: (hidden, dense I, expert I, layers, heads, vocab, S, B, experts,
# top_k, n_group, topk_group, first_k_dense_replace, n_shared_experts, q_lora_rank, kv_lora_rank,
# qk_nope, qk_rope, v_head, rope_interleave, yarn factor, experts_implementation, routing, attn,
# dtype), then (checkpoints, profile types).
DEEPSEEK = [
    ((64, 160, 32, 2, 4, 1000, 16, 2, 8, 2, 2, 1, 1, 1, 48, 32, 16, 8, 12, True, 0, "grouped_mm", "balanced", "eager", "fp32"), ("non-reentrant",), ALL3),
    ((96, 128, 48, 2, 6, 777, 24, 1, 8, 1, 1, 1, 0, 1, None, 40, 16, 8, 16, True, 0, "eager", "balanced", "eager", "fp32"), (), ALL3),
    ((64, 96, 40, 2, 4, 512, 20, 2, 4, 3, 2, 2, 0, 2, 32, 24, 8, 8, 20, False, 0, "batched_mm", "worst", "eager", "fp32"), ("reentrant",), ALL3),
    ((128, 192, 32, 2, 8, 1000, 12, 2, 16, 4, 4, 2, 1, 1, 64, 48, 16, 16, 16, True, 0, "grouped_mm", "worst", "eager", "bf16"), (), ("training",)),
    ((80, 112, 40, 2, 4, 800, 18, 1, 8, 2, 4, 2, 1, 1, None, 32, 16, 16, 32, False, 0, "eager", "worst", "sdpa", "bf16"), (), ("forward", "training")),
    ((96, 144, 40, 2, 6, 1000, 12, 2, 16, 2, 8, 4, 0, 1, 48, 40, 16, 8, 24, True, 0, "batched_mm", "balanced", "sdpa", "fp32"), (), ("training",)),
]


def name_of(p, kind):
    base = (GG if p["model_type"] == "gpt_oss" else DG).name_of(p, kind)
    head, tail = base.rsplit(f" {kind}", 1)
    return f"{head} autocast={p['autocast']} {kind}{tail}"


def grid(families=None):
    todo = []
    for make, rows in ((GG.point, GPT_OSS), (DG.point, DEEPSEEK)):
        for row, checkpoints, kinds in rows:
            p = dict(make(row), autocast="bf16")
            if families and p["model_type"] not in families:
                continue
            todo += [(p, kind) for kind in kinds]
            todo += [(dict(p, checkpoint=ck), "training") for ck in checkpoints]
    return todo


def main():
    MA.main_for("autocast_gpt_oss_deepseek.json", "tools/pytorch/make_gptoss_deepseek_autocast_grid.py",
                "requested bytes of blocks >= 512 B, absolute; torch.autocast('cpu', bfloat16) around forward and loss "
                "with CUDA's autocast policies (measure_hf.cuda_autocast_policies); routing forced by overwriting the "
                "router's top-k indices in place (measure_moe.py); CPU-only kernel scratch left out, as make_grid.py",
                grid, name_of)


if __name__ == "__main__":
    main()
