#!/usr/bin/env python3
"""make_moe_fp16_autocast_grid.py -- the fixture grid of the mixture-of-experts models under fp16 autocast
(the Trainer's `fp16=True`): what transformers 5.23's Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss and
DeepSeek-V3 allocate with `torch.autocast("cpu", dtype=torch.float16)` around forward and loss
(measure_hf.py's `autocast`, with CUDA's op policies registered on CPU: `cuda_autocast_policies`)
and, in training, accelerate's `torch.amp.GradScaler`: `scaler.scale(loss).backward()`, then
`scaler.unscale_(optimizer)` (accelerator.clip_grad_norm_), clip_grad_norm_, `scaler.step` and
`scaler.update()`; per phase, measured by measure_moe.py (mode-free, one torch.profiler session per
measurement, requested bytes of blocks >= 512 B, absolute; routing forced as vramscope's
`--routing`), written to tests/fixtures/moe_grid/autocast_fp16.json.

fp16 differs from bf16 autocast (make_moe_autocast_grid.py, make_gptoss_deepseek_autocast_grid.py) in
the type autocast casts to and in the scaler, whose tensors are 0-d (the scale, the growth tracker,
inv_scale, found_inf: below the grid's 512 B): its unscale_ and inf check work on the gradients in
place. The weights are fp32 (the Trainer's fp16=True over fp16 weights stops in GradScaler,
"Attempting to unscale FP16 gradients"). Every step must run: measure_hf.py asserts the scale never
backed off (a skipped step makes no optimizer state, which vramscope's meta run cannot see).

The grid: the fp32 rows of the bf16 autocast grids, per family three shapes, every experts
implementation, top-k 1-4, balanced and worst routing, eager and sdpa (DeepSeek-V3's with equal
head sizes: the CPU flash kernel), inference, forward and training, gradient checkpointing off,
non-reentrant and reentrant.

    python3 make_moe_fp16_autocast_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_moe_fp16_autocast_grid.py --only qwen3_moe   # re-measure the points whose name contains it
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_deepseek_grid as DG
import make_gptoss_deepseek_autocast_grid as GD
import make_gptoss_grid as GG
import make_moe_autocast_grid as MA
import make_moe_grid as MG

ALL3 = ("inference", "forward", "training")


def rows():
    """(point, checkpoints, profile types): the bf16 grids' fp32 rows, fewer profile types on all
    but each family's first."""
    out, seen = [], set()
    tables = [(MG.point, r, ck) for r, ck, _ in MA.POINTS] + [(GG.point, r, ck) for r, ck, _ in GD.GPT_OSS] + [(DG.point, r, ck) for r, ck, _ in GD.DEEPSEEK]
    for make, row, checkpoints in tables:
        p = make(row)
        if p["dtype"] != "fp32":
            continue
        first = p["model_type"] not in seen
        seen.add(p["model_type"])
        out.append((dict(p, autocast="fp16"), checkpoints, ALL3 if first else ("forward", "training")))
    return out


def name_of(p, kind):
    return (GD if p["model_type"] in ("gpt_oss", "deepseek_v3") else MA).name_of(p, kind)


def grid(families=None):
    todo = []
    for p, checkpoints, kinds in rows():
        if families and p["model_type"] not in families:
            continue
        todo += [(p, kind) for kind in kinds]
        todo += [(dict(p, checkpoint=ck), "training") for ck in checkpoints]
    return todo


def main():
    MA.main_for("autocast_fp16.json", "tools/pytorch/make_moe_fp16_autocast_grid.py",
                "requested bytes of blocks >= 512 B, absolute; torch.autocast('cpu', float16) around forward and loss "
                "with CUDA's autocast policies (measure_hf.cuda_autocast_policies), torch.amp.GradScaler in training "
                "(no step skipped); routing forced by overwriting the router's top-k indices in place (measure_moe.py); "
                "CPU-only kernel scratch left out, as make_grid.py", grid, name_of)


if __name__ == "__main__":
    main()
