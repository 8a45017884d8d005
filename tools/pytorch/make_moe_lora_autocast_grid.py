#!/usr/bin/env python3
"""make_moe_lora_autocast_grid.py -- the fixture grid of peft's LoRA on the mixture-of-experts models under
autocast (the Trainer's bf16=True / fp16=True): what transformers 5.23's Mixtral, Qwen3-MoE, Qwen2-MoE,
gpt-oss and DeepSeek-V3 with peft 0.21.2's adapters allocate inside `torch.autocast("cpu", ...)`
(measure_hf.py's `autocast`, CUDA's op policies registered on CPU, fp16 with the GradScaler), per
phase, measured by measure_moe.py (mode-free, one torch.profiler session per measurement, requested
bytes of blocks >= 512 B, absolute; routing forced as vramscope's `--routing`), written to
tests/fixtures/moe_grid/lora_autocast.json.

peft's LoRA Linear under autocast: the base layer is an autocast linear; `lora_A(dropout(x))` casts x
to lora_A's weight dtype first (`x = self._cast_input_dtype(x, lora_A.weight.dtype)`), then its own
autocast linear casts both to the low type; `result + lora_B(...) * scaling` adds the low-precision
adapter output to the base output. Adapters are fp32 (autocast_adapter_dtype=True) over fp32 and bf16
weights.

The grid (25 measurements): target_modules on every family's linears (the attention's, Qwen2-MoE's shared expert,
DeepSeek-V3's MLA projections) and target_parameters (peft's ParamWrapper on the experts' 3-D weights
and the router) on the rows of make_lora_grid.py's MoE grids; bf16 autocast over fp32 and bf16
weights, fp16 over fp32 weights; every experts implementation, balanced and worst routing, eager and
sdpa, checkpointing off, non-reentrant and reentrant, inference, forward and training.

    python3 make_moe_lora_autocast_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_moe_lora_autocast_grid.py --only gpt_oss   # re-measure the points whose name contains it
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_lora_grid as LG
import make_moe_autocast_grid as MA

ALL3 = ("training", "forward", "inference")
ATT = "q_proj,k_proj,v_proj,o_proj"
MLA = "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj"
EX = "mlp.experts.gate_up_proj,mlp.experts.down_proj"


def points():
    """(point, autocast, profile types)."""
    m, g, d = LG.moe_lora, LG.gptoss_lora, LG.deepseek_lora
    return [
        # target_modules
        (m(0, 8, "q_proj,v_proj"), "bf16", ALL3),  # mixtral grouped_mm balanced sdpa fp32
        (m(0, 8, "q_proj,v_proj"), "fp16", ("training",)),
        (m(2, 16, ATT, checkpoint="reentrant", dtype="bf16"), "bf16", ("training", "forward")),  # mixtral batched_mm worst sdpa
        (m(7, 8, "k_proj,o_proj", checkpoint="non-reentrant"), "bf16", ("training",)),  # qwen3_moe eager balanced eager
        (m(8, 4, ATT, lora_dropout=0.05), "fp16", ("training", "forward")),  # qwen3_moe batched_mm worst sdpa
        (m(12, 8, "q_proj,v_proj,gate_proj,up_proj,down_proj"), "bf16", ("training", "inference")),  # qwen2_moe grouped_mm, shared expert
        (m(14, 8, "v_proj,o_proj,shared_expert_gate", checkpoint="reentrant"), "fp16", ("training",)),  # qwen2_moe batched_mm worst
        (g(0, 8, "q_proj,v_proj"), "bf16", ("training", "forward")),  # gpt_oss grouped_mm balanced fp32
        (g(0, 8, "q_proj,v_proj"), "fp16", ("training",)),
        (g(3, 8, "k_proj,o_proj", checkpoint="reentrant", dtype="bf16"), "bf16", ("training",)),  # gpt_oss eager worst
        # DeepSeek-V3 eager: these rows' v head size is unlike q's (sdpa would take the math fallback).
        (d(0, 8, MLA, attn="eager"), "bf16", ("training", "forward")),  # deepseek_v3 grouped_mm balanced
        (d(13, 8, "kv_a_proj_with_mqa,kv_b_proj", checkpoint="non-reentrant", routing="worst", attn="eager"), "fp16", ("training",)),
        (d(2, 4, "q_b_proj,o_proj", dtype="bf16", attn="eager"), "bf16", ("training",)),
        # target_parameters (ParamWrapper)
        (LG.moe_param(0, 8, EX), "bf16", ("training", "forward")),  # mixtral grouped_mm balanced fp32
        (LG.moe_param(7, 4, EX + ",mlp.gate.weight", checkpoint="non-reentrant", dtype="fp32"), "fp16", ("training",)),  # qwen3_moe eager
        (g(0, 8, "", EX), "bf16", ("training",)),
        (d(0, 8, "", EX, attn="eager"), "bf16", ("training",)),
    ]


def grid(families=None):
    todo = []
    for p, autocast, kinds in points():
        if families and p["model_type"] not in families:
            continue
        todo += [(dict(p, autocast=autocast), kind) for kind in kinds]
    return todo


def name_of(p, kind):
    head, tail = LG.moe_name_of(p, kind).rsplit(f" {kind}", 1)
    return f"{head} autocast={p['autocast']} {kind}{tail}"


def main():
    import peft
    MA.main_for("lora_autocast.json", "tools/pytorch/make_moe_lora_autocast_grid.py",
                f"requested bytes of blocks >= 512 B, absolute; peft {peft.__version__}; torch.autocast('cpu', bfloat16 / "
                "float16) around forward and loss with CUDA's autocast policies (measure_hf.cuda_autocast_policies), "
                "torch.amp.GradScaler in fp16 training (no step skipped); routing forced by overwriting the router's top-k "
                "indices in place (measure_moe.py); CPU-only kernel scratch left out, as make_grid.py", grid, name_of)


if __name__ == "__main__":
    main()
