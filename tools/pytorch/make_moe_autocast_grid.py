#!/usr/bin/env python3
"""make_moe_autocast_grid.py -- the fixture grid of the mixture-of-experts models under autocast (the
Trainer's `bf16=True`): what transformers 5.23's Mixtral, Qwen3-MoE and Qwen2-MoE allocate with
`torch.autocast("cpu", dtype=torch.bfloat16)` around forward and loss (measure_hf.py's
`autocast`), per phase, measured by measure_moe.py (mode-free, one torch.profiler session per
measurement, requested bytes of blocks >= 512 B, absolute; routing forced as vramscope's
`--routing`), written to tests/fixtures/moe_grid/autocast.json.

CPU autocast and CUDA autocast have different op lists (aten/src/ATen/autocast_mode.{h,cpp}). What
these models run under it is the same on both (tools/pytorch/README.md, "MoE autocast"): the
linears, bmm and SDPA are lower-precision ops on both; torch._grouped_mm is on neither (transformers
casts its input to the weight's dtype itself, so with fp32 weights the grouped experts run in fp32);
the router's softmax and the loss's log_softmax/nll_loss get fp32 inputs (`.float()`, dtype=float32)
so CUDA's fp32 policies change nothing; the fp32 RMSNorm and RoPE run on fp32 tensors. The router's
auxiliary loss is not in this grid: its softmax (no dtype) of the bf16 logits is fp32 on CUDA and
bf16 on CPU, and vramscope refuses autocast with --output-router-logits.

The grid: per family six shapes over fp32 weights (fp32 master weights, the usual case) and bf16
weights, every experts implementation, top-k 1-4, 4-16 experts, balanced and worst routing, eager
and sdpa (the CPU flash kernel, as every CPU sdpa row), inference, forward and training, and
gradient checkpointing off, non-reentrant and reentrant.

    python3 make_moe_autocast_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_moe_autocast_grid.py --only qwen3_moe   # re-measure the points whose name contains it
"""
import functools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_hf_grid as G
import make_moe_grid as MG

OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid")
ALL3 = ("inference", "forward", "training")

# make_moe_grid.py's rows (qwen2_moe: the shared expert's width last), then (checkpoints, profile types).
POINTS = [
    (("mixtral", 64, 96, 1, 4, 2, None, 1000, 16, 2, 4, 2, "grouped_mm", "balanced", "sdpa", "fp32"), ("non-reentrant",), ALL3),
    (("mixtral", 96, 128, 2, 6, 3, None, 777, 24, 1, 8, 1, "eager", "balanced", "eager", "fp32"), (), ALL3),
    (("mixtral", 64, 160, 1, 4, 4, None, 512, 20, 2, 6, 3, "batched_mm", "worst", "sdpa", "fp32"), ("reentrant",), ALL3),
    (("mixtral", 128, 96, 2, 8, 2, None, 1000, 12, 2, 16, 4, "grouped_mm", "worst", "eager", "bf16"), (), ("training",)),
    (("mixtral", 64, 64, 1, 4, 1, None, 640, 32, 1, 5, 2, "eager", "worst", "sdpa", "bf16"), (), ("forward", "training")),
    (("mixtral", 96, 128, 1, 6, 2, None, 900, 16, 3, 12, 2, "batched_mm", "balanced", "eager", "bf16"), (), ("training",)),
    (("qwen3_moe", 64, 48, 1, 4, 2, 32, 1000, 16, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32"), ("reentrant",), ALL3),
    (("qwen3_moe", 96, 64, 2, 6, 2, 16, 777, 24, 1, 16, 4, "eager", "balanced", "eager", "fp32"), ("non-reentrant",), ALL3),
    (("qwen3_moe", 64, 80, 1, 4, 4, 32, 512, 20, 2, 4, 1, "batched_mm", "worst", "sdpa", "fp32"), (), ALL3),
    (("qwen3_moe", 128, 64, 2, 4, 2, 64, 1000, 12, 2, 6, 3, "grouped_mm", "worst", "eager", "bf16"), (), ("training",)),
    (("qwen3_moe", 64, 96, 1, 2, 1, 32, 640, 32, 1, 10, 2, "eager", "worst", "sdpa", "bf16"), (), ("forward", "training")),
    (("qwen3_moe", 96, 48, 1, 6, 3, 16, 900, 16, 3, 12, 4, "batched_mm", "balanced", "eager", "bf16"), (), ("training",)),
    (("qwen2_moe", 64, 48, 1, 4, 2, None, 1000, 16, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32", 96), ("non-reentrant",), ALL3),
    (("qwen2_moe", 96, 64, 2, 6, 2, None, 777, 24, 1, 16, 4, "eager", "balanced", "eager", "fp32", 128), (), ALL3),
    (("qwen2_moe", 64, 80, 1, 4, 4, None, 512, 20, 2, 4, 1, "batched_mm", "worst", "sdpa", "fp32", 64), ("reentrant",), ALL3),
    (("qwen2_moe", 128, 64, 2, 4, 2, None, 1000, 12, 2, 6, 3, "grouped_mm", "worst", "eager", "bf16", 160), (), ("training",)),
    (("qwen2_moe", 64, 96, 1, 2, 1, None, 640, 32, 1, 10, 2, "eager", "worst", "sdpa", "bf16", 48), (), ("forward", "training")),
    (("qwen2_moe", 96, 48, 1, 6, 3, None, 900, 16, 3, 12, 4, "batched_mm", "balanced", "eager", "bf16", 192), (), ("training",)),
]


def name_of(p, kind):
    head, tail = MG.name_of(p, kind).rsplit(f" {kind}", 1)
    return f"{head} autocast={p['autocast']} {kind}{tail}"


def grid(families=None):
    todo = []
    for row, checkpoints, kinds in POINTS:
        if families and row[0] not in families:
            continue
        p = dict(MG.point(row), autocast="bf16")
        todo += [(p, kind) for kind in kinds]
        todo += [(dict(p, checkpoint=ck), "training") for ck in checkpoints]
    return todo


def run_named(name_of, job):
    """make_moe_grid.py's measurement of one point, named as the grid names it."""
    p, kind = job
    r = MG.run_one(job)
    r["name"] = name_of(p, kind)
    return r


def main_for(fixture, generator, counted, grid, name_of):
    """The MoE autocast grids' command line (make_hf_grid.grid_main) over tests/fixtures/moe_grid."""
    G.grid_main(OUT, fixture, generator, counted, grid, functools.partial(run_named, name_of), name_of)

def main():
    main_for("autocast.json", "tools/pytorch/make_moe_autocast_grid.py",
             "requested bytes of blocks >= 512 B, absolute; torch.autocast('cpu', bfloat16) around forward and loss; "
             "routing forced by overwriting the router's top-k indices in place (measure_moe.py); CPU-only kernel "
             "scratch left out, as make_grid.py", grid, name_of)


if __name__ == "__main__":
    main()
