#!/usr/bin/env python3
"""fine_tune_table.py -- the "Will my fine-tune fit?" tables of docs/fine-tuning.md, from vramscope itself.

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
# Mixture-of-experts models, full fine-tuning with bf16 weights, worst-case routing (fit's
# default; stated for the profile too so both columns route alike), sdpa.
MOE_MODELS = ["Qwen3-30B-A3B", "Mixtral-8x7B"]
MOE_FLAGS = ["--routing", "worst", "--attn-implementation", "sdpa"]
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
# peft LoRA (r 16 on every linear, fp32 adapters, fused AdamW) on the bf16 weights with
# non-reentrant checkpointing off and on, and QLoRA as its recipes run it: 4-bit nf4 with double
# quantization, bf16 compute, prepare_model_for_kbit_training (reentrant checkpointing), with
# the fused AdamW or bitsandbytes' paged 8-bit AdamW.
ADAPTER = ["--lora-r", "16", "--lora-alpha", "32", "--target-modules", "all-linear", "--attn-implementation", "sdpa"]
QLORA = ["--load-in-4bit", "--bnb-4bit-quant-type", "nf4", "--bnb-4bit-use-double-quant", "--bnb-4bit-compute-dtype", "bfloat16"]
LORA = [
    ("LoRA, bf16 weights", "off", ADAPTER + ["--gradient-checkpointing", "none"]),
    ("LoRA, bf16 weights", "non-reentrant", ADAPTER + ["--gradient-checkpointing", "non-reentrant"]),
    ("QLoRA nf4 + double quant", "reentrant", QLORA + ADAPTER),
    ("QLoRA nf4 + double quant, paged_adamw_8bit", "reentrant", QLORA + ADAPTER + ["--optimizer", "paged_adamw_8bit"]),
]
# LoRA on a mixture of experts, on the attention's linears (all-linear would become
# target_parameters on the 3-D experts too, which bitsandbytes loads refuse); bitsandbytes
# quantizes those linears, the experts stay bf16. Worst-case routing, as fit's default.
MOE_ADAPTER = ["--lora-r", "16", "--lora-alpha", "32", "--target-modules", "q_proj,k_proj,v_proj,o_proj"] + MOE_FLAGS
MOE_LORA = [
    ("LoRA, bf16 weights", "non-reentrant", MOE_ADAPTER + ["--gradient-checkpointing", "non-reentrant"]),
    ("QLoRA nf4 + double quant", "reentrant", QLORA + MOE_ADAPTER),
]
BIG = [("Llama-3.1-70B", [(["--gpu", "RTXA6000-48GB"], "48 GB"), (["--gpu", "H100-80GB"], "80 GB")], LORA[2:])]
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
    if r.returncode not in (0, 3):  # 3: nothing fits (its answer is null)
        sys.exit(f"fit {model} {flags} {gpu} failed:\n{r.stdout}\n{r.stderr}")
    try:
        return json.load(open(path)).get("answer")
    except (OSError, ValueError):
        return None


def row(binary, model, label, ckpt, attn, flags, gpus, tmp):
    peak, top, phase = profile(binary, model, flags, tmp)
    what = ", ".join(f"{c} {b / GIB:.1f}" for c, b in top) + (f" ({phase})" if phase else "")
    out = f"| {label} | {ckpt} | {attn} | {peak / GIB:.1f} GiB | {what} |"
    for gpu, _ in gpus:
        b = fit(binary, model, flags, gpu, "batch", tmp)
        c = fit(binary, model, flags, gpu, "context", tmp)
        out += f" {b or '–'} / {c or '–'} |"
    print(out, flush=True)


def header(model, gpus, first_col, note=""):
    print(f"\n**{model}** (peak at batch 1, context 2048; clip 1.0; {note}GiB = 1024³ B; – = not even 1)\n")
    head = f"| {first_col} | checkpointing | attention | peak allocated | largest at the peak |"
    sub = "|---|---|---|---:|---|"
    for _, g in gpus:
        head += f" {g}: batch @2048 / context @B1 |"
        sub += "---|"
    print(head)
    print(sub)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--bin", default="target/release/vramscope")
    a.add_argument("--only", choices=("full", "lora", "moe-lora"))
    x = a.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if x.only in (None, "full"):
            for model in MODELS:
                header(model, GPUS, "weights")
                for sl, sf in SETUPS:
                    for cl, cf in CKPT:
                        for al, af in ATTN:
                            row(x.bin, model, sl, cl, al, sf + cf + af, GPUS, tmp)
            for model in MOE_MODELS:
                header(model, GPUS, "weights", "worst-case routing; ")
                for cl, cf in CKPT:
                    row(x.bin, model, SETUPS[0][0], cl, "sdpa", SETUPS[0][1] + cf + MOE_FLAGS, GPUS, tmp)
        if x.only in (None, "lora"):
            for model, gpus, rows in [(m, LORA_GPUS, LORA) for m in LORA_MODELS] + BIG:
                header(model, gpus, "fine-tune (r 16, all-linear)")
                for label, ckpt, flags in rows:
                    row(x.bin, model, label, ckpt, "sdpa", flags, gpus, tmp)
        if x.only in (None, "moe-lora"):
            for model in MOE_MODELS:
                header(model, GPUS, "fine-tune (r 16, q/k/v/o_proj)", "worst-case routing; ")
                for label, ckpt, flags in MOE_LORA:
                    row(x.bin, model, label, ckpt, "sdpa", flags, GPUS, tmp)


if __name__ == "__main__":
    main()
