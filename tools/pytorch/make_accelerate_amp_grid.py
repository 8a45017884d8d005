#!/usr/bin/env python3
"""make_accelerate_amp_grid.py -- the fixture grid of the Trainer's own autocast: what transformers 5.23's
models allocate when accelerate prepares them for mixed precision (the Trainer's bf16=True / fp16=True,
`Accelerator(mixed_precision=...)`), per phase, measured by measure_hf.py / measure_moe.py (mode-free,
one torch.profiler session per measurement, requested bytes of blocks >= 512 B, absolute), written to
tests/fixtures/hf_grid/accelerate_amp.json.

What differs from a loop's own `with torch.autocast(...)` (the other autocast grids): accelerate 1.15's
`prepare_model` replaces the model's forward by `convert_outputs_to_fp32(autocast(forward))`
(measure_hf.accelerate_forward makes the same two assignments with accelerate's own function), so
the output comes back with an fp32 copy of each bf16/fp16 tensor -- the logits, and with
output_router_logits every router's logits -- that lives until compute_loss drops the output.
The autocast itself is measure_hf.autocast_region's (CUDA's op policies registered on CPU), fp16
with accelerate's GradScaler.

The grid: every dense family (llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2, gemma3_text) under
bf16 autocast over fp32 and bf16 weights and fp16 autocast over fp32 ones, training and
forward-loss, with checkpointing, use_cache off, tied heads and the all-ones mask among them; LoRA
on bf16 weights; the MoE models (mixtral, qwen3_moe, qwen2_moe, gpt_oss) with and without the
router's auxiliary loss, and DeepSeek-V3 -- the aux-loss rows are where the conversion sets the
loss phase's peak (the routers' fp32 copies come on top of the logits').

    python3 make_accelerate_amp_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_accelerate_amp_grid.py --only gemma   # re-measure the points whose name contains it
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_aux_loss_grid as AL
import make_deepseek_grid as DG
import make_family_grid as F
import make_gptoss_grid as GG
import make_hf_grid as G
import make_lora_grid as LG
import make_moe_grid as MG

OUT = os.path.join(HERE, "../../tests/fixtures/hf_grid")
KINDS = ("forward-loss", "training")


def amp(p, autocast, **opts):
    return dict(p, autocast=autocast, amp="accelerate", **opts)


def dense():
    todo = []
    for t, mt in enumerate(("llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "gemma2", "gemma3_text")):
        if mt.startswith("gemma"):
            make = lambda i, **o: F.gemma_point(mt, i, ("below", "at", "above")[i % 3], **o)
        elif mt in ("phi3", "olmo2"):
            make = lambda i, **o: F.point(mt, i, **o)
        else:
            make = lambda i, **o: G.point(mt, i, **o)
        todo += [(amp(make(t), "bf16"), k) for k in KINDS]
        todo.append((amp(make(t + 1, dtype="bf16", checkpoint="non-reentrant"), "bf16"), "training"))
        if mt == "olmo2":
            # OLMo-2's random weights overflow fp16 at GradScaler's first scale (65536) on every
            # shape tried, and a skipped step is not vramscope's meta run: bf16 without the cache.
            todo.append((amp(make(t + 2, use_cache=False), "bf16"), "training"))
        else:
            todo.append((amp(make(t + 2), "fp16"), "training"))
    singles = [
        amp(G.point("llama", 3, use_cache=False, attn="eager"), "bf16"),
        amp(G.point("qwen2", 1, tied=True, attention_mask="ones"), "fp16"),
        amp(G.point("mistral", 6, checkpoint="reentrant", dtype="bf16"), "bf16"),
        amp(F.point("phi3", 4, checkpoint="reentrant"), "fp16"),
    ]
    todo += [(p, "training") for p in singles]
    # LoRA (peft's autocast_adapter_dtype: fp32 adapters on bf16 weights), prepared as the Trainer does.
    todo += [(amp(LG.lora("llama", 0, 16, "all-linear"), "bf16"), "training"),
             (amp(LG.lora("qwen3", 5, 8, "q_proj,v_proj", checkpoint="non-reentrant"), "bf16"), "training")]
    return todo


def moe():
    todo = []
    # With the auxiliary loss: the routers' logits are in the output and get fp32 copies.
    for row, coef, mask, _, _ in AL.POINTS[::2]:
        p = AL.with_loss(MG.point(row), coef, mask)
        todo.append((amp(p, "bf16"), "training"))
        if p["dtype"] == "fp32":
            todo.append((amp(p, "fp16"), "training"))
    for row, coef, mask, _, _ in AL.GPT_OSS[:2]:
        todo.append((amp(AL.with_loss(GG.point(row), coef, mask), "bf16"), "training"))
    # Many experts, a small vocabulary: the routers' copies outweigh the logits', and the
    # conversion sets the loss phase's peak.
    wide = ("qwen3_moe", 32, 32, 2, 2, 1, 16, 96, 48, 4, 48, 3, "batched_mm", "worst", "sdpa", "fp32")
    todo += [(amp(AL.with_loss(MG.point(wide), 0.001, "none"), "bf16"), k) for k in KINDS]
    todo.append((amp(AL.with_loss(MG.point(wide), 0.001, "none"), "fp16"), "training"))
    wide = ("mixtral", 32, 32, 2, 2, 1, None, 128, 64, 4, 64, 2, "grouped_mm", "balanced", "eager", "fp32")
    todo += [(amp(AL.with_loss(MG.point(wide), 0.02, "none"), a), "training") for a in ("bf16", "fp16")]
    wide = ("qwen2_moe", 32, 32, 2, 2, 1, None, 96, 48, 4, 48, 2, "eager", "worst", "sdpa", "bf16", 48)
    todo += [(amp(AL.with_loss(MG.point(wide), 0.02, "ones"), "bf16"), k) for k in KINDS]
    wide = (32, 32, 2, 2, 1, 16, 96, 32, 4, 32, 2, "batched_mm", "balanced", "fp32", 8)
    todo += [(amp(AL.with_loss(GG.point(wide), 0.001, "none"), a), "training") for a in ("bf16", "fp16")]
    # Without it: only the logits are converted.
    for row in MG.POINTS[:6:2]:
        todo.append((amp(MG.point(row), "bf16"), "training"))
    todo.append((amp(DG.point(DG.POINTS[0]), "bf16"), "training"))
    return todo


def grid():
    return dense() + moe()


def name_of(p, kind):
    if "num_experts" in p or p["model_type"] == "deepseek_v3":
        base = (AL.name_of if p.get("output_router_logits") else
                GG.name_of if p["model_type"] == "gpt_oss" else
                DG.name_of if p["model_type"] == "deepseek_v3" else MG.name_of)(p, kind)
    elif p.get("lora_r"):
        base = LG.name_of(p, kind)
    else:
        base = F.name_of(p, kind)
    head, tail = base.rsplit(f" {kind}", 1)
    return f"{head} autocast={p['autocast']} amp={p['amp']} {kind}{tail}"


def run_one(job):
    p, kind = job
    moe_point = "num_experts" in p or p["model_type"] == "deepseek_v3"
    r = (MG.run_one if moe_point else G.run_one)(job)
    r["name"] = name_of(p, kind)
    return r


def main():
    G.grid_main(OUT, "accelerate_amp.json", "tools/pytorch/make_accelerate_amp_grid.py",
                "requested bytes of blocks >= 512 B, absolute; accelerate's prepare_model wrapper "
                "(convert_outputs_to_fp32 around torch.autocast('cpu', bfloat16 / float16) with CUDA's autocast "
                "policies, measure_hf.accelerate_forward), torch.amp.GradScaler in fp16 training; MoE routing forced "
                "by overwriting the router's top-k indices in place (measure_moe.py); CPU-only kernel scratch left "
                "out, as make_grid.py", grid, run_one, name_of, libs=("transformers", "accelerate"))

if __name__ == "__main__":
    main()
