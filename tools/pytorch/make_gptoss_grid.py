#!/usr/bin/env python3
"""make_gptoss_grid.py -- the fixture grid of vramscope's gpt-oss (`model_type` gpt_oss): what
transformers 5.23's GptOssForCausalLM allocates, per phase, measured by measure_moe.py (mode-free,
one torch.profiler session per measurement, requested bytes of blocks >= 512 B, absolute; routing
forced to balanced or worst as vramscope's `--routing`), written to
tests/fixtures/moe_grid/gpt_oss.json.

The grid: fourteen shapes, each measured as inference, forward and training, covering every
experts implementation that runs on CPU (eager, batched_mm, grouped_mm), top-k 1-4, 4-16 experts,
balanced and worst routing, fp32 and bf16 weights, three training points under gradient
checkpointing (non-reentrant and reentrant), layer_types alternating sliding and full
attention (the config's default) with S above the window (one point below it). Attention is
eager only: GptOssPreTrainedModel sets `_supports_sdpa = False`, so from_config(...,
attn_implementation="sdpa") raises, and the default resolves to eager. The router's auxiliary loss
(output_router_logits) is off, the config's default.

    python3 make_gptoss_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_gptoss_grid.py --only grouped_mm   # re-measure the points whose name contains it
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import make_hf_grid as G
import make_moe_grid as MG

OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid")

# (hidden, intermediate (per expert), layers, heads, kv_heads, head_dim, vocab, S, B, experts,
#  top_k, experts_implementation, routing, dtype, sliding_window)
POINTS = [
    (64, 48, 2, 4, 2, 16, 1000, 16, 2, 4, 2, "grouped_mm", "balanced", "fp32", 8),
    (96, 64, 2, 6, 2, 16, 777, 24, 1, 8, 1, "eager", "balanced", "bf16", 8),
    (64, 80, 3, 4, 4, 16, 512, 20, 2, 4, 3, "grouped_mm", "worst", "bf16", 6),
    (128, 64, 2, 8, 2, 16, 1000, 12, 2, 16, 4, "eager", "worst", "fp32", 4),
    (64, 32, 2, 4, 1, 32, 640, 32, 1, 5, 2, "grouped_mm", "balanced", "bf16", 16),
    (96, 48, 2, 6, 3, 16, 900, 16, 3, 12, 4, "eager", "balanced", "fp32", 8),
    (64, 96, 2, 2, 1, 32, 1000, 16, 2, 6, 2, "grouped_mm", "worst", "fp32", 8),
    (128, 48, 2, 4, 2, 32, 777, 20, 1, 10, 3, "eager", "worst", "bf16", 12),
    (64, 64, 2, 4, 2, 16, 512, 24, 2, 8, 2, "batched_mm", "balanced", "fp32", 8),
    (96, 80, 2, 6, 2, 16, 640, 16, 1, 4, 4, "batched_mm", "worst", "bf16", 8),
    (64, 48, 4, 4, 2, 16, 1000, 8, 2, 6, 1, "grouped_mm", "balanced", "bf16", 16),
    (96, 64, 2, 6, 6, 16, 800, 12, 2, 16, 2, "eager", "balanced", "fp32", 4),
    (64, 40, 2, 4, 2, 16, 700, 20, 2, 7, 3, "grouped_mm", "balanced", "fp32", 10),
    (80, 48, 2, 4, 2, 20, 600, 18, 1, 9, 2, "eager", "worst", "bf16", 5),
]


def point(row):
    h, f, L, nh, kv, hd, V, S, B, E, k, impl, routing, dtype, w = row
    return dict(model_type="gpt_oss", hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
                head_dim=hd, vocab_size=V, max_position_embeddings=4096, tied=False, seq=S, batch=B, attn="eager",
                dtype=dtype, use_cache=True, logits_to_keep=0, checkpoint="none", optimizer="adamw_torch_fused",
                max_grad_norm=1.0, attention_mask="none", num_experts=E, top_k=k, experts=impl, routing=routing,
                sliding_window=w)


def name_of(p, kind):
    base = MG.name_of(p, kind)
    head, tail = base.rsplit(f" {p['attn']} {p['dtype']}", 1)
    return f"{head} w{p['sliding_window']} {p['attn']} {p['dtype']}{tail}"


# Gradient checkpointing (the Trainer's gradient_checkpointing_enable), training only: row of
# POINTS, use_reentrant.
CHECKPOINTED = [(0, False), (1, True), (3, False)]


def grid():
    todo = [(point(r), kind) for r in POINTS for kind in MG.TYPES3]
    for i, reentrant in CHECKPOINTED:
        p = point(POINTS[i])
        p["checkpoint"] = "reentrant" if reentrant else "non-reentrant"
        todo.append((p, "training"))
    return todo


def run_one(job):
    r = MG.run_one(job)
    r["name"] = name_of(*job)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", help="re-measure the points whose name contains this; keep the fixture's others")
    a = ap.parse_args()
    import transformers
    path = os.path.join(a.out, "gpt_oss.json")
    if a.only:
        doc, t0 = G.measure_only(path, grid(), run_one, name_of, a.only, maxtasksperchild=1)
        return G.write_fixture(path, doc, t0)
    results, t0 = G.measure_all(grid(), run_one, maxtasksperchild=1)
    doc = dict(generator="tools/pytorch/make_gptoss_grid.py", torch=torch.__version__, transformers=transformers.__version__,
               counted="requested bytes of blocks >= 512 B, absolute; routing forced by overwriting the router's "
                       "top-k indices in place (measure_moe.py); CPU-only kernel scratch left out, as make_grid.py; "
                       "attention eager (gpt_oss does not dispatch sdpa)",
               points=results)
    G.write_fixture(path, doc, t0)


if __name__ == "__main__":
    main()
