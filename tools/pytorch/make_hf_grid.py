#!/usr/bin/env python3
"""make_hf_grid.py -- the fixture grid of the `hf` flavour: what transformers' own modeling code
allocates, per phase, measured by measure_hf.py (mode-free, one torch.profiler session per
measurement, requested bytes of blocks >= 512 B, absolute), written to
tests/fixtures/hf_grid/hf.json.

The grid: for each model_type (llama, mistral, qwen2, qwen3) eight points, attn eager|sdpa x
weights fp32|bf16 x gradient checkpointing off|non-reentrant, on shapes that vary per point
(GQA ratios 1-5, head_dim 16-64 incl. qwen3's explicit head_dim, vocabularies whose logits rows
are not multiples of 512 B, S 16-128, B 1-4), each measured as inference, forward and training;
then single-option points: tied heads, use_cache off, logits_to_keep, reentrant checkpointing, an
all-ones attention_mask, forward-loss, and the optimizers (foreach, for-loop, SGD, adafactor).

    python3 make_hf_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_hf_grid.py --quick    # the first point of each model type only (a smoke run)
    python3 make_hf_grid.py --only adafactor   # re-measure the points whose name contains it ('|':
                                               # any of several), keep the fixture's others
Needs `pip install torch transformers` (pinned in the file: the transformers release measured).
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import measure_hf as H

OUT = os.path.join(HERE, "../../tests/fixtures/hf_grid")
TYPES3 = ("inference", "forward", "training")

# (hidden, intermediate, layers, heads, kv_heads, head_dim or None, vocab, S, B)
SHAPES = [
    (128, 384, 2, 4, 2, None, 1000, 64, 2),
    (96, 256, 1, 6, 3, None, 777, 48, 3),
    (64, 192, 3, 4, 4, None, 2048, 32, 1),
    (128, 320, 2, 8, 2, None, 1000, 16, 4),
    (160, 448, 2, 5, 1, None, 512, 40, 2),
    (128, 384, 1, 2, 1, 64, 1000, 128, 1),
    (64, 128, 2, 4, 2, 32, 777, 24, 2),
    (192, 512, 2, 6, 2, None, 1024, 32, 2),
]


def point(mt, i, **opts):
    h, f, L, nh, kv, hd, V, S, B = SHAPES[i % len(SHAPES)]
    if hd and mt != "qwen3":
        hd = None  # an explicit head_dim is qwen3's (and mistral's) habit; keep the others at hidden/heads
    p = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
             head_dim=hd, vocab_size=V, max_position_embeddings=4096, tied=False, seq=S, batch=B, attn="sdpa",
             dtype="fp32", use_cache=True, logits_to_keep=0, checkpoint="none", optimizer="adamw_torch_fused",
             max_grad_norm=1.0, attention_mask="none")
    p.update(opts)
    return p


def name_of(p, kind):
    s = (f"{p['model_type']} d{p['hidden_size']} F{p['intermediate_size']} L{p['num_layers']} h{p['num_heads']} "
         f"kv{p['num_kv_heads']}{' hd' + str(p['head_dim']) if p['head_dim'] else ''} V{p['vocab_size']} "
         f"S{p['seq']} B{p['batch']} {p['attn']} {p['dtype']}")
    for k, default in (("checkpoint", "none"), ("optimizer", "adamw_torch_fused"), ("attention_mask", "none")):
        if p[k] != default:
            s += f" {k}={p[k]}"
    if p["tied"]:
        s += " tied"
    if not p["use_cache"]:
        s += " use_cache=false"
    if p["logits_to_keep"]:
        s += f" logits_to_keep={p['logits_to_keep']}"
    return f"{s} {kind}"


def grid(quick=False):
    todo = []
    for t, mt in enumerate(H.MODEL_TYPES):
        k = 0
        for attn in ("eager", "sdpa"):
            for dtype in ("fp32", "bf16"):
                for ck in ("none", "non-reentrant"):
                    if quick and k > 0:
                        continue
                    p = point(mt, t * 2 + k, attn=attn, dtype=dtype, checkpoint=ck)
                    todo += [(p, kind) for kind in TYPES3]
                    k += 1
    if quick:
        return todo
    singles = [
        point("llama", 0, tied=True), point("qwen2", 1, tied=True),
        point("llama", 3, use_cache=False), point("mistral", 2, use_cache=False, attn="eager"),
        point("llama", 4, logits_to_keep=1), point("qwen3", 5, logits_to_keep=1, dtype="bf16"),
        point("llama", 1, checkpoint="reentrant"), point("qwen3", 6, checkpoint="reentrant", attn="eager"),
        point("llama", 0, attention_mask="ones"), point("mistral", 7, attention_mask="ones", attn="eager"),
    ]
    # logits_to_keep is generation's option: with labels the loss needs every position's logits
    todo += [(p, kind) for p in singles for kind in TYPES3 if not (p["logits_to_keep"] and kind == "training")]
    todo += [(point(mt, i), "forward-loss") for i, mt in enumerate(H.MODEL_TYPES)]
    optims = [point("llama", 0, optimizer=o) for o in ("adamw_torch_foreach", "adamw_torch_forloop", "sgd")]
    optims += [point("qwen2", 3, optimizer="adamw_torch_foreach", dtype="bf16"), point("mistral", 6, optimizer="sgd", max_grad_norm=0.0)]
    # The Trainer's adafactor: fp32 state either way, fp32 copies of bf16 weights and gradients.
    optims += [point("llama", 0, optimizer="adafactor"), point("qwen2", 3, optimizer="adafactor", dtype="bf16"),
               point("qwen3", 5, optimizer="adafactor", dtype="bf16", checkpoint="non-reentrant"),
               point("mistral", 6, optimizer="adafactor", dtype="bf16", tied=True, max_grad_norm=0.0)]
    todo += [(p, "training") for p in optims]
    return todo


def run_one(job):
    p, kind = job
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    try:
        per, _, info = H.measure(p, kind)
    except Exception as e:  # a point PyTorch itself cannot run is reported, not written
        return dict(name=name_of(p, kind), error=f"{type(e).__name__}: {e}")
    phases = {ph: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"],
                       peak_node=s["peak_node"], start=s["start"], end=s.get("end", s["start"]),
                       peak_with_cpu_scratch=s["peak_with_cpu_scratch"], cpu_scratch_left_out=s["cpu_scratch"])
              for ph, s in per.items()}
    excess = {ph: v["peak_with_cpu_scratch"] - v["peak"] for ph, v in phases.items() if v["peak_with_cpu_scratch"] != v["peak"]}
    return dict(name=name_of(p, kind), point=p, profile_type=kind, info=info, phases=phases, cpu_scratch_peak_excess=excess)


def measure_all(todo, run, maxtasksperchild=16):
    """Every (point, kind) of `todo` through `run` in JOBS worker processes, printed as they
    finish; exits (nothing written) when PyTorch itself failed on a point."""
    t0 = time.time()
    with mp.get_context("fork").Pool(int(os.environ.get("JOBS", "1")), maxtasksperchild=maxtasksperchild) as pool:
        results = []
        for i, r in enumerate(pool.imap(run, todo, chunksize=1)):
            results.append(r)
            print(f"[{i + 1}/{len(todo)} {time.time() - t0:.0f}s] {r['name']}: "
                  + (r["error"] if "error" in r else " ".join(f"{k}={v['peak']}" for k, v in r["phases"].items())), flush=True)
    errors = [r for r in results if "error" in r]
    if errors:
        print(f"{len(errors)} points failed in PyTorch; nothing written")
        sys.exit(1)
    return results, t0


def measure_only(path, todo, run, name, only, maxtasksperchild=16):
    """Measure the points of `todo` whose name (`name(job)`) contains `only` (alternatives
    separated by '|') and merge them into
    the fixture at `path`: its other measurements are kept, every point in `todo`'s order. A
    point of `todo` that is neither measured nor in the fixture is an error (run the whole grid)."""
    with open(path) as f:
        doc = json.load(f)
    have = {r["name"]: r for r in doc["points"]}
    names = [name(*job) for job in todo]
    picked = lambda n: any(o in n for o in only.split("|"))
    pick = [job for job, n in zip(todo, names) if picked(n)]
    missing = [n for n in names if not picked(n) and n not in have]
    if missing:
        sys.exit(f"{len(missing)} points are neither measured nor in {path}, e.g. {missing[0]}: run the whole grid")
    results, t0 = measure_all(pick, run, maxtasksperchild)
    new = {r["name"]: r for r in results}
    doc["points"] = [new.get(n) or have[n] for n in names]
    return doc, t0


def grid_main(out, fixture, generator, counted, grid, run_one, name_of, libs=("transformers",), maxtasksperchild=1):
    """A grid generator's command line: `--only TEXT` re-measures the matching points of the
    fixture (`out`/`fixture`, or under --out) and keeps the others; `--list` prints the points'
    names; without them every point of `grid()` is measured through `run_one` and the fixture
    is written with the versions of `libs` (import names) and what was `counted`. One point per
    worker process by default (an MoE routing wrapper is installed on the router class)."""
    import importlib
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=out)
    ap.add_argument("--only", help="re-measure the points whose name contains this; keep the fixture's others")
    ap.add_argument("--list", action="store_true", help="print the points' names and stop")
    a = ap.parse_args()
    if a.list:
        for p, kind in grid():
            print(name_of(p, kind))
        return
    path = os.path.join(a.out, fixture)
    if a.only:
        doc, t0 = measure_only(path, grid(), run_one, name_of, a.only, maxtasksperchild=maxtasksperchild)
        return write_fixture(path, doc, t0)
    results, t0 = measure_all(grid(), run_one, maxtasksperchild=maxtasksperchild)
    doc = dict(generator=generator, torch=torch.__version__)
    doc.update({lib: importlib.import_module(lib).__version__ for lib in libs})
    doc.update(counted=counted, points=results)
    write_fixture(path, doc, t0)


def write_fixture(path, doc, t0):
    """`doc` as JSON at `path`, atomically."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {len(doc['points'])} measurements to {os.path.relpath(path)} in {time.time() - t0:.0f}s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", help="re-measure the points whose name contains this; keep the fixture's others")
    a = ap.parse_args()
    import transformers
    if a.only:
        doc, t0 = measure_only(os.path.join(a.out, "hf.json"), grid(), run_one, name_of, a.only)
        return write_fixture(os.path.join(a.out, "hf.json"), doc, t0)
    results, t0 = measure_all(grid(a.quick), run_one)
    doc = dict(generator="tools/pytorch/make_hf_grid.py" + (" --quick" if a.quick else ""), torch=torch.__version__,
               transformers=transformers.__version__,
               counted="requested bytes of blocks >= 512 B, absolute (parameters, buffers, batch, optimizer state "
                       "included); checkpoint's CPU RNG-state stashes and CPU-only kernel scratch left out, as "
                       "make_grid.py; the step is the Trainer's (measure_hf.py)",
               points=results)
    write_fixture(os.path.join(a.out, "hf.json"), doc, t0)


if __name__ == "__main__":
    main()
