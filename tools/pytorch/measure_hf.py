#!/usr/bin/env python3
"""measure_hf.py -- what eager PyTorch allocates when Hugging Face transformers' own modeling code
runs a causal LM (llama, mistral, qwen2, qwen3; phi3, olmo2, gemma2 and gemma3_text for make_family_grid.py), per phase, mode-free: the ground truth of the
`hf` flavour (issue #16), measured with measure_cs336.py's method.

Method (measure_cs336.py's): the whole run -- model construction from a config with random
weights, two warm-up steps, the measured third step -- runs inside ONE
torch.profiler(profile_memory=True) session with no TorchDispatchMode; allocations are read
from the profiler's event tree, linked by address, so levels are absolute. Requested bytes of
blocks >= 512 B; CPU RNG stashes and CPU-only kernel scratch are left out as there.

The step is the Trainer's (transformers.Trainer.training_step + the inner loop):
  data       input_ids (B, S) int64 and labels = input_ids.clone() (DataCollatorForLanguageModeling
             with mlm=False copies input_ids to labels; the model shifts them in its loss)
  zero_grad  model.zero_grad(set_to_none=True) (the Trainer calls it after each step; the memory
             is the same, and this keeps vramscope's phase order)
  forward    out = model(input_ids=..., labels=..., use_cache=..., logits_to_keep=...), up to and
             including lm_head
  loss       the rest of that call (ForCausalLMLoss: logits.float(), the padded/shifted labels,
             cross_entropy), then `loss = out.loss; del out` (compute_loss returns only the loss,
             so the logits die before backward)
  backward   loss.backward(), then `loss = loss.detach()` (training_step returns the detached
             loss, so the graph -- and what a reentrant checkpoint's ctx holds -- dies here)
  optimizer  clip_grad_norm_(params, max_grad_norm) (the Trainer's default 1.0; 0 = off), then
             optimizer.step() over the parameters that require grad

LoRA (peft, when the point has lora_r): get_peft_model(model, LoraConfig(r, lora_alpha,
lora_dropout, target_modules, bias, use_dora)) right after loading, with peft's default
autocast_adapter_dtype=True (fp32 adapters on bf16 weights), then gradient checkpointing (the
Trainer enables it after wrapping; transformers' gradient_checkpointing_enable also calls
enable_input_require_grads).
Profile types: inference (torch.no_grad(), no labels, result unbound), forward (autograd on, no
labels, result unbound), forward-loss (labels, no backward), training.

Options the user has in transformers: --attn eager|sdpa (SDPA's CPU backend is recorded: CPU
has flash-for-cpu and math, CUDA also memory-efficient), --dtype fp32|bf16 (the dtype the weights
are loaded in: `dtype=` of from_config; no fp32 master copy), --use-cache (default: the
config's, true for all four), --logits-to-keep, --checkpoint none|reentrant|non-reentrant
(gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ...})),
--optimizer adamw_torch_fused (Trainer's default) | adamw_torch_foreach | adamw_torch_forloop | sgd,
--attention-mask none|ones (what a tokenizer's collator passes with unpadded batches).
Autocast (the point's `autocast`: the Trainer's bf16=True / fp16=True, fp16 with accelerate's GradScaler) runs
with CUDA's op policies registered on CPU (autocast_region).

Run:  python3 measure_hf.py --model-type llama --hidden-size 128 --intermediate-size 384 \
          --num-layers 2 --num-heads 4 --num-kv-heads 2 --vocab-size 1000 --seq 64 --batch 2 \
          --profile-type training [--attn sdpa] [--dtype bf16] [--json out.json]
"""
import argparse
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import measure_cs336 as M

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# The dense families of make_family_grid.py (their own grids).
FAMILY_TYPES = ("phi3", "olmo2", "gemma2", "gemma3_text")
OPTIMIZERS = ("adamw_torch_fused", "adamw_torch_foreach", "adamw_torch_forloop", "sgd", "adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "adafactor")
CHECKPOINTS = ("none", "reentrant", "non-reentrant")


def hf_config(p):
    """A transformers config object of `p["model_type"]` with the point's shape."""
    import transformers as T
    cls = {"llama": T.LlamaConfig, "mistral": T.MistralConfig, "qwen2": T.Qwen2Config, "qwen3": T.Qwen3Config,
           "phi3": T.Phi3Config, "olmo2": T.Olmo2Config, "gemma2": T.Gemma2Config,
           "gemma3_text": T.Gemma3TextConfig}[p["model_type"]]
    kw = dict(hidden_size=p["hidden_size"], intermediate_size=p["intermediate_size"], num_hidden_layers=p["num_layers"],
              num_attention_heads=p["num_heads"], num_key_value_heads=p["num_kv_heads"], vocab_size=p["vocab_size"],
              max_position_embeddings=p.get("max_position_embeddings", 4096), tie_word_embeddings=p.get("tied", False),
              use_cache=p.get("use_cache", True), rms_norm_eps=1e-6)
    if p.get("head_dim"):
        kw["head_dim"] = p["head_dim"]
    if p["model_type"] in ("mistral", "phi3"):
        kw["sliding_window"] = p.get("sliding_window")
    if p["model_type"] in ("qwen2", "qwen3") and p.get("sliding_window"):
        # Qwen2's (and Qwen3's) window is on only with use_sliding_window, and only on the layers
        # at or after max_window_layers: 0 (the default here) slides every layer (layer_types all
        # "sliding_attention"); a point's max_window_layers keeps the layers below it full.
        kw.update(use_sliding_window=True, sliding_window=p["sliding_window"], max_window_layers=p.get("max_window_layers", 0))
    if p["model_type"] in ("olmo2", "gemma2", "gemma3_text") and "attention_bias" in p:
        # q/k/v/o biases (the configs' attention_bias, off by default): what peft's bias trains.
        kw["attention_bias"] = p["attention_bias"]
    if p["model_type"] == "phi3":
        # Phi3Config's pad_token_id (32000) is outside a small vocabulary: the embedding's
        # padding_idx is a row inside it instead (Phi-3-mini's 32000 is one of its 32064 rows).
        kw["pad_token_id"] = p.get("pad_token_id", 0)
    if p["model_type"] in ("gemma2", "gemma3_text"):
        # Gemma's head_dim defaults to 256 whatever the width: the point names its own.
        kw["head_dim"] = p.get("head_dim") or p["hidden_size"] // p["num_heads"]
        for k in ("sliding_window", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                  "layer_types"):
            if k in p:
                kw[k] = p[k]
    return cls(**kw)


def load_4bit(p, dtype):
    """A QLoRA model as a user gets it: a random model saved to disk, reloaded by from_pretrained
    with BitsAndBytesConfig(load_in_4bit=True, ...) (or, `load_in_8bit`, load_in_8bit=True and
    llm_int8_threshold), then peft's prepare_model_for_kbit_training (fp32 casts of every
    non-quantized parameter; gradient checkpointing when the point has it, with
    enable_input_require_grads). bitsandbytes' CPU-only repacking for AVX512-BF16 inference
    (`_convert_weight_packed_for_cpu`, never run on CUDA) is turned off on every Linear4bit; the
    8-bit layers run CUDA's autograd function on CPU too (`use_cuda_int8_matmul`)."""
    import tempfile
    import bitsandbytes as bnb
    import peft
    import transformers as T
    with record_function("grid::save"):
        src = T.AutoModelForCausalLM.from_config(hf_config(p), dtype=dtype)
        d = tempfile.mkdtemp(prefix="qlora-")
        src.save_pretrained(d)
        del src
    if p.get("load_in_8bit"):
        qc = T.BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=p.get("llm_int8_threshold", 6.0))
        use_cuda_int8_matmul()
    else:
        compute = {"fp32": torch.float32, "bf16": torch.bfloat16}[p.get("compute_dtype", p.get("dtype", "fp32"))]
        qc = T.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=p.get("quant_type", "nf4"),
                                  bnb_4bit_use_double_quant=p.get("double_quant", False),
                                  bnb_4bit_compute_dtype=compute,
                                  bnb_4bit_quant_storage={"uint8": torch.uint8, "bf16": torch.bfloat16, "fp16": torch.float16,
                                                          "fp32": torch.float32}[p.get("quant_storage", "uint8")])
    # An MoE point's experts implementation (measure_moe.py) is a load option: the saved config does not keep it.
    extra = dict(experts_implementation=p["experts"]) if p.get("experts") else {}
    model = T.AutoModelForCausalLM.from_pretrained(d, quantization_config=qc, dtype=dtype, attn_implementation=p.get("attn", "sdpa"), **extra)
    for m in model.modules():
        if isinstance(m, bnb.nn.Linear4bit):
            m.support_avx512bf16_for_cpu = False
    # On CPU, from_pretrained leaves the unquantized parameters as views into one buffer holding
    # the whole checkpoint file; a CUDA load copies each parameter to the device on its own. A
    # clone gives each its own storage, as on a GPU (prepare's fp32 casts do the same).
    with torch.no_grad():
        for prm in model.parameters():
            if type(prm).__name__ not in ("Params4bit", "Int8Params"):
                prm.data = prm.data.clone()
    import gc
    gc.collect()
    ck = p.get("checkpoint", "none")
    if p.get("prepare", True):
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=ck != "none",
                                                     gradient_checkpointing_kwargs={"use_reentrant": ck == "reentrant"})
    elif ck != "none":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ck == "reentrant"})
    return model


# The most outlier columns any 8-bit matmul of the run held back (`state.idx`); vramscope's rule
# on meta is none, so a point that has some is refused.
INT8_OUTLIER_COLUMNS = [0]


def use_cuda_int8_matmul():
    """bitsandbytes' `matmul` (what Linear8bitLt calls) runs `MatMul8bitFp` (dequantize the weight,
    F.linear) when training on CPU or XPU and `MatMul8bitLt` (LLM.int8(): int8 input, int32
    product, outlier columns) everywhere else; CUDA, what vramscope models, always takes
    MatMul8bitLt. Patched so the CPU run takes it too, and counts the outlier columns."""
    import bitsandbytes as bnb
    from bitsandbytes.autograd import _functions as F8

    def matmul(A, B, out=None, state=None, threshold=0.0, bias=None):
        state = state or F8.MatmulLtState()
        if threshold > 0.0:
            state.threshold = threshold
        r = F8.MatMul8bitLt.apply(A, B, out, bias, state)
        if state.idx is not None:
            INT8_OUTLIER_COLUMNS[0] = max(INT8_OUTLIER_COLUMNS[0], state.idx.numel())
        return r

    bnb.matmul = matmul
    F8.matmul = matmul


def make_optimizer(name, params):
    if name in ("adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit"):
        # The Trainer's bitsandbytes optims (paging falls back to ordinary buffers on CPU).
        import bitsandbytes as bnb
        return bnb.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                               optim_bits=32 if name.endswith("32bit") else 8, is_paged=name.startswith("paged"))
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if name == "adafactor":  # the Trainer's: get_optimizer_cls_and_kwargs' _get_adafactor
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False, weight_decay=0.0)
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, fused=True, **kw)
    if name == "adamw_torch_foreach":  # CUDA's default for torch.optim.AdamW(); CPU defaults to the loop
        return torch.optim.AdamW(params, foreach=True, **kw)
    return torch.optim.AdamW(params, foreach=False, **kw)


class LossPhase:
    """Opens the `loss` phase when lm_head returns (the loss is computed inside the model's
    forward, as the Trainer calls it) and closes it once the step has dropped the output."""

    def __init__(self, model):
        self.rf = None
        self.armed = False
        model.get_output_embeddings().register_forward_hook(self.hook)

    def hook(self, *_):
        if self.armed and self.rf is None:
            self.rf = record_function(M.PHASE_MARK + "loss")
            self.rf.__enter__()

    def close(self):
        if self.rf is not None:
            self.rf.__exit__(None, None, None)
        self.rf, self.armed = None, False


def run(p, kind, wrap=None):
    """Profile one point; returns (profiler, model description). `wrap(model)` parallelises the
    model before the optimizer is built, in place (measure_tp.py, fully_shard) or by returning
    the wrapper the step calls instead (DistributedDataParallel, measure_dist.py --lora)."""
    import transformers as T
    B, S = p["batch"], p["seq"]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[p.get("dtype", "fp32")]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        with record_function("grid::setup"):
            torch.manual_seed(42)
            if p.get("load_in_4bit") or p.get("load_in_8bit"):
                model = load_4bit(p, dtype)
            else:
                model = T.AutoModelForCausalLM.from_config(hf_config(p), attn_implementation=p.get("attn", "sdpa"), dtype=dtype)
            if p.get("lora_r"):
                import peft
                targets = p["target_modules"]
                save = p.get("modules_to_save")
                lc = peft.LoraConfig(r=p["lora_r"], lora_alpha=p["lora_alpha"], lora_dropout=p.get("lora_dropout", 0.0), bias=p.get("lora_bias", "none"),
                                     use_dora=p.get("use_dora", False),
                                     # None: peft's default for the model_type (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)
                                     target_modules=None if targets is None else targets if targets == "all-linear" else targets.split(",") if targets else [],
                                     task_type="CAUSAL_LM",
                                     # target_parameters: peft's ParamWrapper on nn.Parameters (MoE experts, router)
                                     target_parameters=p["target_parameters"].split(",") if p.get("target_parameters") else None,
                                     modules_to_save=save.split(",") if save else None)
                model = peft.get_peft_model(model, lc)
            ck = p.get("checkpoint", "none")
            if ck != "none" and not (p.get("load_in_4bit") or p.get("load_in_8bit")):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ck == "reentrant"})
            model.train() if kind == "training" else model.eval()
            loss_phase = LossPhase(model)
            inner = model
            if wrap is not None:
                model = wrap(model) or model
            trainable = [q for q in model.parameters() if q.requires_grad]
            # prepare_model patches the model it is given, before DDP wraps it (FSDP2 shards in place).
            amp = accelerate_forward(inner, p)
            opt = make_optimizer(p.get("optimizer", "adamw_torch_fused"), trainable) if kind == "training" else None
            gen = torch.Generator().manual_seed(42)
        extra = dict(use_cache=p.get("use_cache", True), logits_to_keep=p.get("logits_to_keep", 0))
        # Under accelerate's wrapper the autocast region is the patched forward's own.
        autocast = contextlib.nullcontext if amp else autocast_region(p)
        # The Trainer's fp16=True: accelerate's torch.amp.GradScaler (PyTorch's defaults; its
        # scale and growth tracker are made at the first scale()).
        scaler = torch.amp.GradScaler("cpu") if p.get("autocast") == "fp16" and kind == "training" else None
        for step in range(M.NSTEPS):
            with record_function(f"{M.STEP_MARK}{step}"):
                with M.phase("data"):
                    input_ids = torch.randint(0, p["vocab_size"], (B, S), generator=gen)
                    labels = input_ids.clone() if kind in ("training", "forward-loss") else None
                    mask = torch.ones(B, S, dtype=torch.int64) if p.get("attention_mask") == "ones" else None
                    if p.get("position_ids"):
                        # Sequence parallelism: the model sees S / tp tokens per rank and cannot
                        # derive the positions itself.
                        extra["position_ids"] = torch.arange(S).unsqueeze(0)
                if kind in ("training", "forward-loss"):
                    if kind == "training":
                        with M.phase("zero_grad"):
                            model.zero_grad(set_to_none=True)
                    with M.phase("forward"):
                        loss_phase.armed = True
                        with autocast():
                            out = model(input_ids=input_ids, attention_mask=mask, labels=labels, **extra)
                            loss = out.loss
                            del out
                        loss_phase.close()
                    if kind == "training":
                        with M.phase("backward"):
                            # accelerator.backward: `scaler.scale(loss).backward()` under fp16.
                            (loss if scaler is None else scaler.scale(loss)).backward()
                            loss = loss.detach()
                        with M.phase("optimizer"):
                            # SGD without clipping allocates nothing: a 4-byte block (uncounted,
                            # < 512 B) marks the phase's start level for the analysis.
                            torch.empty(1)
                            if scaler is not None and p.get("max_grad_norm", 1.0) > 0:
                                # accelerator.clip_grad_norm_ unscales first (unscale_gradients).
                                scaler.unscale_(opt)
                            if p.get("max_grad_norm", 1.0) > 0:
                                torch.nn.utils.clip_grad_norm_(trainable, p.get("max_grad_norm", 1.0))
                            if scaler is None:
                                opt.step()
                            else:
                                # AcceleratedOptimizer.step: scaler.step(optimizer), scaler.update().
                                scaler.step(opt)
                                scaler.update()
                                # vramscope's meta run sees no values: a skipped step (inf/NaN
                                # gradients, no optimizer state made) would not be its step.
                                assert scaler.get_scale() == 65536.0, f"GradScaler skipped a step (scale {scaler.get_scale()})"
                    del loss
                else:
                    with torch.no_grad() if kind == "inference" else contextlib.nullcontext():
                        with M.phase("forward"), autocast():
                            model(input_ids=input_ids, attention_mask=mask, **extra)
    return prof, inner


def accelerate_forward(model, p, region=None):
    """The point's `amp: accelerate` -- what the Trainer's bf16=True / fp16=True really runs:
    `Accelerator.prepare_model` (accelerate 1.x, `if self.native_amp:`) replaces the prepared
    model's forward by `convert_outputs_to_fp32(autocast(forward))`, so the output's fp16/bf16
    tensors (the logits, an MoE model's router logits) get an fp32 copy, alive until
    compute_loss drops the output. The same two lines as prepare_model, with accelerate's own
    `convert_outputs_to_fp32`; the autocast is `region` (measure_gpu.py's CUDA autocast) or
    autocast_region's (CUDA's policies on CPU). Returns whether it patched."""
    if p.get("amp", "torch") == "torch" or not p.get("autocast"):
        return False
    assert p["amp"] == "accelerate", p["amp"]
    from types import MethodType
    from accelerate.utils import convert_outputs_to_fp32
    region = region or autocast_region(p)()
    model._original_forward = model.forward
    model.forward = MethodType(region(model.forward.__func__), model)
    model.forward = MethodType(convert_outputs_to_fp32(model.forward.__func__), model)
    return True


def autocast_region(p):
    """The Trainer's `bf16=True` (`autocast`): `torch.autocast` around the model's call and
    `loss = out.loss; del out` (compute_loss), backward outside it, with CUDA's policies for the
    ops CPU autocast leaves alone (`cuda_autocast_policies`)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(p.get("autocast") or "")
    if dtype is None:
        return contextlib.nullcontext
    cuda_autocast_policies()
    return lambda: torch.autocast("cpu", dtype=dtype)


_CUDA_POLICIES = []


def cuda_autocast_policies():
    """CPU autocast's op lists are not CUDA's (aten/src/ATen/autocast_mode.cpp: AutocastCPU vs
    AT_FORALL_* in autocast_mode.h). Of the ops these models run on low-precision inputs, CUDA has
    `sum` on its fp32_set_opt_dtype list (a bf16 input sums into an fp32 output) and CPU has it on
    none: Qwen's bf16 routing weights times the bf16 expert outputs reach
    `weighted_out.view(...).sum(dim=1)` in integrations/moe.py. This registers CUDA's policies on
    the AutocastCPU key for those ops, so the CPU run dispatches what a CUDA run does: inside the
    region the kernel sets dtype=float32 when the first input is floating and not fp64 and no
    dtype was given (fp32_set_opt_dtype), or casts every such input to fp32 (fp32), then runs
    the op with autocast excluded -- what WrapFunction_ does. Idempotent per process."""
    if _CUDA_POLICIES:
        return
    lib = torch.library.Library("aten", "IMPL")
    _CUDA_POLICIES.append(lib)
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def eligible(t):
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64

    def set_opt_dtype(op, at):
        # `at`: dtype's position in the schema (softmax.int, log_softmax.int), None: keyword-only.
        def kernel(x, *args, **kw):
            args = list(args)
            given = args[at - 1] if at is not None and len(args) >= at else kw.get("dtype")
            with torch._C._ExcludeDispatchKeyGuard(keys):
                if given is None and eligible(x):
                    if at is not None and len(args) >= at:
                        args[at - 1] = torch.float32
                    else:
                        kw["dtype"] = torch.float32
                return op(x, *args, **kw)
        return kernel

    def fp32(op):
        def kernel(*args, **kw):
            with torch._C._ExcludeDispatchKeyGuard(keys):
                cast = [a.float() if eligible(a) and a.dtype != torch.float32 else a for a in args]
                return op(*cast, **kw)
        return kernel

    def passthrough(op):
        def kernel(*args, **kw):
            with torch._C._ExcludeDispatchKeyGuard(keys):
                return op(*args, **kw)
        return kernel

    A = torch.ops.aten
    # fp32_set_opt_dtype (AT_FORALL_FP32_SET_OPT_DTYPE) that CPU autocast lacks.
    for name, op, at in (("sum", A.sum.default, None), ("sum.dim_IntList", A.sum.dim_IntList, None), ("softmax.int", A.softmax.int, 2),
                         ("log_softmax.int", A.log_softmax.int, 2), ("cumsum", A.cumsum.default, None)):
        lib.impl(name, set_opt_dtype(op, at), "AutocastCPU")
    # CPU autocast's promote list has cat, stack and index_copy, CUDA's has none of them: on CUDA
    # they run as they are (cat of a bf16 and an fp32 tensor writes the fp32 output directly),
    # on CPU every narrower input is first copied to the widest type (DeepSeek-V3's
    # cat((q_pass, q_rot)) over fp32 weights: a bf16 projection and an fp32 roped half).
    for name, op in (("cat", A.cat.default), ("stack", A.stack.default), ("index_copy", A.index_copy.default)):
        lib.impl(name, passthrough(op), "AutocastCPU")
    # fp32 (AT_FORALL_FP32) that CPU autocast lacks, of those an RMSNorm, RoPE or a router runs.
    for name, op in (("exp", A.exp.default), ("pow.Tensor_Scalar", A.pow.Tensor_Scalar), ("rsqrt", A.rsqrt.default),
                     ("reciprocal", A.reciprocal.default), ("softplus", A.softplus.default)):
        lib.impl(name, fp32(op), "AutocastCPU")
    # lower_precision_fp (AT_FORALL_LOWER_PRECISION_FP) that CPU autocast lacks: einsum (CS336's
    # Linear and attention). CUDA casts einsum's operands with cached_cast before einsum makes
    # its views, so a weight is cast once per region and the copy lives in the autocast cache;
    # on CPU the cast would happen in bmm, on views, uncached. CPU_EINSUM_CACHE stands in for
    # the C++ cache (cached_cast's condition: fp32, requires grad, a leaf, not a view) and is
    # cleared with it when the outermost region exits.
    def lower(op):
        def kernel(equation, tensors, *args, **kw):
            dt = torch.get_autocast_dtype("cpu")
            with torch._C._ExcludeDispatchKeyGuard(keys):
                return op(equation, [cached_cast(t, dt) for t in tensors], *args, **kw)
        return kernel

    def cached_cast(t, dt):
        if not (isinstance(t, torch.Tensor) and t.dtype == torch.float32):
            return t
        if not (t.requires_grad and t.is_leaf and not t._is_view()):
            return t.to(dt)
        hit = CPU_EINSUM_CACHE.get(id(t))
        if hit is None or hit[0] is not t:
            hit = CPU_EINSUM_CACHE[id(t)] = (t, t.to(dt))
        return hit[1]

    lib.impl("einsum", lower(A.einsum.default), "AutocastCPU")
    clear = torch.clear_autocast_cache

    def clear_both():
        CPU_EINSUM_CACHE.clear()
        clear()
    torch.clear_autocast_cache = clear_both


CPU_EINSUM_CACHE = {}


def sdpa_backends(prof):
    """The SDPA kernels that ran (aten op names), e.g. _scaled_dot_product_flash_attention_for_cpu."""
    seen = set()

    def walk(n):
        name = getattr(n, "name", "")
        if "scaled_dot_product" in name or "efficient_attention" in name or "flash_attention" in name:
            seen.add(name)
        for c in n.children:
            walk(c)

    for r in prof.profiler.kineto_results.experimental_event_tree():
        walk(r)
    return sorted(seen)


def measure(p, kind, wrap=None, other_threads=False):
    """`other_threads`: a gloo process group frees some blocks on its own threads (M.analyse)."""
    prof, model = run(p, kind, wrap)
    per, log = M.analyse(M.alloc_rows(prof), M.phases_of(kind), other_threads)
    info = dict(sdpa_backends=sdpa_backends(prof), parameters=sum(t.numel() for t in model.parameters()),
                trainable_parameters=sum(t.numel() for t in model.parameters() if t.requires_grad),
                gradient_checkpointing=bool(getattr(model, "is_gradient_checkpointing", False)),
                attn_implementation=model.config._attn_implementation)
    if p.get("load_in_8bit"):
        info["int8_outlier_columns"] = INT8_OUTLIER_COLUMNS[0]
        assert INT8_OUTLIER_COLUMNS[0] == 0, f"{INT8_OUTLIER_COLUMNS[0]} outlier columns: vramscope models none"
    return per, log, info


def add_shape_args(a):
    """The model's shape and the batch, flags shared with measure_generate.py."""
    a.add_argument("--model-type", choices=MODEL_TYPES + FAMILY_TYPES, default="llama")
    a.add_argument("--hidden-size", type=int, default=128)
    a.add_argument("--intermediate-size", type=int, default=384)
    a.add_argument("--num-layers", type=int, default=2)
    a.add_argument("--num-heads", type=int, default=4)
    a.add_argument("--num-kv-heads", type=int, default=2)
    a.add_argument("--head-dim", type=int)
    a.add_argument("--vocab-size", type=int, default=1000)
    a.add_argument("--max-position-embeddings", type=int, default=4096)
    a.add_argument("--tied", action="store_true")
    a.add_argument("--seq", type=int, default=64)
    a.add_argument("--batch", type=int, default=2)


def main(argv=None):
    a = argparse.ArgumentParser(description="Per-phase peak memory of a transformers causal LM, mode-free (CPU profiler).")
    add_shape_args(a)
    a.add_argument("--profile-type", choices=M.PROFILE_TYPES, default="training")
    a.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    a.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    a.add_argument("--use-cache", choices=("true", "false"), default="true")
    a.add_argument("--logits-to-keep", type=int, default=0)
    a.add_argument("--checkpoint", choices=CHECKPOINTS, default="none")
    a.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw_torch_fused")
    a.add_argument("--max-grad-norm", type=float, default=1.0)
    a.add_argument("--attention-mask", choices=("none", "ones"), default="none")
    a.add_argument("--autocast", choices=("none", "bf16", "fp16"), default="none")
    a.add_argument("--amp", choices=("torch", "accelerate"), default="torch",
                   help="torch: `with torch.autocast()` around the call; accelerate: prepare_model's wrapper")
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--json", help="write the per-phase result (JSON) here")
    a.add_argument("--events", help="write the measured step's allocation/free log (CSV) here")
    x = a.parse_args(argv)
    torch.set_num_threads(x.threads)
    p = dict(model_type=x.model_type, hidden_size=x.hidden_size, intermediate_size=x.intermediate_size,
             num_layers=x.num_layers, num_heads=x.num_heads, num_kv_heads=x.num_kv_heads, head_dim=x.head_dim,
             vocab_size=x.vocab_size, max_position_embeddings=x.max_position_embeddings, tied=x.tied, seq=x.seq,
             batch=x.batch, attn=x.attn, dtype=x.dtype, use_cache=x.use_cache == "true", logits_to_keep=x.logits_to_keep,
             checkpoint=x.checkpoint, optimizer=x.optimizer, max_grad_norm=x.max_grad_norm, attention_mask=x.attention_mask)
    if x.autocast != "none":
        p.update(autocast=x.autocast, amp=x.amp)
    per, log, info = measure(p, x.profile_type)
    if x.events:
        M.write_events(x.events, log)
    import transformers
    print(f"hf {x.profile_type}: {p} (torch {torch.__version__}, transformers {transformers.__version__}, CPU); {info}")
    M.print_phases(per)
    if x.json:
        with open(x.json, "w") as f:
            json.dump(dict(point=p, profile_type=x.profile_type, torch=torch.__version__,
                           transformers=transformers.__version__, info=info, phases=per), f, indent=1)


if __name__ == "__main__":
    main()
