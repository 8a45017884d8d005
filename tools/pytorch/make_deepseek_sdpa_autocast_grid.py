#!/usr/bin/env python3
"""make_deepseek_sdpa_autocast_grid.py -- the fixture grid of DeepSeek-V3's sdpa under autocast where v's head
size is unlike q/k's (the published model: qk 192 = 128 nope + 64 rope, v 128): PyTorch's CPU runs
SDPA's math fallback (`_scaled_dot_product_attention_math`), as vramscope's `--sdpa-backend
cpu_flash` / `math` say. What transformers 5.23's DeepseekV3ForCausalLM allocates with
`torch.autocast("cpu", dtype=bfloat16 / float16)` around forward and loss (measure_hf.py's
`autocast`, CUDA's op policies registered on CPU, fp16 with the GradScaler), per phase, measured by
measure_moe.py (mode-free, one torch.profiler session per measurement, requested bytes of blocks
>= 512 B, absolute; routing forced as vramscope's `--routing`), written to
tests/fixtures/moe_grid/deepseek_sdpa_autocast.json.

Under autocast `scaled_dot_product_attention` is a lower-precision op (CPU and CUDA): q, k and v are
cast to the low type (over fp32 weights q is the fp32 `cat((q_pass, q_rot))`, k likewise), then the
math composite runs below the autocast key: it upcasts the bf16/fp16 q, k, v to fp32 itself
(`query_.to(at::kFloat)`, "keep query, key, value in high precision"), runs matmul, softmax and
matmul in fp32 and casts the output (and the weights it returns) back to the low type.

The grid: make_deepseek_grid.py's rows with unequal head sizes (v larger and smaller than q/k),
attention sdpa; bf16 autocast over fp32 and bf16 weights, fp16 over fp32 weights; every experts
implementation, balanced and worst routing, q_lora_rank null and set, inference, forward and
training, checkpointing off, non-reentrant and reentrant.

    python3 make_deepseek_sdpa_autocast_grid.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_deepseek_grid as DG
import make_gptoss_deepseek_autocast_grid as GD
import make_moe_autocast_grid as MA

ALL3 = ("inference", "forward", "training")


def points():
    """(row of make_deepseek_grid.py, overrides, autocast, profile types)."""
    return [
        (0, {}, "bf16", ALL3),  # grouped_mm balanced fp32, v 12 < qk 24
        (0, {}, "fp16", ("forward", "training")),
        (0, dict(checkpoint="non-reentrant"), "bf16", ("training",)),
        (2, {}, "bf16", ("forward", "training")),  # batched_mm worst bf16, v 20 > qk 16, 3 layers
        (2, dict(dtype="fp32", checkpoint="reentrant"), "fp16", ("training",)),
        # eager worst fp32, q_lora_rank null (one shared expert: vramscope refuses zero-width ones)
        (4, dict(n_shared_experts=1), "bf16", ("inference", "training")),
        (4, dict(n_shared_experts=1), "fp16", ("training",)),
        (7, dict(checkpoint="reentrant"), "bf16", ("training",)),  # grouped_mm worst bf16, q_lora_rank null
        (10, {}, "bf16", ("training",)),  # grouped_mm balanced bf16
        (1, dict(attn="sdpa", dtype="fp32", checkpoint="non-reentrant"), "fp16", ("training",)),  # eager balanced
    ]


def grid(families=None):
    todo = []
    for row, over, autocast, kinds in points():
        p = dict(DG.point(DG.POINTS[row]), **over, autocast=autocast)
        assert p["attn"] == "sdpa" and p["v_head_dim"] != p["qk_nope_head_dim"] + p["qk_rope_head_dim"]
        todo += [(p, kind) for kind in kinds]
    return todo


def main():
    MA.main_for("deepseek_sdpa_autocast.json", "tools/pytorch/make_deepseek_sdpa_autocast_grid.py",
                "requested bytes of blocks >= 512 B, absolute; torch.autocast('cpu', bfloat16 / float16) around forward and "
                "loss with CUDA's autocast policies (measure_hf.cuda_autocast_policies), torch.amp.GradScaler in fp16 "
                "training (no step skipped); sdpa's math fallback (v's head size unlike q's); routing forced by "
                "overwriting the router's top-k indices in place (measure_moe.py); CPU-only kernel scratch left out, "
                "as make_grid.py", grid, GD.name_of)


if __name__ == "__main__":
    main()
