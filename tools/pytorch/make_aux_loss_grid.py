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

With `--lora` (tests/fixtures/moe_grid/aux_loss_lora.json): the loss beside peft 0.21.2's LoRA and
bitsandbytes 4-bit QLoRA (make_lora_grid.py's point fields, measured by measure_hf.py through
measure_moe.py): target_modules on the attention (and Qwen2-MoE's shared expert), target_parameters
(ParamWrapper) on the experts' 3-D weights and the router's weight, nf4 4-bit loads (double quant,
compute bf16 and fp32, prepare_model_for_kbit_training and not) with LoRA on the attention, on the
same rows. peft's PeftModelForCausalLM passes labels and output_router_logits through to the model, so
the loss is the model's own; under ParamWrapper the router's kept logits are those of the adapted
weight.

    python3 make_aux_loss_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_aux_loss_grid.py --lora     # aux_loss_lora.json
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


ATT = "q_proj,k_proj,v_proj,o_proj"
EX = "mlp.experts.gate_up_proj,mlp.experts.down_proj"


def adapted(i, r, targets, params=None, gpt_oss=False, **opts):
    """Row `i` of POINTS (GPT_OSS with gpt_oss) with its loss on, and peft's LoRA r (alpha 2r, no
    dropout: ParamWrapper raises on it) on `targets` ("" is target_modules=[]) and `params`
    (target_parameters); `opts` override the row's fields (checkpoint, dtype)."""
    row, coef, mask = (GPT_OSS if gpt_oss else POINTS)[i][:3]
    p = with_loss((GG.point if gpt_oss else MG.point)(row), coef, mask)
    p.update(opts)
    p.update(lora_r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=targets)
    if params:
        p["target_parameters"] = params
    return p


def four_bit(p, compute_dtype, prepare, quant_type="nf4", double_quant=True):
    """`p` loaded in 4-bit over bf16 weights, as make_lora_grid.py's QLoRA points."""
    p.update(dtype="bf16", load_in_4bit=True, quant_type=quant_type, double_quant=double_quant, compute_dtype=compute_dtype, prepare=prepare)
    return p


def lora_grid():
    """(point, profile type): every family with LoRA on its attention (Qwen2-MoE's also on its shared
    expert), with ParamWrapper on its experts and router, and with 4-bit QLoRA (nf4 with double quant,
    one fp4 without); one 4-bit load without adapters; fp32 and bf16 weights, checkpointing off,
    non-reentrant and reentrant, training and forward."""
    gr = "mlp.router.weight"
    rows = [
        (adapted(0, 8, "q_proj,v_proj"), ("training", "forward", "inference")),  # mixtral grouped_mm balanced fp32
        (adapted(1, 16, ATT, EX + ",mlp.gate.weight", checkpoint="reentrant"), ("training", "forward")),  # mixtral eager worst bf16
        (four_bit(adapted(2, 8, ATT, checkpoint="non-reentrant"), "bf16", True), ("training", "forward")),  # mixtral batched_mm, mask ones
        (adapted(3, 8, "", EX, checkpoint="non-reentrant"), ("training",)),  # qwen3_moe grouped_mm worst bf16
        (adapted(4, 4, ATT, "mlp.gate.weight"), ("training", "forward")),  # qwen3_moe eager balanced fp32
        (four_bit(adapted(5, 16, "q_proj,v_proj", checkpoint="none"), "fp32", False), ("training", "forward")),  # qwen3_moe batched_mm worst, mask ones
        (adapted(6, 8, "q_proj,v_proj,gate_proj,up_proj,down_proj"), ("training", "forward")),  # qwen2_moe grouped_mm balanced fp32
        (adapted(7, 4, "", EX + ",mlp.gate.weight", checkpoint="reentrant"), ("training",)),  # qwen2_moe eager worst bf16
        (four_bit(adapted(8, 8, ATT, checkpoint="reentrant"), "bf16", True), ("training",)),  # qwen2_moe batched_mm balanced, mask ones
        (adapted(0, 8, "q_proj,v_proj", gpt_oss=True), ("training", "forward")),  # gpt_oss grouped_mm balanced fp32
        (adapted(1, 8, "", EX + "," + gr, gpt_oss=True, checkpoint="reentrant"), ("training",)),  # gpt_oss eager worst bf16
        (four_bit(adapted(2, 4, ATT, gpt_oss=True, checkpoint="none"), "fp32", True), ("training", "forward")),  # gpt_oss batched_mm worst, mask ones
        (four_bit(adapted(0, 8, "q_proj,v_proj", gpt_oss=True, checkpoint="non-reentrant"), "bf16", False), ("training",)),
        (four_bit(adapted(3, 8, ATT, checkpoint="reentrant"), "bf16", True, "fp4", False), ("training",)),  # qwen3_moe grouped_mm worst
        # A 4-bit load without adapters (nothing trains): the loss in forward and inference.
        (four_bit(with_loss(MG.point(POINTS[0][0]), *POINTS[0][1:3]), "bf16", True), ("forward", "inference")),  # mixtral grouped_mm balanced, prepared (every weight frozen)
        # ParamWrapper on fp32 experts under checkpointing, where the fold is the forward's peak.
        (adapted(0, 8, "", EX, checkpoint="reentrant"), ("training", "forward")),  # mixtral grouped_mm balanced
        (adapted(6, 4, "", EX + ",mlp.gate.weight", checkpoint="non-reentrant"), ("training",)),  # qwen2_moe grouped_mm balanced
        (adapted(2, 8, "", EX + "," + gr, gpt_oss=True, checkpoint="non-reentrant"), ("training",)),  # gpt_oss batched_mm worst
    ]
    return [(p, kind) for p, kinds in rows for kind in kinds]


def lora_name_of(p, kind):
    import make_lora_grid as LG
    return LG.name_of(p, kind, name_of(p, kind))


def run_one(job):
    p, kind = job
    r = MG.run_one(job)
    r["name"] = (lora_name_of if p.get("lora_r") or p.get("load_in_4bit") else name_of)(p, kind)
    return r


def main():
    if "--lora" in sys.argv:
        sys.argv.remove("--lora")
        import peft
        return G.grid_main(OUT, "aux_loss_lora.json", "tools/pytorch/make_aux_loss_grid.py --lora",
                           f"requested bytes of blocks >= 512 B, absolute; peft {peft.__version__}; routing forced by overwriting the "
                           "router's top-k indices in place (measure_moe.py); output_router_logits on; the step is the Trainer's "
                           "(measure_hf.py) over the parameters that require grad; CPU-only kernel scratch left out, as make_grid.py",
                           lora_grid, run_one, lora_name_of, libs=("transformers", "peft", "bitsandbytes"))
    G.grid_main(OUT, "aux_loss.json", "tools/pytorch/make_aux_loss_grid.py",
                "requested bytes of blocks >= 512 B, absolute; routing forced by overwriting the router's "
                "top-k indices in place (measure_moe.py); output_router_logits on; CPU-only kernel scratch left out, as make_grid.py",
                grid, run_one, name_of)

if __name__ == "__main__":
    main()
