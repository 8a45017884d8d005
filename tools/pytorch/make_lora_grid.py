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

    JOBS=2 python3 make_lora_grid.py            # tests/fixtures/hf_grid/lora.json
    JOBS=2 python3 make_lora_grid.py --qlora    # tests/fixtures/hf_grid/qlora.json: bitsandbytes 4-bit
                                                # (from_pretrained of a saved random model), CPU kernels
    JOBS=1 python3 make_lora_grid.py --quant-storage  # tests/fixtures/hf_grid/qlora_storage.json: bnb_4bit_quant_storage
                                                # bf16/fp16/fp32 (the FSDP-QLoRA load) on one device
    JOBS=1 python3 make_lora_grid.py --dora     # tests/fixtures/hf_grid/dora.json: LoraConfig(use_dora=True)
    JOBS=1 python3 make_lora_grid.py --dora-fp32  # tests/fixtures/hf_grid/dora_fp32.json: the same over fp32 weights
                                                # over bf16 and 4-bit weights
    JOBS=1 python3 make_lora_grid.py --int8     # tests/fixtures/hf_grid/int8.json: LLM.int8() (load_in_8bit),
                                                # CUDA's MatMul8bitLt run on CPU
    JOBS=1 python3 make_lora_grid.py --gpt-oss-params | --deepseek-params | --converted |
                    --qwen2-moe-shared | --qwen2-moe-4bit   # tests/fixtures/moe_grid/: peft's target_parameters on
                                                # gpt-oss / DeepSeek-V3, its MoE conversion (all-linear, v4 names),
                                                # Qwen2-MoE's shared expert (LoRA, 4-bit)
    python3 make_lora_grid.py [--qlora] --only adafactor   # re-measure the points whose name contains
                                                # it, keep the fixture's others
Needs `pip install torch==2.15.0 transformers==5.23.0 peft==0.21.2`.
"""
import os
import sys

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


def qlora(mt, i, r, targets, quant_type, double_quant, **opts):
    p = lora(mt, i, r, targets, **opts)
    p.update(load_in_4bit=True, quant_type=quant_type, double_quant=double_quant,
             compute_dtype=opts.get("compute_dtype", "bf16"), prepare=opts.get("prepare", True))
    return p


def int8(mt, i, r, targets, threshold, **opts):
    p = lora(mt, i, r, targets, **opts) if r else G.point(mt, i, dtype=opts.pop("dtype", "bf16"), **opts)
    p.update(load_in_8bit=True, llm_int8_threshold=threshold, prepare=opts.get("prepare", True))
    return p


def name_of(p, kind, base=None):
    base = base or G.name_of(p, kind)
    tag = ""
    if p.get("load_in_4bit"):
        tag += f" 4bit {p['quant_type']}{' dq' if p['double_quant'] else ''} compute={p['compute_dtype']}{'' if p['prepare'] else ' unprepared'}"
        if p.get("quant_storage", "uint8") != "uint8":
            tag += f" storage={p['quant_storage']}"
    if p.get("load_in_8bit"):
        tag += f" 8bit threshold={p['llm_int8_threshold']}{'' if p['prepare'] else ' unprepared'}"
    if not p.get("lora_r"):
        return base[: -len(kind) - 1] + tag + " " + kind
    if p.get("target_parameters"):
        tag += f" lora r{p['lora_r']} a{p['lora_alpha']} modules=[{p['target_modules'] or ''}] params={p['target_parameters']}"
    else:
        tag += f" lora r{p['lora_r']} a{p['lora_alpha']} {p['target_modules'] or 'default'}"
    if p.get("use_dora"):
        tag += " dora"
    if p["lora_dropout"]:
        tag += f" dropout={p['lora_dropout']}"
    if p.get("lora_bias", "none") != "none":
        tag += f" bias={p['lora_bias']}"
    if p.get("modules_to_save"):
        tag += f" save={p['modules_to_save']}"
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
        todo.append((lora(mt, t + 2, 32, "all-linear", optimizer="adamw_bnb_8bit"), "training"))
    # The Trainer's adafactor over fp32 adapters (factored state, no fp32 copies); with qwen2's
    # bf16 q/k/v biases trained (bias="all"), 1-D state and fp32 copies of bf16 parameters.
    todo.append((lora("llama", 2, 16, "all-linear", optimizer="adafactor"), "training"))
    todo.append((lora("qwen3", 3, 8, "q_proj,v_proj", optimizer="adafactor", checkpoint="non-reentrant"), "training"))
    todo.append((lora("mistral", 1, 32, "all-linear", optimizer="adafactor", dtype="fp32"), "training"))
    p = lora("qwen2", 4, 16, "q_proj,v_proj", optimizer="adafactor")
    p["lora_bias"] = "all"
    todo.append((p, "training"))
    # modules_to_save: peft's ModulesToSaveWrapper, a trainable copy of the embedding and/or the
    # head in the weights' dtype (the frozen original kept); on tied models the copy unties.
    for p, kinds in (
        (lora("llama", 0, 16, "q_proj,v_proj", modules_to_save="lm_head"), ("training", "forward")),
        (lora("qwen2", 1, 8, "all-linear", modules_to_save="embed_tokens"), ("training", "forward")),
        (lora("mistral", 2, 32, "all-linear", modules_to_save="embed_tokens,lm_head", checkpoint="non-reentrant"), ("training",)),
        (lora("qwen3", 3, 16, "q_proj,v_proj", modules_to_save="lm_head", dtype="fp32"), ("training",)),
        (lora("llama", 4, 8, "all-linear", modules_to_save="embed_tokens,lm_head", tied=True), ("training",)),
        (lora("qwen2", 5, 16, "q_proj,v_proj", modules_to_save="lm_head", tied=True), ("training",)),
        (lora("qwen3", 6, 8, "all-linear", modules_to_save="lm_head", optimizer="adafactor"), ("training",)),
    ):
        todo += [(p, kind) for kind in kinds]
    # peft's bias option on qwen2's q/k/v biases (the other three have none by default).
    for i, (bias, targets) in enumerate((("all", "q_proj,v_proj"), ("lora_only", "q_proj,v_proj"), ("all", "all-linear"), ("lora_only", "all-linear"))):
        p = lora("qwen2", i + 1, 16, targets)
        p["lora_bias"] = bias
        todo.append((p, "training"))
    for p, _ in todo:
        if p["lora_dropout"] is None:
            p["lora_dropout"] = 0.0
    return todo


def qgrid():
    """QLoRA: nf4/fp4 with and without double quantization, all-linear and q,v, the reentrant
    checkpointing prepare_model_for_kbit_training turns on (and non-reentrant, and none),
    as training, forward and inference; then fp32 compute, no prepare, dropout and eager."""
    todo = []
    quants = [("nf4", True), ("fp4", False), ("nf4", False), ("fp4", True)]
    for t, mt in enumerate(H.MODEL_TYPES):
        for k, (qt, dq) in enumerate(quants):
            targets = "all-linear" if k % 2 == 0 else "q_proj,v_proj"
            ck = ("reentrant", "non-reentrant", "none", "reentrant")[k]
            p = qlora(mt, t * 2 + k, RANKS[(t + k) % 4], targets, qt, dq, checkpoint=ck)
            kinds = ("training", "forward", "inference") if k < 2 else ("training",)
            todo += [(p, kind) for kind in kinds]
        todo.append((qlora(mt, t + 3, 16, "all-linear", "nf4", True, compute_dtype="fp32", checkpoint="reentrant"), "training"))
        todo.append((qlora(mt, t + 5, 8, "all-linear", "nf4", True, prepare=False, checkpoint="non-reentrant"), "training"))
        todo.append((qlora(mt, t + 1, 32, "q_proj,v_proj", "nf4", False, lora_dropout=0.05, checkpoint="reentrant"), "training"))
        todo.append((qlora(mt, t + 6, 16, "all-linear", "nf4", True, attn="eager", checkpoint="none"), "training"))
        # bitsandbytes' 8-bit AdamW: adapters of >= 4096 elements get 8-bit state, smaller fp32
        # (r 32: some of each). Its quantization maps are made on the host at construction and
        # moved to the device by the first 8-bit parameter; on CPU the host copies count too, so
        # every point has one.
        todo.append((qlora(mt, t, 32, "all-linear", "nf4", True, checkpoint="reentrant", optimizer="adamw_bnb_8bit"), "training"))
    todo.append((qlora("llama", 0, 16, "all-linear", "nf4", True, checkpoint="reentrant", optimizer="adafactor"), "training"))
    todo.append((qlora("qwen2", 2, 32, "q_proj,v_proj", "fp4", False, checkpoint="non-reentrant", optimizer="adafactor"), "training"))
    # modules_to_save: the copies are of the fp32 (prepared) or load-dtype (unprepared) originals.
    for p, kinds in (
        (qlora("llama", 0, 16, "all-linear", "nf4", True, checkpoint="reentrant", modules_to_save="lm_head"), ("training", "forward")),
        (qlora("qwen2", 1, 8, "q_proj,v_proj", "fp4", False, checkpoint="non-reentrant", modules_to_save="embed_tokens,lm_head"), ("training",)),
        (qlora("mistral", 2, 32, "all-linear", "nf4", True, prepare=False, checkpoint="non-reentrant", modules_to_save="lm_head"), ("training",)),
        (qlora("qwen3", 3, 16, "all-linear", "nf4", True, checkpoint="non-reentrant", modules_to_save="embed_tokens", tied=True), ("training",)),
    ):
        todo += [(p, kind) for kind in kinds]
    return todo


def qsgrid():
    """bnb_4bit_quant_storage on one device: the same packed bytes viewed as bf16, fp16 or fp32
    (numel = bytes / itemsize); qgrid's points with a float storage, over the model types,
    nf4/fp4, double quant on and off, training, forward and inference."""
    return [(dict(qlora("llama", 0, 8, "all-linear", "nf4", True, checkpoint="reentrant"), quant_storage="bf16"), "training"),
            (dict(qlora("mistral", 3, 32, "q_proj,v_proj", "fp4", False, checkpoint="non-reentrant"), quant_storage="fp16"), "training"),
            (dict(qlora("qwen2", 5, 16, "all-linear", "nf4", True, compute_dtype="fp32", checkpoint="reentrant"), quant_storage="fp32"), "training"),
            (dict(qlora("qwen3", 6, 16, "all-linear", "fp4", True, checkpoint="none"), quant_storage="bf16"), "forward"),
            (dict(qlora("llama", 2, 8, "q_proj,v_proj", "nf4", False, checkpoint="none"), quant_storage="bf16"), "inference")]


def dgrid():
    """DoRA (LoraConfig(use_dora=True)): per model type, on bf16 weights all-linear without
    dropout (the base result reused) as training, forward and inference, q_proj,v_proj with
    dropout 0.05 (base_layer(x) recomputed in fp32) and reentrant checkpointing; on nf4 weights
    (double quant on and off) all-linear under reentrant checkpointing and q_proj,v_proj with
    dropout under non-reentrant; ranks and options rotate over the model types."""
    todo = []
    for t, mt in enumerate(H.MODEL_TYPES):
        kinds = ("training", "forward", "inference")
        todo += [(lora(mt, t * 2, RANKS[t], "all-linear", use_dora=True), kind) for kind in kinds]
        todo.append((lora(mt, t * 2 + 1, RANKS[(t + 1) % 4], "q_proj,v_proj", lora_dropout=0.05, use_dora=True,
                          checkpoint="non-reentrant" if t % 2 == 0 else "none"), "training"))
        todo.append((lora(mt, t + 3, RANKS[(t + 2) % 4], "all-linear", lora_dropout=0.05 if t % 2 else 0.0, use_dora=True,
                          checkpoint="reentrant"), "training"))
        p = qlora(mt, t * 2 + 2, RANKS[(t + 3) % 4], "all-linear", "nf4", t % 2 == 0, use_dora=True, checkpoint="reentrant")
        todo += [(p, kind) for kind in (kinds if t % 2 == 0 else ("training",))]
        todo.append((qlora(mt, t + 5, RANKS[t], "q_proj,v_proj", "nf4", t % 2 == 1, lora_dropout=0.05, use_dora=True,
                           checkpoint="non-reentrant"), "training"))
    for p, _ in todo:
        p["use_dora"] = True
    return todo


def int8grid():
    """LLM.int8(): all-linear and q,v, threshold 6.0 (transformers' default) and 0.0, the
    reentrant checkpointing prepare_model_for_kbit_training turns on, non-reentrant and none,
    dropout 0 and 0.05, r 8-64, as training, forward and inference; then 8-bit inference
    without LoRA, and training without prepare_model_for_kbit_training. Every point asserts that no outlier column was held back (vramscope's rule)."""
    todo = []
    for t, mt in enumerate(H.MODEL_TYPES):
        thr = (6.0, 0.0)[t % 2]
        p = int8(mt, t * 2, RANKS[t % 4], "all-linear", thr, checkpoint="reentrant")
        todo += [(p, kind) for kind in ("training", "forward", "inference")]
        todo.append((int8(mt, t * 2 + 1, RANKS[(t + 1) % 4], "q_proj,v_proj", 6.0 - thr, checkpoint="none"), "training"))
        todo.append((int8(mt, t + 3, RANKS[(t + 2) % 4], "all-linear", thr, lora_dropout=0.05, checkpoint="non-reentrant"), "training"))
        todo.append((int8(mt, t + 5, RANKS[(t + 3) % 4], "q_proj,v_proj", 6.0 - thr, lora_dropout=0.05, checkpoint="reentrant"), "training"))
    for t, mt in enumerate(("llama", "qwen2")):
        todo.append((int8(mt, t + 1, None, None, (6.0, 0.0)[t]), "inference"))
        # Without prepare_model_for_kbit_training: bf16 inputs (cast to fp16 for the quantization),
        # bf16 outputs and a bf16 dequantized weight in backward.
        todo.append((int8(mt, t + 2, 16, "all-linear", (0.0, 6.0)[t], prepare=False, checkpoint="non-reentrant"), "training"))
    for p, _ in todo:
        if p.get("lora_r") and p["lora_dropout"] is None:
            p["lora_dropout"] = 0.0
    return todo


def family_lora(mt, i, r, targets, window="below", **opts):
    """A LoRA point of make_family_grid.py's shapes (Gemma's with its own fields); `targets` None is
    peft's default for the model_type."""
    import make_family_grid as FG
    p = FG.gemma_point(mt, i, window) if mt.startswith("gemma") else FG.point(mt, i)
    p["dtype"] = "bf16"
    p.update({k: v for k, v in opts.items() if k not in ("lora_dropout",)})
    p.update(lora_r=r, lora_alpha=2 * r, lora_dropout=opts.get("lora_dropout", 0.0), target_modules=targets)
    return p


def bnb_of(p, bits, quant_type="nf4", double_quant=True, compute_dtype="bf16", threshold=6.0, prepare=True):
    if bits == 4:
        p.update(load_in_4bit=True, quant_type=quant_type, double_quant=double_quant, compute_dtype=compute_dtype, prepare=prepare)
    else:
        p.update(load_in_8bit=True, llm_int8_threshold=threshold, prepare=prepare)
    return p


# Per family: the default targets (peft's mapping: Gemma's q_proj,v_proj; phi3 and olmo2 have none,
# so the common choice is named), a custom list, and all-linear (Phi-3: qkv_proj, o_proj,
# gate_up_proj, down_proj).
FAMILY_TARGETS = {
    "phi3": ("qkv_proj", "gate_up_proj,down_proj"),
    "olmo2": ("q_proj,v_proj", "k_proj,o_proj,up_proj"),
    "gemma2": (None, "o_proj,gate_proj,down_proj"),
    "gemma3_text": (None, "k_proj,up_proj"),
}


def fgrid():
    """LoRA, QLoRA and LLM.int8() + LoRA on the dense families of issue 30 (make_family_grid.py's
    shapes): bf16 weights with the default targets as training, forward and inference; all-linear
    under non-reentrant checkpointing; custom targets with dropout; fp32 weights under reentrant
    checkpointing; nf4 (double quant, bf16 compute, prepare's reentrant checkpointing) as training,
    forward and inference; fp4 under non-reentrant checkpointing; 8-bit all-linear and 8-bit with
    the default targets and no checkpointing."""
    todo = []
    for t, mt in enumerate(("phi3", "olmo2", "gemma2", "gemma3_text")):
        default, custom = FAMILY_TARGETS[mt]
        p = family_lora(mt, t, 8, default)
        todo += [(p, kind) for kind in ("training", "forward", "inference")]
        todo.append((family_lora(mt, t + 1, 16, "all-linear", checkpoint="non-reentrant"), "training"))
        todo.append((family_lora(mt, t + 2, 4, custom, lora_dropout=0.05), "training"))
        todo.append((family_lora(mt, t + 3, 8, "all-linear", dtype="fp32", checkpoint="reentrant", attn="eager"), "training"))
        p = bnb_of(family_lora(mt, t + 4, 16, "all-linear", checkpoint="reentrant"), 4)
        todo += [(p, kind) for kind in ("training", "forward", "inference")]
        todo.append((bnb_of(family_lora(mt, t + 5, 8, default, checkpoint="non-reentrant"), 4, "fp4", False), "training"))
        # OLMo-2's projections see the un-normalized residual stream (its norms come after): a
        # threshold of 6 holds an outlier column back there, which vramscope does not model.
        todo.append((bnb_of(family_lora(mt, t + 6, 4, "all-linear", checkpoint="reentrant"), 8, threshold=0.0 if mt == "olmo2" else 6.0), "training"))
        todo.append((bnb_of(family_lora(mt, t + 7, 16, default, checkpoint="none"), 8, threshold=0.0), "training"))
    # The other optimizers over the adapters: the Trainer's adafactor, foreach AdamW, bitsandbytes' 8-bit AdamW.
    todo.append((family_lora("phi3", 2, 16, "all-linear", optimizer="adafactor"), "training"))
    todo.append((family_lora("gemma3_text", 1, 8, None, optimizer="adamw_torch_foreach", checkpoint="non-reentrant"), "training"))
    todo.append((bnb_of(family_lora("olmo2", 3, 32, "all-linear", checkpoint="reentrant", optimizer="adamw_bnb_8bit"), 4), "training"))
    return todo


def moe_lora(row, r, targets, **opts):
    """A LoRA point on make_moe_grid.py's row `row` (routing forced as measure_moe.py forces it)."""
    import make_moe_grid as MG
    p = MG.point(MG.POINTS[row])
    p.update({k: v for k, v in opts.items() if k != "lora_dropout"})
    p.update(lora_r=r, lora_alpha=2 * r, lora_dropout=opts.get("lora_dropout", 0.0), target_modules=targets)
    return p


def mgrid():
    """LoRA and QLoRA on Mixtral, Qwen3-MoE and Qwen2-MoE (make_moe_grid.py's rows: every experts
    implementation, balanced and worst routing): the attention projections (no default works on
    these types with transformers 5), all four of them (the experts are 3-D parameters and the
    router a plain parameter: neither is an nn.Linear; peft's all-linear reaches them through
    target_parameters, which vramscope refuses), checkpointing off,
    non-reentrant and reentrant; 4-bit and 8-bit loads quantize only the nn.Linear modules."""
    todo = []
    for base, mt in ((0, "mixtral"), (6, "qwen3_moe")):
        # No default: peft's mapping names q_proj,v_proj for mixtral, but with transformers 5
        # convert_peft_config_for_transformers first turns target_modules=None into an empty set
        # (Mixtral's and Qwen3-MoE's configs are converted for the fused experts), and
        # get_peft_model raises NoMatchingPeftModuleError.
        default = "q_proj,v_proj"
        p = moe_lora(base + 2, 8, default)  # batched_mm, worst, bf16
        todo += [(p, kind) for kind in ("training", "forward", "inference")]
        # Every attention linear, not all-linear: with transformers 5, peft 0.21.2 resolves
        # all-linear on these types to the attention's linears plus target_parameters on the
        # experts' 3-D weights and the router's (ParamWrapper), which vramscope does not model.
        att = "q_proj,k_proj,v_proj,o_proj"
        todo.append((moe_lora(base + 0, 16, att, checkpoint="non-reentrant"), "training"))  # grouped_mm
        todo.append((moe_lora(base + 4, 4, "k_proj,o_proj", checkpoint="reentrant"), "training"))  # eager
        todo.append((moe_lora(base + 3, 8, default, lora_dropout=0.05), "training"))  # grouped_mm worst bf16
        p = bnb_of(moe_lora(base + 0, 16, att, checkpoint="reentrant", dtype="bf16"), 4)
        todo += [(p, kind) for kind in ("training", "inference")]
        todo.append((bnb_of(moe_lora(base + 1, 8, default, checkpoint="non-reentrant", dtype="bf16"), 4, "fp4", False), "training"))
        todo.append((bnb_of(moe_lora(base + 5, 4, att, checkpoint="reentrant", dtype="bf16"), 8), "training"))
    todo.append((bnb_of(moe_lora(9, 32, "q_proj,k_proj,v_proj,o_proj", checkpoint="reentrant", dtype="bf16", optimizer="adamw_bnb_8bit"), 4), "training"))
    todo.append((moe_lora(1, 16, "q_proj,v_proj", optimizer="adafactor"), "training"))
    # Qwen2-MoE: LoRA on the attention (its shared expert's linears are not adapted here).
    todo.append((moe_lora(12, 8, "q_proj,v_proj"), "training"))
    todo.append((moe_lora(13, 16, "q_proj,k_proj,v_proj,o_proj", checkpoint="non-reentrant"), "training"))
    todo.append((moe_lora(14, 4, "v_proj,o_proj"), "inference"))
    return todo


def moe_param(row, r, params, targets="", **opts):
    """moe_lora with target_parameters (peft's ParamWrapper); targets "" is target_modules=[]."""
    p = moe_lora(row, r, targets, **opts)
    p["target_parameters"] = params
    return p


def pgrid():
    """LoRA through target_parameters (peft's ParamWrapper) on the experts' 3-D gate_up_proj and
    down_proj and on the router's weight of Mixtral, Qwen3-MoE (12 points each: every experts
    implementation, both routings, fp32 and bf16, r 4-16, experts only / router only / one of the
    experts' parameters / experts, router and attention, checkpointing off, non-reentrant and
    reentrant, training, forward and inference) and Qwen2-MoE (3). ParamWrapper raises on
    lora_dropout != 0, so every point has none."""
    ex, rt = "mlp.experts.gate_up_proj,mlp.experts.down_proj", "mlp.gate.weight"
    todo = []
    for base in (0, 6):
        p = moe_param(base + 0, 8, ex)  # grouped_mm balanced fp32
        todo += [(p, kind) for kind in ("training", "forward", "inference")]
        p = moe_param(base + 2, 4, ex)  # batched_mm worst bf16
        todo += [(p, kind) for kind in ("training", "inference")]
        todo.append((moe_param(base + 4, 16, ex + "," + rt, "q_proj,v_proj"), "training"))  # eager worst bf16
        todo.append((moe_param(base + 3, 8, rt), "training"))  # grouped_mm worst bf16, 2 layers
        todo.append((moe_param(base + 1, 4, ex, checkpoint="non-reentrant"), "training"))  # eager balanced fp32
        todo.append((moe_param(base + 5, 8, "mlp.experts.down_proj", checkpoint="reentrant"), "training"))  # batched_mm balanced
        todo.append((moe_param(base + 3, 8, "gate_up_proj", "q_proj,k_proj,v_proj,o_proj", checkpoint="non-reentrant"), "training"))
        todo.append((moe_param(base + 0, 8, ex + "," + rt), "forward"))
        todo.append((moe_param(base + 4, 16, ex), "inference"))
    todo.append((moe_param(12, 8, ex), "training"))
    todo.append((moe_param(13, 4, ex + "," + rt, checkpoint="non-reentrant"), "training"))
    todo.append((moe_param(14, 16, rt), "inference"))
    return todo


def gptoss_lora(row, r, targets, params=None, **opts):
    """A LoRA point on make_gptoss_grid.py's row `row` (routing forced as measure_moe.py forces it)."""
    import make_gptoss_grid as GG
    p = GG.point(GG.POINTS[row])
    p.update({k: v for k, v in opts.items() if k != "lora_dropout"})
    p.update(lora_r=r, lora_alpha=2 * r, lora_dropout=opts.get("lora_dropout", 0.0), target_modules=targets)
    if params:
        p["target_parameters"] = params
    return p


def deepseek_lora(row, r, targets, params=None, **opts):
    """A LoRA point on make_deepseek_grid.py's row `row`."""
    import make_deepseek_grid as DG
    p = DG.point(DG.POINTS[row])
    p.update({k: v for k, v in opts.items() if k != "lora_dropout"})
    p.update(lora_r=r, lora_alpha=2 * r, lora_dropout=opts.get("lora_dropout", 0.0), target_modules=targets)
    if params:
        p["target_parameters"] = params
    return p


def ogrid():
    """LoRA, QLoRA and LLM.int8() + LoRA on gpt-oss (make_gptoss_grid.py's rows: eager, grouped_mm and
    batched_mm experts, balanced and worst routing, eager attention -- gpt_oss dispatches no sdpa):
    the attention's biased q/k/v/o_proj (peft has no default for gpt_oss; all-linear is those four:
    the router and the experts are no nn.Linear and gpt_oss has no transformers-5 conversion),
    r 4-16, fp32 and bf16, checkpointing off, non-reentrant and reentrant, training, forward and
    inference; 4-bit and 8-bit loads."""
    att = "q_proj,k_proj,v_proj,o_proj"
    todo = []
    p = gptoss_lora(0, 8, "q_proj,v_proj")  # grouped_mm balanced fp32
    todo += [(p, kind) for kind in ("training", "forward", "inference")]
    p = gptoss_lora(2, 16, "all-linear")  # grouped_mm worst bf16, 3 layers
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((gptoss_lora(1, 4, att, checkpoint="non-reentrant"), "training"))  # eager balanced bf16
    todo.append((gptoss_lora(3, 8, "k_proj,o_proj", checkpoint="reentrant"), "training"))  # eager worst fp32
    todo.append((gptoss_lora(8, 16, att), "training"))  # batched_mm balanced fp32
    todo.append((gptoss_lora(9, 4, "q_proj,v_proj", lora_dropout=0.05), "training"))  # batched_mm worst bf16
    todo.append((gptoss_lora(7, 8, "all-linear"), "forward"))  # eager worst bf16
    p = bnb_of(gptoss_lora(4, 16, att, checkpoint="reentrant", dtype="bf16"), 4)  # grouped_mm balanced
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((bnb_of(gptoss_lora(5, 8, "q_proj,v_proj", checkpoint="non-reentrant", dtype="bf16"), 4, "fp4", False), "training"))
    todo.append((bnb_of(gptoss_lora(10, 4, att, checkpoint="reentrant", dtype="bf16"), 8), "training"))
    todo.append((bnb_of(gptoss_lora(9, 8, att, checkpoint="none", dtype="bf16"), 8, threshold=0.0), "training"))
    return todo


def dsgrid():
    """LoRA, QLoRA and LLM.int8() + LoRA on DeepSeek-V3 (make_deepseek_grid.py's rows: every experts
    implementation, balanced and worst routing, eager and sdpa, q_lora_rank set (q_a_proj, q_b_proj)
    and None (q_proj)): the MLA projections (q_a_proj, q_b_proj or q_proj, kv_a_proj_with_mqa,
    kv_b_proj, o_proj); peft has no default for deepseek_v3, r 4-16, fp32 and bf16, checkpointing
    off, non-reentrant and reentrant, training, forward and inference; 4-bit loads."""
    todo = []
    p = deepseek_lora(0, 8, "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj")  # grouped_mm balanced sdpa fp32
    todo += [(p, kind) for kind in ("training", "forward", "inference")]
    p = deepseek_lora(1, 16, "q_proj,kv_b_proj")  # eager balanced eager bf16, q_proj
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((deepseek_lora(2, 4, "q_b_proj,o_proj", checkpoint="non-reentrant"), "training"))  # batched_mm worst sdpa bf16
    # (rows with n_shared_experts 0 are left out: vramscope's reader refuses zero-width shared experts)
    todo.append((deepseek_lora(13, 8, "kv_a_proj_with_mqa,kv_b_proj", checkpoint="reentrant", routing="worst", attn="eager"), "training"))  # grouped_mm worst eager fp32
    todo.append((deepseek_lora(1, 16, "q_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj", dtype="fp32", routing="worst", attn="sdpa"), "training"))  # eager worst sdpa fp32
    todo.append((deepseek_lora(7, 4, "q_proj,o_proj", lora_dropout=0.05), "training"))  # grouped_mm worst sdpa bf16
    todo.append((deepseek_lora(6, 8, "q_a_proj,kv_b_proj"), "forward"))  # grouped_mm balanced eager bf16
    p = bnb_of(deepseek_lora(13, 16, "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj", checkpoint="reentrant", dtype="bf16"), 4)
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((bnb_of(deepseek_lora(12, 8, "q_proj,kv_b_proj", checkpoint="non-reentrant", dtype="bf16"), 4, "fp4", False), "training"))
    # No 8-bit point: bitsandbytes' CPU int8_vectorwise_quant fails on kv_b_proj's 4-D input
    # (B, 1, S, kv_lora_rank) (its row statistics do not broadcast), so LLM.int8() on
    # deepseek_v3 cannot be measured here; vramscope refuses it.
    todo.append((deepseek_lora(9, 4, "q_b_proj,kv_a_proj_with_mqa", checkpoint="reentrant"), "training"))  # batched_mm worst sdpa fp32
    todo.append((deepseek_lora(11, 16, "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj", checkpoint="non-reentrant", dtype="bf16"), "training"))  # eager worst eager
    return todo


def gptoss_pgrid():
    """peft's target_parameters (ParamWrapper) on gpt-oss (make_gptoss_grid.py's rows): its experts'
    3-D gate_up_proj (E, hidden, 2*I) and down_proj (E, I, hidden) -- GptOssExperts is
    `is_transposed`, so peft keeps (in, out) as stored and folds `baddbmm(W, A^T, B^T)` -- and its
    router's weight (`mlp.router.weight`, a 2-D plain parameter beside its bias); every experts
    implementation, both routings, fp32 and bf16, r 4-16, top-k 1-4, 4-16 experts, checkpointing
    off, non-reentrant and reentrant, training, forward and inference. No dropout (ParamWrapper
    raises on it)."""
    ex, rt = "mlp.experts.gate_up_proj,mlp.experts.down_proj", "mlp.router.weight"
    todo = []
    p = gptoss_lora(0, 8, "", ex)  # grouped_mm balanced fp32
    todo += [(p, kind) for kind in ("training", "forward", "inference")]
    p = gptoss_lora(9, 4, "", ex)  # batched_mm worst bf16, top-4
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((gptoss_lora(7, 16, "q_proj,v_proj", ex + "," + rt), "training"))  # eager worst bf16
    todo.append((gptoss_lora(2, 8, "", rt), "training"))  # grouped_mm worst bf16, 3 layers
    todo.append((gptoss_lora(1, 4, "", ex, checkpoint="non-reentrant"), "training"))  # eager balanced bf16, top-1
    todo.append((gptoss_lora(8, 8, "", "down_proj", checkpoint="reentrant"), "training"))  # batched_mm balanced fp32
    todo.append((gptoss_lora(6, 8, "q_proj,k_proj,v_proj,o_proj", "gate_up_proj", checkpoint="non-reentrant"), "training"))  # grouped_mm worst fp32
    todo.append((gptoss_lora(4, 8, "", ex + "," + rt), "forward"))  # grouped_mm balanced bf16
    todo.append((gptoss_lora(3, 16, "", ex), "inference"))  # eager worst fp32, 16 experts, top-4
    todo.append((gptoss_lora(11, 4, "", ex + "," + rt, checkpoint="reentrant"), "training"))  # eager balanced fp32
    return todo


def deepseek_pgrid():
    """peft's target_parameters on DeepSeek-V3 (make_deepseek_grid.py's rows with shared experts):
    the routed experts' gate_up_proj (E, 2*I, hidden) and down_proj (E, hidden, I) and the router's
    `mlp.gate.weight` (read as `self.weight.type(torch.float32)`), the dense layers untouched; every
    experts implementation, both routings, eager and sdpa, fp32 and bf16, r 4-16, checkpointing off,
    non-reentrant and reentrant, training, forward and inference."""
    ex, rt = "mlp.experts.gate_up_proj,mlp.experts.down_proj", "mlp.gate.weight"
    mla = "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj"
    todo = []
    p = deepseek_lora(0, 8, "", ex)  # grouped_mm balanced sdpa fp32
    todo += [(p, kind) for kind in ("training", "forward", "inference")]
    p = deepseek_lora(2, 4, "", ex)  # batched_mm worst sdpa bf16, 3 layers
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((deepseek_lora(11, 16, "q_a_proj,kv_b_proj", ex + "," + rt), "training"))  # eager worst eager fp32
    todo.append((deepseek_lora(7, 8, "", rt), "training"))  # grouped_mm worst sdpa bf16
    todo.append((deepseek_lora(1, 4, "", ex, checkpoint="non-reentrant"), "training"))  # eager balanced eager bf16
    todo.append((deepseek_lora(9, 8, "", "down_proj", checkpoint="reentrant"), "training"))  # batched_mm worst sdpa fp32
    todo.append((deepseek_lora(6, 8, mla, "gate_up_proj", checkpoint="non-reentrant"), "training"))  # grouped_mm balanced eager bf16
    todo.append((deepseek_lora(13, 8, "", ex + "," + rt), "forward"))  # grouped_mm balanced sdpa fp32
    todo.append((deepseek_lora(8, 16, "", ex), "inference"))  # eager balanced sdpa fp32
    todo.append((deepseek_lora(5, 4, "", ex + "," + rt, checkpoint="reentrant"), "training"))  # batched_mm balanced eager bf16
    return todo


def cgrid():
    """peft's conversion of a LoraConfig for transformers 5's fused experts
    (`convert_peft_config_for_transformers`) on Mixtral, Qwen3-MoE and DeepSeek-V3: all-linear
    (the attention's nn.Linear modules, plus target_parameters on the experts' gate_up_proj --
    rank and alpha doubled by rank_pattern/alpha_pattern, w1+w3 or gate_proj+up_proj fused --
    down_proj and the router's gate.weight) and the transformers-4 names (mixtral's w1/w2/w3/gate,
    qwen2_moe's gate_proj/up_proj/down_proj/gate, which qwen3_moe and deepseek_v3 share) mapped to
    those parameters; every experts implementation, both routings, fp32 and bf16, r 4-16,
    checkpointing off, non-reentrant and reentrant, training, forward and inference."""
    todo = []
    names = {"mixtral": ("w1,w3", "q_proj,w2,gate", "q_proj,v_proj,w1,w2,w3", "gate"),
             "qwen3_moe": ("gate_proj,up_proj", "q_proj,down_proj,gate", "q_proj,v_proj,gate_proj,up_proj,down_proj", "gate")}
    for base, mt in ((0, "mixtral"), (6, "qwen3_moe")):
        gu, dg, mix, gate = names[mt]
        p = moe_lora(base + 0, 8, "all-linear")  # grouped_mm balanced fp32
        todo += [(p, kind) for kind in ("training", "forward", "inference")]
        p = moe_lora(base + 2, 4, "all-linear")  # batched_mm worst
        todo += [(p, kind) for kind in ("training", "inference")]
        todo.append((moe_lora(base + 4, 16, "all-linear", checkpoint="reentrant"), "training"))  # eager worst
        todo.append((moe_lora(base + 1, 8, "all-linear", checkpoint="non-reentrant"), "training"))  # eager balanced
        todo.append((moe_lora(base + 3, 8, gu), "training"))  # grouped_mm worst bf16
        todo.append((moe_lora(base + 5, 4, dg, checkpoint="non-reentrant"), "training"))  # batched_mm balanced
        todo.append((moe_lora(base + 3, 16, mix), "forward"))
        todo.append((moe_lora(base + 5, 8, "all-linear", checkpoint="reentrant"), "training"))
        todo.append((moe_lora(base + 1, 4, gate), "inference"))
    p = deepseek_lora(0, 8, "all-linear")  # grouped_mm balanced sdpa fp32
    todo += [(p, kind) for kind in ("training", "forward", "inference")]
    p = deepseek_lora(2, 4, "all-linear")  # batched_mm worst sdpa bf16
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((deepseek_lora(11, 16, "all-linear", checkpoint="reentrant"), "training"))  # eager worst eager fp32
    todo.append((deepseek_lora(1, 8, "all-linear", checkpoint="non-reentrant"), "training"))  # eager balanced eager bf16, q_proj
    todo.append((deepseek_lora(7, 8, "gate_proj,up_proj"), "training"))  # grouped_mm worst sdpa bf16
    todo.append((deepseek_lora(9, 4, "o_proj,down_proj,gate", checkpoint="non-reentrant"), "training"))  # batched_mm worst sdpa fp32 (q_lora_rank set: no q_proj)
    todo.append((deepseek_lora(6, 16, "kv_b_proj,gate_proj,up_proj,down_proj"), "forward"))  # grouped_mm balanced eager bf16
    todo.append((deepseek_lora(5, 8, "all-linear", checkpoint="reentrant"), "training"))  # batched_mm balanced eager bf16
    todo.append((deepseek_lora(8, 4, "gate"), "inference"))  # eager balanced sdpa fp32
    return todo


def sgrid():
    """LoRA on Qwen2-MoE's shared expert (make_moe_grid.py's rows 12-16: every experts
    implementation, both routings, fp32 and bf16): its nn.Linear modules shared_expert.gate_proj,
    up_proj, down_proj and shared_expert_gate (out 1), named or through all-linear (qwen2_moe has
    no transformers-5 conversion in peft 0.21.2: the names reach these modules), r 4-16,
    checkpointing off, non-reentrant and reentrant, dropout, training, forward and inference."""
    todo = []
    p = moe_lora(12, 8, "all-linear")  # grouped_mm balanced sdpa fp32
    todo += [(p, kind) for kind in ("training", "forward", "inference")]
    p = moe_lora(14, 4, "gate_proj,up_proj,down_proj")  # batched_mm worst sdpa fp32
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((moe_lora(13, 16, "all-linear", checkpoint="non-reentrant"), "training"))  # eager balanced eager bf16
    todo.append((moe_lora(15, 8, "q_proj,shared_expert_gate", checkpoint="reentrant"), "training"))  # grouped_mm worst eager bf16
    todo.append((moe_lora(16, 4, "down_proj,v_proj", lora_dropout=0.05), "training"))  # eager worst sdpa fp32
    todo.append((moe_lora(15, 16, "all-linear"), "forward"))
    todo.append((moe_lora(14, 8, "all-linear", checkpoint="reentrant"), "training"))
    todo.append((moe_lora(16, 8, "gate_proj,up_proj", dtype="bf16"), "training"))
    todo.append((moe_lora(13, 4, "shared_expert_gate"), "inference"))
    return todo


def q2grid():
    """bitsandbytes 4-bit on Qwen2-MoE (make_moe_grid.py's rows 12-16): it quantizes every
    nn.Linear but lm_head -- the attention's and the shared expert's gate_proj, up_proj,
    down_proj and shared_expert_gate (a (1, hidden) weight) -- while the router and the 3-D
    experts stay in the load dtype (fp32 after prepare_model_for_kbit_training); LoRA on the
    attention, the shared expert and all-linear, nf4/fp4, double quant on/off, compute bf16/fp32,
    r 4-16, reentrant and non-reentrant checkpointing (prepare's), training, forward, inference."""
    todo = []
    p = bnb_of(moe_lora(12, 8, "q_proj,v_proj", checkpoint="reentrant", dtype="bf16"), 4)  # grouped_mm balanced
    todo += [(p, kind) for kind in ("training", "forward", "inference")]
    p = bnb_of(moe_lora(13, 16, "all-linear", checkpoint="reentrant", dtype="bf16"), 4)  # eager balanced
    todo += [(p, kind) for kind in ("training", "inference")]
    todo.append((bnb_of(moe_lora(14, 4, "gate_proj,up_proj,down_proj", checkpoint="non-reentrant", dtype="bf16"), 4, "fp4", False), "training"))  # batched_mm worst
    todo.append((bnb_of(moe_lora(15, 8, "all-linear", checkpoint="non-reentrant", dtype="bf16"), 4), "training"))  # grouped_mm worst
    todo.append((bnb_of(moe_lora(16, 4, "shared_expert_gate,o_proj", checkpoint="reentrant", dtype="bf16"), 4, "nf4", False), "training"))  # eager worst
    todo.append((bnb_of(moe_lora(12, 16, "all-linear", checkpoint="reentrant", dtype="bf16"), 4, compute_dtype="fp32"), "training"))
    todo.append((bnb_of(moe_lora(14, 8, "q_proj,v_proj", checkpoint="reentrant", dtype="bf16"), 4), "inference"))
    todo.append((bnb_of(moe_lora(15, 4, "all-linear", checkpoint="reentrant", dtype="bf16"), 4, "fp4", True), "forward"))
    todo.append((bnb_of(moe_lora(16, 8, "all-linear", checkpoint="non-reentrant", dtype="fp32"), 4), "training"))
    return todo


def xgrid():
    """peft's modules_to_save and bias on issue 30's models (make_family_grid.py's and
    make_moe_grid.py's / make_gptoss_grid.py's / make_deepseek_grid.py's shapes, routing forced):
    ModulesToSaveWrapper copies of lm_head, embed_tokens or both (Gemma's tied head: the copy
    unties it, ensure_weight_tying off) and bias all / lora_only (peft marks every parameter
    named `*.bias`: gpt-oss's attention and router biases, Qwen2-MoE's q/k/v biases; the other
    models have none), fp32 and bf16, eager and sdpa, checkpointing off, non-reentrant and
    reentrant, training, forward and inference."""
    att = "q_proj,k_proj,v_proj,o_proj"

    def save(p, m):
        p["modules_to_save"] = m
        return p

    def bias(p, b):
        p["lora_bias"] = b
        return p

    todo = []
    for p, kinds in (
        (save(family_lora("phi3", 0, 8, "qkv_proj,o_proj"), "lm_head"), ("training", "forward", "inference")),
        (save(family_lora("olmo2", 1, 16, "all-linear", dtype="fp32", checkpoint="non-reentrant", attn="eager"), "embed_tokens,lm_head"), ("training",)),
        (save(family_lora("gemma2", 2, 8, None), "lm_head"), ("training", "forward")),
        (save(family_lora("gemma3_text", 3, 8, "all-linear", checkpoint="reentrant"), "embed_tokens"), ("training",)),
        (save(family_lora("gemma3_text", 0, 16, None, dtype="fp32", checkpoint="non-reentrant"), "embed_tokens,lm_head"), ("training",)),
        (save(moe_lora(0, 8, "q_proj,v_proj"), "lm_head"), ("training",)),  # mixtral grouped_mm balanced sdpa fp32
        (save(moe_lora(7, 8, att, checkpoint="non-reentrant"), "embed_tokens"), ("training",)),  # qwen3_moe eager balanced eager bf16
        (save(moe_lora(13, 8, "q_proj,v_proj", checkpoint="reentrant"), "embed_tokens,lm_head"), ("training",)),  # qwen2_moe eager bf16
        (save(gptoss_lora(1, 8, att), "lm_head"), ("training",)),  # eager balanced bf16
        (save(deepseek_lora(0, 8, "q_a_proj,o_proj"), "embed_tokens,lm_head"), ("training", "inference")),  # grouped_mm sdpa fp32
        (save(moe_lora(2, 4, "q_proj,v_proj"), "lm_head"), ("forward",)),  # mixtral batched_mm worst bf16
        (bias(family_lora("phi3", 1, 8, "all-linear"), "all"), ("training",)),
        (bias(family_lora("olmo2", 2, 8, "q_proj,v_proj", checkpoint="non-reentrant"), "lora_only"), ("training",)),
        (bias(family_lora("gemma2", 0, 8, None, dtype="fp32"), "all"), ("training",)),
        (bias(family_lora("gemma3_text", 1, 8, "all-linear", checkpoint="reentrant"), "lora_only"), ("training",)),
        (bias(gptoss_lora(0, 8, "q_proj,v_proj"), "all"), ("training", "forward")),  # grouped_mm balanced fp32
        (bias(gptoss_lora(2, 16, att, checkpoint="non-reentrant"), "lora_only"), ("training",)),  # grouped_mm worst bf16
        (bias(gptoss_lora(3, 8, "k_proj,o_proj", checkpoint="reentrant"), "all"), ("training",)),  # eager worst fp32
        (bias(gptoss_lora(8, 8, "", "mlp.router.weight"), "lora_only"), ("training",)),  # batched_mm: the router's ParamWrapper
        (bias(moe_lora(12, 8, "q_proj,v_proj"), "all"), ("training", "inference")),  # qwen2_moe grouped_mm sdpa fp32
        (bias(moe_lora(13, 16, att, checkpoint="non-reentrant"), "lora_only"), ("training",)),  # eager eager bf16
        (bias(moe_lora(14, 4, "v_proj,o_proj", checkpoint="reentrant"), "lora_only"), ("training",)),  # batched_mm sdpa fp32
        (bias(moe_lora(15, 8, "all-linear"), "all"), ("training",)),  # grouped_mm worst eager bf16: the shared expert too
        (bias(moe_lora(0, 8, "q_proj,v_proj"), "all"), ("training",)),  # mixtral: no bias
        (bias(moe_lora(9, 8, att), "all"), ("training",)),  # qwen3_moe grouped_mm worst eager bf16
        (bias(deepseek_lora(1, 8, "q_proj,kv_b_proj", checkpoint="non-reentrant"), "all"), ("training",)),  # eager eager bf16
    ):
        todo += [(p, kind) for kind in kinds]
    return todo


def bgrid():
    """peft's bias all / lora_only on the families whose configs take attention_bias (OLMo-2,
    Gemma 2, Gemma 3 text: q/k/v/o biases, which xgrid's points leave off): a projection whose
    bias trains gives an output that needs a gradient in layer 0 too. fp32 and bf16, eager and
    sdpa, checkpointing off, non-reentrant and reentrant, targets one projection or all-linear."""
    todo = []
    for mt, i, r, targets, bias, opts in (
        ("olmo2", 0, 8, "q_proj", "all", dict(dtype="fp32")),
        ("olmo2", 1, 8, "o_proj,down_proj", "lora_only", dict(checkpoint="non-reentrant")),
        ("olmo2", 2, 16, "all-linear", "all", dict(attn="eager", checkpoint="reentrant")),
        ("gemma2", 0, 8, "q_proj", "lora_only", dict(dtype="fp32")),
        ("gemma2", 1, 8, "k_proj,up_proj", "all", dict(checkpoint="non-reentrant")),
        ("gemma3_text", 2, 8, "o_proj", "all", dict(dtype="fp32", checkpoint="reentrant")),
        ("gemma3_text", 3, 4, "all-linear", "lora_only", dict()),
        ("gemma3_text", 0, 8, "v_proj", "all", dict(attn="eager")),
    ):
        p = family_lora(mt, i, r, targets, **opts)
        p.update(lora_bias=bias, attention_bias=True)
        todo.append((p, "training"))
    return todo


def dfgrid():
    """DoRA over fp32 weights on the llama family (dora.json's rows are bf16): all-linear and
    q_proj,v_proj, dropout 0 and 0.05 (base_layer(x) recomputed), checkpointing off,
    non-reentrant and reentrant, training, forward and inference; ranks rotate."""
    todo = []
    for t, mt in enumerate(H.MODEL_TYPES):
        todo.append((lora(mt, t * 2 + 1, RANKS[t], "all-linear", dtype="fp32", use_dora=True,
                          checkpoint=("none", "non-reentrant", "reentrant", "none")[t % 4]), "training"))
        todo.append((lora(mt, t + 4, RANKS[(t + 1) % 4], "q_proj,v_proj", dtype="fp32", lora_dropout=0.05 if t % 2 else 0.0,
                          use_dora=True, checkpoint="non-reentrant" if t % 2 else "none"), ("forward", "training", "inference", "training")[t % 4]))
    for p, _ in todo:
        p["use_dora"] = True
    return todo


def drgrid():
    """DoRA (use_dora=True) on issue 30's models: the families' projections (Phi-3's fused
    qkv_proj and gate_up_proj, all-linear) and the MoE models' attention (peft's ParamWrapper
    raises on use_dora, so no target_parameters), fp32 and bf16, eager and sdpa, dropout 0 and
    0.05, checkpointing off, non-reentrant and reentrant, training, forward and inference."""
    att = "q_proj,k_proj,v_proj,o_proj"
    todo = []
    for p, kinds in (
        (family_lora("phi3", 0, 8, "qkv_proj,o_proj"), ("training", "forward", "inference")),
        (family_lora("phi3", 1, 16, "all-linear", dtype="fp32", checkpoint="reentrant", lora_dropout=0.05), ("training",)),
        (family_lora("olmo2", 2, 8, "all-linear", checkpoint="non-reentrant"), ("training",)),
        (family_lora("olmo2", 3, 4, "q_proj,v_proj", dtype="fp32", attn="eager", lora_dropout=0.05), ("training",)),
        (family_lora("gemma2", 0, 8, None), ("training", "inference")),
        (family_lora("gemma3_text", 1, 8, "all-linear", checkpoint="reentrant"), ("training",)),
        (family_lora("gemma3_text", 2, 16, None, dtype="fp32", lora_dropout=0.05, checkpoint="non-reentrant"), ("training",)),
        (moe_lora(0, 8, "q_proj,v_proj"), ("training", "forward")),  # mixtral grouped_mm balanced sdpa fp32
        (moe_lora(7, 8, att, checkpoint="non-reentrant"), ("training",)),  # qwen3_moe eager balanced eager bf16
        (moe_lora(12, 8, "q_proj,v_proj", lora_dropout=0.05), ("training",)),  # qwen2_moe grouped_mm sdpa fp32
        (moe_lora(15, 4, "all-linear", checkpoint="reentrant"), ("training",)),  # qwen2_moe: attention and shared expert
        (gptoss_lora(1, 8, att), ("training", "inference")),  # eager balanced bf16
        (gptoss_lora(0, 8, "q_proj,v_proj", checkpoint="non-reentrant"), ("training",)),
        (deepseek_lora(0, 8, "q_a_proj,o_proj"), ("training",)),  # grouped_mm sdpa fp32
        (deepseek_lora(1, 8, "q_proj,kv_b_proj", checkpoint="reentrant"), ("training",)),  # eager eager bf16
    ):
        p["use_dora"] = True
        todo += [(p, kind) for kind in kinds]
    return todo


def moe_name_of(p, kind):
    import make_moe_grid as MG
    if p["model_type"] == "gpt_oss":
        import make_gptoss_grid as GG
        base = GG.name_of(p, kind)
    elif p["model_type"] == "deepseek_v3":
        import make_deepseek_grid as DG
        base = DG.name_of(p, kind)
    else:
        base = MG.name_of(p, kind)
    if p["optimizer"] != "adamw_torch_fused":  # (make_moe_grid.py's names leave the optimizer out)
        base = base[: -len(kind) - 1] + f" optimizer={p['optimizer']} {kind}"
    return name_of(p, kind, base)


def run_one(job):
    p, kind = job
    if "experts" in p:
        import make_moe_grid as MG
        r = MG.run_one(job)
        r["name"] = moe_name_of(p, kind)
        return r
    r = G.run_one(job)
    r["name"] = names(p, kind)
    return r


def names(p, kind):
    """A point's name: make_moe_grid.py's or make_family_grid.py's description for their models."""
    if "experts" in p:
        return moe_name_of(p, kind)
    if p["model_type"] in H.FAMILY_TYPES:
        import make_family_grid as FG
        return name_of(p, kind, FG.name_of(p, kind))
    return name_of(p, kind)


def main():
    import bitsandbytes
    import peft
    import transformers
    quant, dora, eight = "--qlora" in sys.argv, "--dora" in sys.argv, "--int8" in sys.argv
    storage = "--quant-storage" in sys.argv
    fam, moe = "--families" in sys.argv, "--moe" in sys.argv
    tp = "--target-parameters" in sys.argv
    gptoss, deepseek = "--gpt-oss" in sys.argv, "--deepseek" in sys.argv
    gptoss_p, deepseek_p, conv = "--gpt-oss-params" in sys.argv, "--deepseek-params" in sys.argv, "--converted" in sys.argv
    shared, q2 = "--qwen2-moe-shared" in sys.argv, "--qwen2-moe-4bit" in sys.argv
    moe = moe or tp or gptoss or deepseek or gptoss_p or deepseek_p or conv or shared or q2
    extras, mdora, fbias = "--extras" in sys.argv, "--models-dora" in sys.argv, "--families-bias" in sys.argv
    dfp32 = "--dora-fp32" in sys.argv
    dora = dora and not dfp32
    todo = dfgrid() if dfp32 else bgrid() if fbias else xgrid() if extras else drgrid() if mdora else q2grid() if q2 else sgrid() if shared else gptoss_pgrid() if gptoss_p else deepseek_pgrid() if deepseek_p else cgrid() if conv else ogrid() if gptoss else dsgrid() if deepseek else pgrid() if tp else fgrid() if fam else mgrid() if moe else dgrid() if dora else int8grid() if eight else qgrid() if quant else qsgrid() if storage else grid()
    # One process per point: bitsandbytes caches its "dynamic" quantization map per process
    # (name2qmap), so each measurement must create it itself, as a fresh training run does.
    path = os.path.join(OUT, "lora_families.json" if fam else "dora.json" if dora else "int8.json" if eight else "qlora.json" if quant else "qlora_storage.json" if storage else "lora.json")
    if moe:
        fixture = "qlora_qwen2_moe.json" if q2 else "lora_qwen2_moe_shared.json" if shared else "lora_params_gpt_oss.json" if gptoss_p else "lora_params_deepseek_v3.json" if deepseek_p else "lora_converted.json" if conv else "lora_gpt_oss.json" if gptoss else "lora_deepseek_v3.json" if deepseek else "lora_params.json" if tp else "lora.json"
        path = os.path.join(HERE, "../../tests/fixtures/moe_grid", fixture)
    if extras or mdora or fbias or dfp32:
        path = os.path.join(OUT, "lora_extras_models.json" if extras else "dora_models.json" if mdora else "dora_fp32.json" if dfp32 else "lora_bias_families.json")
    if "--only" in sys.argv:
        doc, t0 = G.measure_only(path, todo, run_one, names, sys.argv[sys.argv.index("--only") + 1], maxtasksperchild=1)
        return G.write_fixture(path, doc, t0)
    results, t0 = G.measure_all(todo, run_one, maxtasksperchild=1)
    flag = " --dora-fp32" if dfp32 else " --families-bias" if fbias else " --extras" if extras else " --models-dora" if mdora else " --qwen2-moe-4bit" if q2 else " --qwen2-moe-shared" if shared else " --gpt-oss-params" if gptoss_p else " --deepseek-params" if deepseek_p else " --converted" if conv else " --gpt-oss" if gptoss else " --deepseek" if deepseek else " --target-parameters" if tp else " --families" if fam else " --moe" if moe else " --dora" if dora else " --int8" if eight else " --qlora" if quant else " --quant-storage" if storage else ""
    doc = dict(generator="tools/pytorch/make_lora_grid.py" + flag, torch=torch.__version__,
               transformers=transformers.__version__, peft=peft.__version__, bitsandbytes=bitsandbytes.__version__,
               counted="requested bytes of blocks >= 512 B, absolute; the step is the Trainer's (measure_hf.py) over "
                       "the parameters that require grad; dropout is CPU's kernel (an x-typed noise tensor)",
               points=results)
    G.write_fixture(path, doc, t0)


if __name__ == "__main__":
    main()
