#!/usr/bin/env python3
"""make_moe_grid.py -- the fixture grid of vramscope's mixture-of-experts models: what transformers'
Mixtral and Qwen3-MoE allocate, per phase, measured by measure_moe.py (mode-free, one
torch.profiler session per measurement, requested bytes of blocks >= 512 B, absolute; routing
forced to balanced or worst as vramscope's `--routing`), written to tests/fixtures/moe_grid/moe.json.

The grid: per family six shapes (Qwen2-MoE's with shared experts of varying width), each measured as inference, forward and training, covering every
experts implementation that runs on CPU (eager, batched_mm, grouped_mm: all three do), top-k 1-4,
4-16 experts, balanced and worst routing, eager and sdpa attention, fp32 and bf16 weights; then
three training points under gradient checkpointing (non-reentrant and reentrant).

    python3 make_moe_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_moe_grid.py --only grouped_mm   # re-measure the points whose name contains it
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import make_hf_grid as G
import measure_moe as MOE

OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid")
TYPES3 = ("inference", "forward", "training")

# (family, hidden, intermediate (per expert), layers, heads, kv_heads, head_dim, vocab, S, B,
#  experts, top_k, experts_implementation, routing, attn, dtype)
POINTS = [
    ("mixtral", 64, 96, 1, 4, 2, None, 1000, 16, 2, 4, 2, "grouped_mm", "balanced", "sdpa", "fp32"),
    ("mixtral", 96, 128, 2, 6, 3, None, 777, 24, 1, 8, 1, "eager", "balanced", "eager", "fp32"),
    ("mixtral", 64, 160, 1, 4, 4, None, 512, 20, 2, 6, 3, "batched_mm", "worst", "sdpa", "bf16"),
    ("mixtral", 128, 96, 2, 8, 2, None, 1000, 12, 2, 16, 4, "grouped_mm", "worst", "eager", "bf16"),
    ("mixtral", 64, 64, 1, 4, 1, None, 640, 32, 1, 5, 2, "eager", "worst", "sdpa", "bf16"),
    ("mixtral", 96, 128, 1, 6, 2, None, 900, 16, 3, 12, 2, "batched_mm", "balanced", "eager", "fp32"),
    ("qwen3_moe", 64, 48, 1, 4, 2, 32, 1000, 16, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32"),
    ("qwen3_moe", 96, 64, 2, 6, 2, 16, 777, 24, 1, 16, 4, "eager", "balanced", "eager", "bf16"),
    ("qwen3_moe", 64, 80, 1, 4, 4, 32, 512, 20, 2, 4, 1, "batched_mm", "worst", "sdpa", "fp32"),
    ("qwen3_moe", 128, 64, 2, 4, 2, 64, 1000, 12, 2, 6, 3, "grouped_mm", "worst", "eager", "bf16"),
    ("qwen3_moe", 64, 96, 1, 2, 1, 32, 640, 32, 1, 10, 2, "eager", "worst", "sdpa", "fp32"),
    ("qwen3_moe", 96, 48, 1, 6, 3, 16, 900, 16, 3, 12, 4, "batched_mm", "balanced", "eager", "bf16"),
    # Qwen2-MoE: the shared expert's width last (its norm_topk_prob default, false).
    ("qwen2_moe", 64, 48, 1, 4, 2, None, 1000, 16, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32", 96),
    ("qwen2_moe", 96, 64, 2, 6, 2, None, 777, 24, 1, 16, 4, "eager", "balanced", "eager", "bf16", 128),
    ("qwen2_moe", 64, 80, 1, 4, 4, None, 512, 20, 2, 4, 1, "batched_mm", "worst", "sdpa", "fp32", 64),
    ("qwen2_moe", 128, 64, 2, 4, 2, None, 1000, 12, 2, 6, 3, "grouped_mm", "worst", "eager", "bf16", 160),
    ("qwen2_moe", 64, 96, 1, 2, 1, None, 640, 32, 1, 10, 2, "eager", "worst", "sdpa", "fp32", 48),
    ("qwen2_moe", 96, 48, 1, 6, 3, None, 900, 16, 3, 12, 4, "batched_mm", "balanced", "eager", "bf16", 192),
]


def point(row):
    mt, h, f, L, nh, kv, hd, V, S, B, E, k, impl, routing, attn, dtype = row[:16]
    p = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
             head_dim=hd, vocab_size=V, max_position_embeddings=4096, tied=False, seq=S, batch=B, attn=attn,
             dtype=dtype, use_cache=True, logits_to_keep=0, checkpoint="none", optimizer="adamw_torch_fused",
             max_grad_norm=1.0, attention_mask="none", num_experts=E, top_k=k, experts=impl, routing=routing)
    if len(row) > 16:
        p["shared_intermediate_size"] = row[16]
    return p


# Gradient checkpointing (the Trainer's gradient_checkpointing_enable), training only: row of
# POINTS, use_reentrant.
CHECKPOINTED = [(0, False), (13, True), (16, False)]


def name_of(p, kind):
    ck = "" if p["checkpoint"] == "none" else f" checkpoint={p['checkpoint']}"
    return (f"{p['model_type']} d{p['hidden_size']} F{p['intermediate_size']} L{p['num_layers']} h{p['num_heads']} "
            f"kv{p['num_kv_heads']}{' hd' + str(p['head_dim']) if p['head_dim'] else ''} V{p['vocab_size']} "
            f"S{p['seq']} B{p['batch']} E{p['num_experts']} k{p['top_k']}"
            f"{' shared' + str(p['shared_intermediate_size']) if p.get('shared_intermediate_size') else ''} {p['experts']} {p['routing']} "
            f"{p['attn']} {p['dtype']}{ck} {kind}")


def grid():
    todo = [(point(r), kind) for r in POINTS for kind in TYPES3]
    for i, reentrant in CHECKPOINTED:
        p = point(POINTS[i])
        p["checkpoint"] = "reentrant" if reentrant else "non-reentrant"
        todo.append((p, "training"))
    return todo


def run_one(job):
    p, kind = job
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    try:
        per, _, info = MOE.measure(p, kind)
    except Exception as e:  # a point PyTorch itself cannot run is reported, not written
        return dict(name=name_of(p, kind), error=f"{type(e).__name__}: {e}")
    phases = {ph: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"],
                       peak_node=s["peak_node"], start=s["start"], end=s.get("end", s["start"]),
                       peak_with_cpu_scratch=s["peak_with_cpu_scratch"], cpu_scratch_left_out=s["cpu_scratch"])
              for ph, s in per.items()}
    excess = {ph: v["peak_with_cpu_scratch"] - v["peak"] for ph, v in phases.items() if v["peak_with_cpu_scratch"] != v["peak"]}
    return dict(name=name_of(p, kind), point=p, profile_type=kind, info=info, phases=phases, cpu_scratch_peak_excess=excess)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", help="re-measure the points whose name contains this; keep the fixture's others")
    a = ap.parse_args()
    import transformers
    path = os.path.join(a.out, "moe.json")
    if a.only:
        doc, t0 = G.measure_only(path, grid(), run_one, name_of, a.only, maxtasksperchild=1)
        return G.write_fixture(path, doc, t0)
    # One point per worker process: the routing wrapper is installed on the router class.
    results, t0 = G.measure_all(grid(), run_one, maxtasksperchild=1)
    doc = dict(generator="tools/pytorch/make_moe_grid.py", torch=torch.__version__, transformers=transformers.__version__,
               counted="requested bytes of blocks >= 512 B, absolute; routing forced by overwriting the router's "
                       "top-k indices in place (measure_moe.py); CPU-only kernel scratch left out, as make_grid.py",
               points=results)
    G.write_fixture(path, doc, t0)


if __name__ == "__main__":
    main()
