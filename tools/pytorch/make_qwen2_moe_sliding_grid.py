#!/usr/bin/env python3
"""make_qwen2_moe_sliding_grid.py -- the fixture grid of Qwen2-MoE with a sliding window: what
transformers 5.23's Qwen2MoeForCausalLM allocates with `use_sliding_window=True`, per phase,
measured by measure_moe.py (mode-free, one torch.profiler session per measurement, requested
bytes of blocks >= 512 B, absolute; routing forced to balanced or worst as vramscope's
`--routing`), written to tests/fixtures/moe_grid/qwen2_moe_sliding.json.

Qwen2MoeConfig.__post_init__ keeps `sliding_window` only with use_sliding_window (else 0) and,
without layer_types, makes layer i "sliding_attention" when (i + 1) % 2 and i < max_window_layers
(layers 0, 2, 4 ... below it), the rest "full_attention". Qwen2MoeModel.forward builds both
masks every time (create_causal_mask, create_sliding_window_causal_mask) and hands each layer
its type's; under sdpa the full one is skipped (is_causal) and the sliding one is built unless
the keys are fewer than the window (_ignore_causal_mask_sdpa), so a layer's sdpa call depends
on its type (a mask or none: repeat_kv or enable_gqa).

The grid covers windows shorter than, equal to and longer than the context, max_window_layers
cutting the stack (1, 2, 3), above it (28) and 0 (no layer slides), one to four layers (every layer sliding: one
layer), eager and sdpa, every experts implementation, balanced and worst routing, fp32 and bf16,
inference, forward and training, checkpointing off, non-reentrant and reentrant, the collator's
all-ones attention_mask, and LoRA (peft) on the attention.

    python3 make_qwen2_moe_sliding_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_qwen2_moe_sliding_grid.py --only W8  # re-measure the points whose name contains it
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_hf_grid as G
import make_moe_grid as MG

OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid")

ALL3 = ("inference", "forward", "training")
# make_moe_grid.py's row (the shared expert's width last), then (sliding_window,
# max_window_layers, extra point fields, checkpoints, profile types).
POINTS = [
    (("qwen2_moe", 64, 48, 3, 4, 2, None, 1000, 16, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32", 96), 8, 28, {}, ("non-reentrant",), ALL3),
    (("qwen2_moe", 96, 64, 2, 6, 2, None, 777, 24, 1, 16, 4, "eager", "worst", "eager", "bf16", 128), 32, 1, {}, ("reentrant",), ("forward", "training")),
    (("qwen2_moe", 64, 80, 4, 4, 4, None, 512, 20, 2, 4, 1, "batched_mm", "worst", "sdpa", "bf16", 64), 12, 2, {}, (), ("inference", "training")),
    (("qwen2_moe", 64, 48, 1, 4, 1, None, 640, 16, 2, 6, 2, "batched_mm", "balanced", "eager", "fp32", 48), 16, 28, {}, ("non-reentrant",), ("training",)),
    (("qwen2_moe", 128, 64, 3, 4, 2, None, 1000, 24, 2, 6, 3, "grouped_mm", "worst", "eager", "fp32", 160), 6, 3, {}, ("reentrant",), ("inference", "training")),
    (("qwen2_moe", 96, 48, 2, 6, 3, None, 900, 32, 2, 12, 4, "eager", "balanced", "sdpa", "fp32", 192), 40, 28, {}, (), ("forward", "training")),
    (("qwen2_moe", 64, 48, 2, 4, 2, None, 1000, 24, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "bf16", 96), 10, 28, dict(attention_mask="ones"), (), ("training",)),
    # max_window_layers 0: no layer slides, but the sliding mask is still built with the window.
    (("qwen2_moe", 64, 48, 2, 4, 2, None, 1000, 24, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32", 96), 40, 0, {}, (), ("training",)),
    (("qwen2_moe", 64, 48, 2, 4, 2, None, 1000, 24, 2, 8, 2, "eager", "worst", "eager", "fp32", 96), 8, 0, {}, (), ("forward",)),
    (("qwen2_moe", 64, 48, 3, 4, 2, None, 1000, 20, 2, 8, 2, "batched_mm", "worst", "sdpa", "fp32", 64), 8, 28,
     dict(lora_r=8, lora_alpha=16, lora_dropout=0.0, target_modules="q_proj,v_proj"), (), ("training",)),
]


def point(row, window, max_window_layers, extra):
    return dict(MG.point(row), sliding_window=window, max_window_layers=max_window_layers, **extra)


def name_of(p, kind):
    base = MG.name_of(p, kind)
    head, tail = base.rsplit(f" {kind}", 1)
    mask = " mask=ones" if p["attention_mask"] == "ones" else ""
    lora = f" lora r{p['lora_r']} {p['target_modules']}" if p.get("lora_r") else ""
    return f"{head} W{p['sliding_window']} mwl{p['max_window_layers']}{mask}{lora} {kind}{tail}"


def grid():
    todo = []
    for row, window, mwl, extra, checkpoints, kinds in POINTS:
        p = point(row, window, mwl, extra)
        todo += [(p, kind) for kind in kinds]
        for ck in checkpoints:
            todo.append((dict(p, checkpoint=ck), "training"))
    return todo


def run_one(job):
    p, kind = job
    r = MG.run_one(job)
    r["name"] = name_of(p, kind)
    return r


def main():
    G.grid_main(OUT, "qwen2_moe_sliding.json", "tools/pytorch/make_qwen2_moe_sliding_grid.py",
                "requested bytes of blocks >= 512 B, absolute; routing forced by overwriting the router's "
                "top-k indices in place (measure_moe.py); use_sliding_window on; CPU-only kernel scratch left out, as make_grid.py",
                grid, run_one, name_of, libs=("transformers", "peft"))

if __name__ == "__main__":
    main()
