#!/usr/bin/env python3
"""make_moe_aux_autocast_grid.py -- the fixture grid of the MoE router's auxiliary loss under autocast: what
transformers 5.23's Mixtral, Qwen3-MoE, Qwen2-MoE and gpt-oss allocate with `output_router_logits=True`
inside `torch.autocast("cpu", dtype=bfloat16 / float16)` (the Trainer's bf16=True / fp16=True;
measure_hf.py's `autocast` with CUDA's op policies registered on CPU, `cuda_autocast_policies`, and
fp16's GradScaler), per phase, measured by measure_moe.py (mode-free, one torch.profiler session per
measurement, requested bytes of blocks >= 512 B, absolute; routing forced as vramscope's
`--routing`), written to tests/fixtures/moe_grid/aux_loss_autocast.json.

Under autocast the routers' kept logits are the low-precision output of their autocast linear, and
load_balancing_loss_func's `softmax(layer_gate, dim=-1)` (no dtype) is on CUDA's
fp32_set_opt_dtype list: it runs with dtype=float32 -- a bf16 input converted first (a copy),
an fp16 one through `_softmax(half_to_float=True)` on CUDA (the CPU's conversion copy is left out as
CPU-only scratch, tools/pytorch/README.md rule 4). CPU autocast has softmax on no list, so the
policy registered here is what makes the CPU run CUDA's. DeepSeek-V3 has no aux loss.

The grid: make_aux_loss_grid.py's rows (every experts implementation, top-k 1-4, balanced and worst,
eager and sdpa, coefficients 0.001 and 0.02, the all-ones attention mask, checkpointing off,
non-reentrant and reentrant, inference, forward and training) under bf16 autocast over their fp32
and bf16 weights, and their fp32 rows under fp16 autocast; and two wide rows (48-64 experts, a small vocabulary) where
the loss's softmax sets the loss phase's peak.

    python3 make_moe_aux_autocast_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_moe_aux_autocast_grid.py --only gpt_oss   # re-measure the points whose name contains it
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_aux_loss_grid as AL
import make_gptoss_grid as GG
import make_moe_autocast_grid as MA
import make_moe_grid as MG


# Many experts, a small vocabulary and hidden size: the loss's (tokens, experts) tensors outweigh
# the logits, so the softmax's fp32 conversion (bf16: a copy; fp16: none on CUDA) sets the loss
# phase's peak. (make_moe_grid.py's row layout, router_aux_loss_coef, attention_mask, profile types.)
WIDE = [
    (("mixtral", 32, 32, 2, 2, 1, None, 128, 64, 4, 64, 2, "grouped_mm", "balanced", "eager", "fp32"), 0.02, "none", ("forward", "training")),
    (("qwen3_moe", 32, 32, 1, 2, 1, 16, 96, 48, 4, 48, 3, "batched_mm", "worst", "sdpa", "fp32"), 0.001, "ones", ("training",)),
]


def name_of(p, kind):
    head, tail = AL.name_of(p, kind).rsplit(f" {kind}", 1)
    return f"{head} autocast={p['autocast']} {kind}{tail}"


def grid(families=None):
    todo = []
    rows = [(MG.point(r), c, m, ck, kinds) for r, c, m, ck, kinds in AL.POINTS] + [(GG.point(r), c, m, ck, kinds) for r, c, m, ck, kinds in AL.GPT_OSS]
    rows += [(MG.point(r), c, m, (), kinds) for r, c, m, kinds in WIDE]
    for base, coef, mask, checkpoints, kinds in rows:
        if families and base["model_type"] not in families:
            continue
        p = dict(AL.with_loss(base, coef, mask), autocast="bf16")
        todo += [(p, kind) for kind in kinds]
        todo += [(dict(p, checkpoint=ck), "training") for ck in checkpoints]
        if p["dtype"] == "fp32":
            # fp16 autocast over fp32 weights (the Trainer's fp16=True; fp16 weights stop in GradScaler).
            todo += [(dict(p, autocast="fp16"), kind) for kind in ("forward", "training")]
    return todo


def main():
    MA.main_for("aux_loss_autocast.json", "tools/pytorch/make_moe_aux_autocast_grid.py",
                "requested bytes of blocks >= 512 B, absolute; output_router_logits on; torch.autocast('cpu', bfloat16 / "
                "float16) around forward and loss with CUDA's autocast policies (measure_hf.cuda_autocast_policies), "
                "torch.amp.GradScaler in fp16 training (no step skipped); routing forced by overwriting the router's top-k "
                "indices in place (measure_moe.py); CPU-only kernel scratch left out, as make_grid.py", grid, name_of)


if __name__ == "__main__":
    main()
