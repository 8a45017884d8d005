#!/usr/bin/env python3
"""make_lora_grid.py -- the fixture grid of LoRA over the `hf` flavour: what transformers 5.23 +
peft 0.21.2 allocate, per phase, measured by measure_hf.py (mode-free, one torch.profiler session
per measurement, requested bytes of blocks >= 512 B, absolute), written to
tests/fixtures/hf_grid/lora.json.

The grid: for each model_type (llama, mistral, qwen2, qwen3), LoRA (get_peft_model with
LoraConfig(r, lora_alpha, lora_dropout, target_modules)) on bf16 weights (fp32 adapters,
peft's autocast_adapter_dtype) with target_modules all-linear and q_proj,v_proj x gradient
checkpointing off | non-reentrant, r 8-64, as training, forward and inference; then dropout 0.05,
fp32 weights, reentrant checkpointing, eager attention, the foreach AdamW and forward-loss.

    JOBS=2 python3 make_lora_grid.py
Needs `pip install torch==2.15.0 transformers==5.23.0 peft==0.21.2`.
"""
import json
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import make_hf_grid as G
import measure_hf as H

OUT = os.path.join(HERE, "../../tests/fixtures/hf_grid")
RANKS = (8, 16, 32, 64)


def lora(mt, i, r, targets, **opts):
    p = G.point(mt, i, dtype=opts.pop("dtype", "bf16"), **opts)
    p.update(lora_r=r, lora_alpha=2 * r if r < 32 else r, lora_dropout=opts.get("lora_dropout", 0.0), target_modules=targets)
    return p


def name_of(p, kind):
    base = G.name_of(p, kind)
    tag = f" lora r{p['lora_r']} a{p['lora_alpha']} {p['target_modules']}"
    if p["lora_dropout"]:
        tag += f" dropout={p['lora_dropout']}"
    return base[: -len(kind) - 1] + tag + " " + kind


def grid():
    todo = []
    for t, mt in enumerate(H.MODEL_TYPES):
        k = 0
        for targets in ("all-linear", "q_proj,v_proj"):
            for ck in ("none", "non-reentrant"):
                p = lora(mt, t * 2 + k, RANKS[(t + k) % 4], targets, checkpoint=ck)
                kinds = ("training", "forward", "inference") if k % 2 == 0 else ("training",)
                todo += [(p, kind) for kind in kinds]
                k += 1
        todo.append((lora(mt, t + 3, RANKS[t], "all-linear", lora_dropout=0.05), "training"))
        todo.append((lora(mt, t + 1, RANKS[(t + 1) % 4], "q_proj,v_proj", lora_dropout=0.05, checkpoint="non-reentrant"), "training"))
        todo.append((lora(mt, t + 2, 8, "all-linear", dtype="fp32"), "training"))
        todo.append((lora(mt, t + 4, 16, "all-linear", checkpoint="reentrant"), "training"))
        todo.append((lora(mt, t + 5, 32, "q_proj,v_proj", attn="eager"), "training"))
        todo.append((lora(mt, t + 6, 16, "all-linear", optimizer="adamw_torch_foreach"), "training"))
        todo.append((lora(mt, t, 8, "all-linear"), "forward-loss"))
    for p, _ in todo:
        if p["lora_dropout"] is None:
            p["lora_dropout"] = 0.0
    return todo


def run_one(job):
    r = G.run_one(job)
    r["name"] = name_of(*job)
    return r


def main():
    import peft
    import transformers
    todo = grid()
    t0 = time.time()
    with mp.get_context("fork").Pool(int(os.environ.get("JOBS", "1")), maxtasksperchild=16) as pool:
        results = []
        for i, r in enumerate(pool.imap(run_one, todo, chunksize=1)):
            results.append(r)
            print(f"[{i + 1}/{len(todo)} {time.time() - t0:.0f}s] {r['name']}: "
                  + (r["error"] if "error" in r else " ".join(f"{k}={v['peak']}" for k, v in r["phases"].items())), flush=True)
    errors = [r for r in results if "error" in r]
    if errors:
        print(f"{len(errors)} points failed in PyTorch; nothing written")
        sys.exit(1)
    doc = dict(generator="tools/pytorch/make_lora_grid.py", torch=torch.__version__, transformers=transformers.__version__,
               peft=peft.__version__,
               counted="requested bytes of blocks >= 512 B, absolute; the step is the Trainer's (measure_hf.py) over "
                       "the parameters that require grad; dropout is CPU's kernel (an x-typed noise tensor)",
               points=results)
    path = os.path.join(OUT, "lora.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {len(results)} measurements to {os.path.relpath(path)} in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
