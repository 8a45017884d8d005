#!/usr/bin/env python3
"""parallel_table.py -- the tables of docs/multi-gpu.md, from vramscope itself.

The 2.7B cs336 model at batch 4 per rank, context 512, fp32 weights, the course AdamW: one
`profile --parallel L --world-size N` on meta against an H100-80GB for each layout and world
size 1..8 (every distinct rank; the table shows the heaviest), then `fit --find world-size`.
The same for Llama-3.1-8B (hf flavour, FSDP2 bf16 parameters / fp32 reduction). Every number
comes from the release binary; nothing is computed here but the formatting.

    cargo build --release && python3 tools/parallel_table.py [--bin target/release/vramscope]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

GIB = 1024 ** 3
LAYOUTS = ["ddp", "zero1", "zero2", "fsdp"]


def run(binary, args):
    r = subprocess.run([binary] + args, capture_output=True, text=True)
    if r.returncode not in (0, 1, 3):  # 3: out of memory, an answer
        sys.exit(f"{' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r


def heaviest(binary, base, layout, world, tmp):
    out = os.path.join(tmp, f"{layout}{world}")
    run(binary, ["profile"] + base + ["--parallel", layout, "--world-size", str(world), "--out-dir", out])
    s = json.load(open(os.path.join(out, "summary.json")))
    runs = s["runs"]
    r = max(runs, key=lambda r: r["peak_allocated_bytes"])
    cell = f"{r['peak_allocated_bytes'] / GIB:.2f} / {r['peak_reserved_bytes'] / GIB:.2f}"
    return cell + (" OOM" if r["oom"] else "")


def table(binary, base, worlds, tmp):
    print("| ranks | " + " | ".join(f"{l} (GiB alloc / reserved)" for l in LAYOUTS) + " |")
    print("|---:|" + "---:|" * len(LAYOUTS))
    for w in worlds:
        print(f"| {w} | " + " | ".join(heaviest(binary, base, l, w, tmp) for l in LAYOUTS) + " |")


def fit(binary, base):
    r = run(binary, ["fit", "--find", "world-size"] + [a for a in base if a not in ("--device", "meta")])
    print("\n```")
    print("\n".join(l for l in r.stdout.splitlines() if l.startswith("|") or l.startswith("vramscope fit")))
    print("```")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/vramscope")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("### 2.7B (cs336), batch 4 per rank, context 512, fp32, course AdamW, H100-80GB\n")
        base = ["--model", "2.7B", "--context-length", "512", "--batch-size", "4", "--device", "meta", "--gpu", "H100-80GB"]
        table(a.bin, base, range(1, 9), tmp)
        fit(a.bin, base)
        print("\n### Llama-3.1-8B (hf), batch 1 per rank, context 2048, FSDP2 bf16 parameters / fp32 reduction for zero2 and fsdp, H100-80GB\n")
        base = ["--model", "Llama-3.1-8B", "--context-length", "2048", "--batch-size", "1", "--device", "meta", "--gpu", "H100-80GB"]
        print("| ranks | zero2 (GiB alloc / reserved) | fsdp (GiB alloc / reserved) |\n|---:|---:|---:|")
        mp = ["--fsdp-param-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"]
        for w in (1, 2, 4, 8):
            cells = [heaviest(a.bin, base + mp, l, w, tmp) for l in ("zero2", "fsdp")]
            print(f"| {w} | " + " | ".join(cells) + " |")
        fit(a.bin, base + mp + ["--parallel", "fsdp"])


if __name__ == "__main__":
    main()
