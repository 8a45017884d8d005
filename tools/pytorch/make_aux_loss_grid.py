#!/usr/bin/env python3
"""make_aux_loss_grid.py -- the fixture grid of the MoE router's auxiliary loss: what transformers
5.23's Mixtral, Qwen3-MoE, Qwen2-MoE (shared expert on) and gpt-oss allocate with
`output_router_logits=True`, per phase, measured by measure_moe.py (mode-free, one torch.profiler
session per measurement, requested bytes of blocks >= 512 B, absolute; routing forced to balanced
or worst as vramscope's `--routing`), written to tests/fixtures/moe_grid/aux_loss.json.

With output_router_logits the model's `capture_outputs` hooks keep every router's logits (index 0
of `*TopKRouter.forward`'s output) until the output dies, and `load_balancing_loss_func` runs on
them whenever the flag is on -- with or without labels -- adding `router_aux_loss_coef * aux_loss`
to the loss when labels are given. DeepSeek-V3 has no such loss in transformers 5.23 (its
ForCausalLM never calls load_balancing_loss_func), so it is not in this grid.

The grid covers every experts implementation (all three run on CPU), top-k 1-4, 4-16 experts,
balanced and worst routing, fp32 and bf16, inference, forward and training, gradient
checkpointing off, non-reentrant and reentrant, router_aux_loss_coef 0.001 and 0.02, and the
collator's all-ones attention_mask (load_balancing_loss_func's masked branch). Token counts are
large enough (B*S >= 48) that the loss's (tokens, experts) tensors are blocks of >= 512 B.

    python3 make_aux_loss_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_aux_loss_grid.py --only qwen2_moe   # re-measure the points whose name contains it
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_gptoss_grid as GG
import make_hf_grid as G
import make_moe_grid as MG

OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid")

# make_moe_grid.py's rows (qwen2_moe: the shared expert's width last), then
# (router_aux_loss_coef, attention_mask, checkpoints, profile types).
ALL3 = ("inference", "forward", "training")
POINTS = [
    (("mixtral", 64, 96, 2, 4, 2, None, 1000, 32, 2, 4, 2, "grouped_mm", "balanced", "sdpa", "fp32"), 0.02, "none", ("non-reentrant",), ALL3),
    (("mixtral", 64, 64, 2, 4, 2, None, 512, 32, 2, 8, 1, "eager", "worst", "eager", "bf16"), 0.001, "none", ("reentrant",), ("forward", "training")),
    (("mixtral", 96, 128, 1, 6, 3, None, 777, 24, 3, 16, 4, "batched_mm", "balanced", "sdpa", "bf16"), 0.02, "ones", (), ("training",)),
    (("qwen3_moe", 64, 48, 2, 4, 2, 32, 1000, 32, 2, 8, 2, "grouped_mm", "worst", "sdpa", "bf16"), 0.001, "none", ("non-reentrant",), ALL3),
    (("qwen3_moe", 96, 64, 2, 6, 2, 16, 777, 24, 2, 16, 4, "eager", "balanced", "eager", "fp32"), 0.02, "none", (), ("forward", "training")),
    (("qwen3_moe", 64, 80, 1, 4, 4, 32, 512, 16, 4, 6, 3, "batched_mm", "worst", "sdpa", "fp32"), 0.001, "ones", ("reentrant",), ("training",)),
    (("qwen2_moe", 64, 48, 2, 4, 2, None, 1000, 32, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32", 96), 0.001, "none", ("non-reentrant",), ALL3),
    (("qwen2_moe", 96, 64, 1, 6, 2, None, 777, 24, 2, 4, 1, "eager", "worst", "eager", "bf16", 64), 0.02, "none", ("reentrant",), ("training",)),
    (("qwen2_moe", 64, 48, 2, 4, 4, None, 640, 16, 3, 12, 4, "batched_mm", "balanced", "sdpa", "bf16", 128), 0.02, "ones", (), ("forward", "training")),
]
# make_gptoss_grid.py's rows (eager attention only; the sliding window last).
GPT_OSS = [
    ((64, 48, 2, 4, 2, 16, 1000, 16, 4, 4, 2, "grouped_mm", "balanced", "fp32", 8), 0.02, "none", ("non-reentrant",), ALL3),
    ((96, 64, 2, 6, 2, 16, 777, 24, 2, 8, 1, "eager", "worst", "bf16", 8), 0.001, "none", ("reentrant",), ("training",)),
    ((64, 40, 2, 4, 2, 16, 700, 20, 3, 16, 4, "batched_mm", "worst", "fp32", 10), 0.001, "ones", (), ("forward", "training")),
]


def with_loss(p, coef, mask):
    p = dict(p, output_router_logits=True, router_aux_loss_coef=coef, attention_mask=mask)
    return p


def name_of(p, kind):
    base = (GG.name_of if p["model_type"] == "gpt_oss" else MG.name_of)(p, kind)
    head, tail = base.rsplit(f" {kind}", 1)
    mask = " mask=ones" if p["attention_mask"] == "ones" else ""
    return f"{head} aux{p['router_aux_loss_coef']}{mask} {kind}{tail}"


def grid():
    todo = []
    rows = [(MG.point(r), c, m, ck, kinds) for r, c, m, ck, kinds in POINTS] + [(GG.point(r), c, m, ck, kinds) for r, c, m, ck, kinds in GPT_OSS]
    for base, coef, mask, checkpoints, kinds in rows:
        p = with_loss(base, coef, mask)
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
    G.grid_main(OUT, "aux_loss.json", "tools/pytorch/make_aux_loss_grid.py",
                "requested bytes of blocks >= 512 B, absolute; routing forced by overwriting the router's "
                "top-k indices in place (measure_moe.py); output_router_logits on; CPU-only kernel scratch left out, as make_grid.py",
                grid, run_one, name_of)

if __name__ == "__main__":
    main()
