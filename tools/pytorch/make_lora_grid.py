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
    JOBS=1 python3 make_lora_grid.py --dora     # tests/fixtures/hf_grid/dora.json: LoraConfig(use_dora=True)
                                                # over bf16 and 4-bit weights
    JOBS=1 python3 make_lora_grid.py --int8     # tests/fixtures/hf_grid/int8.json: LLM.int8() (load_in_8bit),
                                                # CUDA's MatMul8bitLt run on CPU
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


def name_of(p, kind):
    base = G.name_of(p, kind)
    tag = ""
    if p.get("load_in_4bit"):
        tag += f" 4bit {p['quant_type']}{' dq' if p['double_quant'] else ''} compute={p['compute_dtype']}{'' if p['prepare'] else ' unprepared'}"
    if p.get("load_in_8bit"):
        tag += f" 8bit threshold={p['llm_int8_threshold']}{'' if p['prepare'] else ' unprepared'}"
    if not p.get("lora_r"):
        return base[: -len(kind) - 1] + tag + " " + kind
    tag += f" lora r{p['lora_r']} a{p['lora_alpha']} {p['target_modules']}"
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


def run_one(job):
    r = G.run_one(job)
    r["name"] = name_of(*job)
    return r


def main():
    import bitsandbytes
    import peft
    import transformers
    quant, dora, eight = "--qlora" in sys.argv, "--dora" in sys.argv, "--int8" in sys.argv
    todo = dgrid() if dora else int8grid() if eight else qgrid() if quant else grid()
    # One process per point: bitsandbytes caches its "dynamic" quantization map per process
    # (name2qmap), so each measurement must create it itself, as a fresh training run does.
    path = os.path.join(OUT, "dora.json" if dora else "int8.json" if eight else "qlora.json" if quant else "lora.json")
    if "--only" in sys.argv:
        doc, t0 = G.measure_only(path, todo, run_one, name_of, sys.argv[sys.argv.index("--only") + 1], maxtasksperchild=1)
        return G.write_fixture(path, doc, t0)
    results, t0 = G.measure_all(todo, run_one, maxtasksperchild=1)
    flag = " --dora" if dora else " --int8" if eight else " --qlora" if quant else ""
    doc = dict(generator="tools/pytorch/make_lora_grid.py" + flag, torch=torch.__version__,
               transformers=transformers.__version__, peft=peft.__version__, bitsandbytes=bitsandbytes.__version__,
               counted="requested bytes of blocks >= 512 B, absolute; the step is the Trainer's (measure_hf.py) over "
                       "the parameters that require grad; dropout is CPU's kernel (an x-typed noise tensor)",
               points=results)
    G.write_fixture(path, doc, t0)


if __name__ == "__main__":
    main()
