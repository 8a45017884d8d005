#!/usr/bin/env python3
"""fine_tune_table.py -- the README's "Will my fine-tune fit?" tables, from vramscope itself.

For each model and common fine-tuning setup, one `profile` on meta at batch 1, context 2048
(peak allocated and what holds it) and `fit` on 24, 48 and 80 GB GPUs (full fine-tuning) or
12 to 80 GB (LoRA): the largest batch at context 2048 and the largest context at batch 1. Every
number comes from the release binary; nothing is computed here but the formatting.

    cargo build --release && python3 tools/fine_tune_table.py [--bin target/release/vramscope] [--only full|lora]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODELS = ["Llama-3.1-8B", "Qwen2.5-7B"]
LORA_MODELS = ["Llama-3.1-8B", "Qwen2.5-7B", "Mistral-7B"]
GPUS = [(["--gpu", "RTX4090-24GB"], "24 GB"), (["--gpu", "RTXA6000-48GB"], "48 GB"), (["--gpu", "H100-80GB"], "80 GB")]
LORA_GPUS = [(["--memory-limit", "12GB"], "12 GB"), (["--memory-limit", "16GB"], "16 GB"), (["--gpu", "RTX4090-24GB"], "24 GB"),
             (["--gpu", "A100-40GB"], "40 GB"), (["--gpu", "RTXA6000-48GB"], "48 GB"), (["--gpu", "H100-80GB"], "80 GB")]
# (label, flags): weights as from_pretrained loads them (bf16, no fp32 master) or the Trainer's
# bf16=True autocast over fp32 weights; fused AdamW (the Trainer's default) throughout.
SETUPS = [
    ("bf16 weights", []),
    ("autocast bf16, fp32 master", ["--dtype", "float32", "--precision", "bf16"]),
]
# peft LoRA on the bf16 weights (fp32 adapters): the two target sets people use.
LORA = [
    ("r 16, all-linear", ["--lora-r", "16", "--lora-alpha", "32", "--target-modules", "all-linear"]),
    ("r 16, q_proj,v_proj", ["--lora-r", "16", "--lora-alpha", "32", "--target-modules", "q_proj,v_proj"]),
]
CKPT = [("off", []), ("on", ["--gradient-checkpointing", "non-reentrant"])]
ATTN = [("sdpa", ["--attn-implementation", "sdpa"]), ("eager", ["--attn-implementation", "eager"])]
GIB = 1024 ** 3


def run(binary, args):
    r = subprocess.run([binary] + args, capture_output=True, text=True)
    return r


def profile(binary, model, flags, tmp):
    out = os.path.join(tmp, "p")
    r = run(binary, ["profile", "--model", model, "--device", "meta", "--batch-size", "1", "--context-length", "2048",
                     "--out-dir", out] + flags)
    if r.returncode != 0:
        sys.exit(f"profile {model} {flags} failed:\n{r.stdout}\n{r.stderr}")
    run0 = json.load(open(os.path.join(out, "summary.json")))["runs"][0]
    cats = run0["peak"]["by_category"]
    top = sorted(cats, key=lambda c: -c[1])[:2]
    phase = run0["peak"].get("peak_phase", "")
    return run0["peak_allocated_bytes"], top, phase


def fit(binary, model, flags, gpu, find, tmp):
    fixed = ["--context-length", "2048"] if find == "batch" else ["--batch-size", "1"]
    path = os.path.join(tmp, "fit.json")
    r = run(binary, ["fit", "--model", model, "--find", find, "--json", path] + gpu + fixed + flags)
    if r.returncode not in (0, 1):
        sys.exit(f"fit {model} {flags} {gpu} failed:\n{r.stdout}\n{r.stderr}")
    try:
        return json.load(open(path)).get("answer")
    except (OSError, ValueError):
        return None


def table(binary, models, gpus, rows, first_col, tmp):
    for model in models:
        print(f"\n**{model}** (peak at batch 1, context 2048; fused AdamW, clip 1.0; GiB = 1024³ B; – = not even 1)\n")
        head = f"| {first_col} | checkpointing | attention | peak allocated | largest at the peak |"
        sub = "|---|---|---|---:|---|"
        for _, g in gpus:
            head += f" {g}: batch @2048 / context @B1 |"
            sub += "---|"
        print(head)
        print(sub)
        for sl, sf, attns in rows:
            for cl, cf in CKPT:
                for al, af in attns:
                    flags = sf + cf + af
                    peak, top, phase = profile(binary, model, flags, tmp)
                    what = ", ".join(f"{c} {b / GIB:.1f}" for c, b in top) + (f" ({phase})" if phase else "")
                    row = f"| {sl} | {cl} | {al} | {peak / GIB:.1f} GiB | {what} |"
                    for gpu, _ in gpus:
                        b = fit(binary, model, flags, gpu, "batch", tmp)
                        c = fit(binary, model, flags, gpu, "context", tmp)
                        row += f" {b or '–'} / {c or '–'} |"
                    print(row, flush=True)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--bin", default="target/release/vramscope")
    a.add_argument("--only", choices=("full", "lora"))
    x = a.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if x.only in (None, "full"):
            table(x.bin, MODELS, GPUS, [(l, f, ATTN) for l, f in SETUPS], "weights", tmp)
        if x.only in (None, "lora"):
            table(x.bin, LORA_MODELS, LORA_GPUS, [(l, f, ATTN[:1]) for l, f in LORA], "LoRA (bf16 weights)", tmp)


if __name__ == "__main__":
    main()
