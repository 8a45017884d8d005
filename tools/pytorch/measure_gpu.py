#!/usr/bin/env python3
"""measure_gpu.py -- issue #31: what a real CUDA run allocates and reserves, pinned as fixtures
(tests/fixtures/gpu/) that tests/gpu_grid.rs compares with vramscope's prediction point by point.

Each point is one run as vramscope runs it: a fresh caching allocator (empty_cache, the cuBLAS
workspaces cleared, peak and accumulated stats reset), the model built on the device, then
warm-up + measured steps (vramscope's defaults, --warmup-steps 1 --measure-steps 1: two steps)
of the profile type, with the step loops of the CPU grid scripts (measure_cs336.py's step_loop,
measure_hf.py's Trainer step, measure_generate.py's generate). The whole run's peaks are
read from torch.cuda's stats at phase boundaries (max_memory_allocated, max_memory_reserved,
memory_stats()'s requested/active peaks), with per-phase peaks beside them. After the run
everything is dropped: what stays allocated is the cuBLAS workspaces (one per handle and
stream: the forward's thread and autograd's), recorded as `leftover_allocated`.

Each point carries the `vramscope profile` flags that predict it (`args`), so the fixture is
self-describing. Points run in three processes at once (`--part`), one of them with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; the card's own figures (mem_get_info, the
CUDA context, the cuBLAS workspaces) are read first, alone on the GPU (`--part card`).
`--part micro` records the allocation traces of single ops CUDA runs differently from CPU:
top-p's sort, SDPA's backends, clip_grad_norm_'s _foreach_norm.
`--part moe` (issue #30) runs the mixture-of-experts models (Mixtral, Qwen3-MoE, Qwen2-MoE,
gpt-oss, DeepSeek-V3: the published configs cut to two layers, tests/fixtures/gpu/configs/,
`--write-configs` writes them) with their routing forced as measure_moe.py forces it, every
experts implementation, and `--part families` Gemma-2, Gemma-3, Phi-3 and OLMo-2 at two layers.
A point's `autocast` is "fp16" for the Trainer's fp16=True (accelerate's GradScaler: the scaled
loss's backward, unscale_ before clipping, step and update), any other true value bf16; its `amp`
says who applies it in training: accelerate's prepared forward (the default, the Trainer's, with
convert_outputs_to_fp32) or "torch" (a plain `with torch.autocast(...)`, as every row measured
before 2026-11-27 ran: those rows carry `"amp": "torch"` and `--autocast-by torch`).

Run on a GPU machine:  python3 measure_gpu.py --all --out DIR   (about 3 minutes on an H200)
On CPU (`--dry`) the same code runs tiny shapes with zero stats, to check the script itself.
"""
import argparse
import contextlib
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
for _p in [os.environ.get("VRAMSCOPE_SHARED_BENCH", "")] + [os.path.join(HERE, up, "shared/bench") for up in ("../..", "../../..")]:
    if _p and os.path.exists(os.path.join(_p, "pytorch_tinyllama.py")):
        os.environ["VRAMSCOPE_SHARED_BENCH"] = _p
        sys.path.insert(0, _p)
        break
import torch

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CUDA = DEV == "cuda"
NSTEPS = 2  # vramscope's --warmup-steps 1 --measure-steps 1
MIB = 1 << 20
REPO = os.path.normpath(os.path.join(HERE, "../.."))


# ----------------------------------------------------------------------------- allocator stats
def reset_allocator():
    gc.collect()
    if CUDA:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_accumulated_memory_stats()


def stat(key):
    return torch.cuda.memory_stats().get(key, 0) if CUDA else 0


class Recorder:
    """Phases as consecutive segments: `mark(name)` closes the open segment (reading its peaks,
    then resetting them) and opens the next. The run's peaks are the segments' maxima."""

    def __init__(self):
        self.segments = []
        self.open = None

    def _read(self):
        if CUDA:
            torch.cuda.synchronize()
            s = torch.cuda.memory_stats()
            return dict(peak_allocated=s.get("allocated_bytes.all.peak", 0), peak_reserved=s.get("reserved_bytes.all.peak", 0),
                        peak_requested=s.get("requested_bytes.all.peak", 0), peak_active=s.get("active_bytes.all.peak", 0),
                        end_allocated=s.get("allocated_bytes.all.current", 0), end_reserved=s.get("reserved_bytes.all.current", 0))
        return dict(peak_allocated=0, peak_reserved=0, peak_requested=0, peak_active=0, end_allocated=0, end_reserved=0)

    def mark(self, name, step=None):
        if self.open is not None:
            self.open.update(self._read())
            self.segments.append(self.open)
        if CUDA:
            torch.cuda.reset_peak_memory_stats()
        self.open = dict(phase=name, step=step)

    def close(self):
        self.mark(None)
        self.open = None

    def peaks(self):
        keys = ("peak_allocated", "peak_reserved", "peak_requested", "peak_active")
        out = {k: max((s[k] for s in self.segments), default=0) for k in keys}
        at = max(self.segments, key=lambda s: s["peak_allocated"]) if self.segments else {}
        out["peak_phase"], out["peak_step"] = at.get("phase"), at.get("step")
        return out


STAT_KEYS = ("allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current",
             "inactive_split_bytes.all.current", "inactive_split_bytes.all.peak", "segment.all.current", "segment.all.peak",
             "allocation.all.peak", "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
             "segment.large_pool.peak", "segment.small_pool.peak", "reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.peak")


def measure_point(p, body):
    """Runs `body(p, R)` on a fresh allocator; returns the fixture row."""
    reset_allocator()
    before = torch.cuda.memory_allocated() if CUDA else 0
    R = Recorder()
    t0 = time.time()
    snap = p.get("snapshot") and CUDA
    if snap:
        torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
    row = dict(id=p["id"], group=p["group"], args=p["args"], alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    if "modelled" in p:
        row["modelled"] = p["modelled"]
    try:
        info = body(p, R) or {}
        R.close()
        stats = torch.cuda.memory_stats() if CUDA else {}
        row.update(ok=True, info=info, measured=R.peaks(), stats={k: stats.get(k, 0) for k in STAT_KEYS})
    except Exception as e:  # a point that fails says why; the others still run
        R.open = None
        row.update(ok=False, error=f"{type(e).__name__}: {e}", trace=traceback.format_exc()[-2000:])
    if snap:
        path = os.path.join(OUT_DIR, f"snapshot_{p['id']}.pickle")
        torch.cuda.memory._dump_snapshot(path)
        torch.cuda.memory._record_memory_history(enabled=None)
        row["snapshot"] = os.path.basename(path)
    gc.collect()
    if CUDA:
        torch.cuda.synchronize()
    row["baseline_allocated"] = before
    row["leftover_allocated"] = torch.cuda.memory_allocated() if CUDA else 0
    row["phases"] = R.segments
    row["seconds"] = round(time.time() - t0, 2)
    reset_allocator()
    return row


# ----------------------------------------------------------------------------- cs336 / tinyllama
def device_batcher(vocab, batch, seq, seed):
    """measure_cs336.batcher on the device (a device generator: randint allocates as on CPU)."""
    gen = torch.Generator(device=DEV).manual_seed(seed)

    def get_batch():
        seq_ids = torch.randint(0, vocab, (batch, seq + 1), generator=gen, device=DEV)
        return seq_ids[:, :-1].contiguous(), seq_ids[:, 1:].contiguous()

    return get_batch


def course_loop(model, opt, loss_fn, get_batch, kind, autocast, R):
    """measure_cs336.step_loop with phases read from the allocator, and CS336's
    `with torch.autocast(...)` around forward and loss when `autocast` names a dtype."""
    ac = (lambda: torch.autocast(DEV, dtype=autocast)) if autocast else contextlib.nullcontext
    logits = loss = None
    for step in range(NSTEPS):
        R.mark("data", step)
        x, y = get_batch()
        if kind in ("training", "forward-loss"):
            if kind == "training":
                R.mark("zero_grad", step)
                opt.zero_grad(set_to_none=True)
            with ac():
                R.mark("forward", step)
                if loss_fn is None:
                    logits, loss = model(x, y)
                else:
                    logits = model(x)
                    R.mark("loss", step)
                    loss = loss_fn(logits, y)
            if kind == "training":
                R.mark("backward", step)
                loss.backward()
                R.mark("optimizer", step)
                opt.step()
            else:
                R.mark("release", step)
                del logits, loss
                logits = loss = None
        else:
            with torch.no_grad() if kind == "inference" else contextlib.nullcontext():
                with ac():
                    R.mark("forward", step)
                    model(x)
        R.mark("between", step)


def course_body(p, R):
    import measure_cs336 as M
    import make_grid as G
    M.batcher = device_batcher
    pt = dict(flavour=p["flavour"], config=p["config"], seq=p["seq"], batch=p["batch"], checkpoint=p.get("checkpoint"),
              fusion=p.get("fusion", False), attention=p.get("attention", "naive"), pure_bf16=p.get("pure_bf16", False))
    setup = (G.cs336_setup if p["flavour"] == "cs336" else G.tinyllama_setup)(pt)
    R.mark("setup")
    with torch.device(DEV):
        model, opt, loss_fn, get_batch = setup()
        course_loop(model, opt, loss_fn, get_batch, p["profile_type"], torch.bfloat16 if p.get("autocast") else None, R)
    return dict(parameters=sum(t.numel() for t in model.parameters()))


# ----------------------------------------------------------------------------- transformers
def hf_model(p):
    import transformers as T
    cfg = T.AutoConfig.from_pretrained(os.path.join(REPO, p.get("config_dir") or os.path.join("tests/fixtures/hf_models", p["config"])))
    if p.get("experts"):
        cfg._experts_implementation = p["experts"]  # as measure_moe.py sets it
    if p.get("num_layers"):
        cfg.num_hidden_layers = p["num_layers"]
    for k, v in p.get("shape", {}).items():
        setattr(cfg, k, v)
    return cfg


def load_4bit_on_device(p, cfg, dtype):
    """QLoRA as a user loads it: a checkpoint on disk, from_pretrained with BitsAndBytesConfig
    onto the GPU (device_map), then prepare_model_for_kbit_training."""
    import peft
    import transformers as T
    src = T.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    d = tempfile.mkdtemp(prefix="qlora-")
    src.save_pretrained(d)
    del src
    gc.collect()
    compute = {"fp32": torch.float32, "bf16": torch.bfloat16}[p.get("compute_dtype", "bf16")]
    qc = T.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=p.get("quant_type", "nf4"),
                              bnb_4bit_use_double_quant=p.get("double_quant", False), bnb_4bit_compute_dtype=compute)
    model = T.AutoModelForCausalLM.from_pretrained(d, quantization_config=qc, dtype=dtype, attn_implementation=p.get("attn", "sdpa"),
                                                   device_map={"": DEV if not CUDA else 0})
    ck = p.get("checkpoint", "none")
    return peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=ck != "none",
                                                gradient_checkpointing_kwargs={"use_reentrant": ck == "reentrant"})


def with_lora(p, model):
    import peft
    t = p["target_modules"]
    lc = peft.LoraConfig(r=p["lora_r"], lora_alpha=p["lora_alpha"], lora_dropout=p.get("lora_dropout", 0.0),
                         target_modules=t if t == "all-linear" else t.split(","), task_type="CAUSAL_LM")
    return peft.get_peft_model(model, lc)


def hf_body(p, R):
    import measure_hf as H
    import transformers as T
    kind, B, S = p["profile_type"], p["batch"], p["seq"]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[p.get("dtype", "bf16")]
    cfg = hf_model(p)
    if p.get("routing"):
        # `forced` stays on the host: its copy_ into the indices allocates nothing on the device.
        if kind == "generate":
            import measure_generate as MG
            MG.install_generate_routing(p)  # the prefill's token count, then one per row each step
        else:
            import measure_moe as MOE
            MOE.install_routing(p)
    R.mark("setup")
    torch.manual_seed(42)
    if p.get("load_in_4bit"):
        model = load_4bit_on_device(p, cfg, dtype)
    else:
        with torch.device(DEV):
            model = T.AutoModelForCausalLM.from_config(cfg, attn_implementation=p.get("attn", "sdpa"), dtype=dtype)
    if p.get("lora_r"):
        model = with_lora(p, model)
    ck = p.get("checkpoint", "none")
    if ck != "none" and not p.get("load_in_4bit"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ck == "reentrant"})
    model.train() if kind == "training" else model.eval()
    trainable = [q for q in model.parameters() if q.requires_grad]
    opt = H.make_optimizer(p.get("optimizer", "adamw_torch_fused"), trainable) if kind == "training" else None
    gen = torch.Generator(device=DEV).manual_seed(42)
    low = torch.float16 if p.get("autocast") == "fp16" else torch.bfloat16
    ac = (lambda: torch.autocast(DEV, dtype=low)) if p.get("autocast") else contextlib.nullcontext
    # The Trainer's bf16=True/fp16=True is accelerate's prepared forward (the point's `amp`,
    # default accelerate; rows measured before it ran a plain torch.autocast and say `torch`):
    # the training step's forward is wrapped, its own region goes.
    if kind == "training" and p.get("autocast") and H.accelerate_forward(model, dict(p, amp=p.get("amp", "accelerate")), torch.autocast(DEV, dtype=low)):
        ac = contextlib.nullcontext
    # The Trainer's fp16=True: accelerate's GradScaler (measure_hf.py's sequence: the scaled
    # loss's backward, unscale_ before clipping, step and update).
    scaler = torch.amp.GradScaler(DEV) if p.get("autocast") == "fp16" and kind == "training" else None
    if kind == "generate":
        return generate_loop(p, model, gen, R)
    for step in range(NSTEPS):
        R.mark("data", step)
        input_ids = torch.randint(0, cfg.vocab_size, (B, S), generator=gen, device=DEV)
        labels = input_ids.clone() if kind in ("training", "forward-loss") else None
        if kind == "training":
            R.mark("zero_grad", step)
            model.zero_grad(set_to_none=True)
            R.mark("forward", step)
            with ac():
                out = model(input_ids=input_ids, labels=labels, use_cache=cfg.use_cache, logits_to_keep=0)
                loss = out.loss
                del out
            R.mark("backward", step)
            (loss if scaler is None else scaler.scale(loss)).backward()
            loss = loss.detach()
            R.mark("optimizer", step)
            if scaler is not None and p.get("max_grad_norm", 1.0) > 0:
                scaler.unscale_(opt)
            if p.get("max_grad_norm", 1.0) > 0:
                torch.nn.utils.clip_grad_norm_(trainable, p.get("max_grad_norm", 1.0))
            if scaler is None:
                opt.step()
            else:
                scaler.step(opt)
                scaler.update()
                assert scaler.get_scale() == 65536.0, f"GradScaler skipped a step (scale {scaler.get_scale()})"
            del loss
        else:
            with torch.no_grad() if kind == "inference" else contextlib.nullcontext():
                with ac():
                    R.mark("forward", step)
                    model(input_ids=input_ids, use_cache=cfg.use_cache, logits_to_keep=0)
        R.mark("between", step)
    return dict(parameters=sum(t.numel() for t in model.parameters()), trainable=sum(t.numel() for t in trainable),
                attn_implementation=model.config._attn_implementation)


def generate_loop(p, model, gen, R):
    import measure_generate as MG
    B, S, N = p["batch"], p["seq"], p["max_new_tokens"]
    calls = [0]
    inner = model.prepare_inputs_for_generation

    @functools.wraps(inner)
    def wrapper(*a, **kw):
        calls[0] += 1
        R.mark("prefill" if calls[0] == 1 else "decode", step_now[0])
        return inner(*a, **kw)

    model.prepare_inputs_for_generation = wrapper
    step_now = [0]
    shapes = []
    for step in range(NSTEPS):
        step_now[0] = step
        calls[0] = 0
        R.mark("data", step)
        input_ids = torch.randint(0, model.config.vocab_size, (B, S), generator=gen, device=DEV)
        out = model.generate(input_ids, **MG.gen_kwargs(p))
        shapes.append(list(out.shape))
        del out
        R.mark("between", step)
    return dict(shapes=shapes, forwards=calls[0], kv_cache_bytes=MG.kv_cache_bytes(p, model))


# ----------------------------------------------------------------------------- the grid
def cs336_cfg(size, seq):
    d, f, layers, heads = {"small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16)}[size]
    return dict(vocab_size=10000, d_model=d, num_layers=layers, num_heads=heads, num_kv_heads=heads, d_ff=f, max_seq_len=seq)


def grid_course():
    pts = []
    for size in ("small", "medium"):
        for S in (128, 1024):
            for B in (2, 8):
                for kind in ("inference", "forward", "training"):
                    for bf16 in (False, True):
                        pid = f"cs336-{size}-S{S}-B{B}-{kind}-{'bf16' if bf16 else 'fp32'}"
                        args = (f"--preset cs336-{size} --context-length {S} --batch-size {B} --max-seq-len {S} "
                                f"--profile-type {kind}" + (" --precision bf16" if bf16 else ""))
                        pts.append(dict(id=pid, group="cs336", flavour="cs336", config=cs336_cfg(size, S), seq=S, batch=B,
                                        profile_type=kind, autocast=bf16, args=args,
                                        snapshot=pid == "cs336-small-S128-B2-training-fp32"))
    # cs336 with flash attention and checkpointing (the memory options CS336 asks about)
    for extra, kw in (("flash", dict(attention="flash")), ("ckpt", dict(checkpoint="blocks"))):
        flag = "--attention flash" if extra == "flash" else "--checkpoint blocks"
        for bf16 in (False, True):
            pid = f"cs336-small-S1024-B8-training-{'bf16' if bf16 else 'fp32'}-{extra}"
            pts.append(dict(id=pid, group="cs336", flavour="cs336", config=cs336_cfg("small", 1024), seq=1024, batch=8,
                            profile_type="training", autocast=bf16, **kw,
                            args=f"--preset cs336-small --context-length 1024 --batch-size 8 --max-seq-len 1024 --profile-type training {flag}"
                                 + (" --precision bf16" if bf16 else "")))
    walk = dict(vocab_size=1000, d_model=256, num_layers=4, num_heads=8, num_kv_heads=4, d_ff=512, max_seq_len=128)
    for kind in ("training", "inference"):
        pts.append(dict(id=f"tinyllama-walkthrough-{kind}", group="tinyllama", flavour="tinyllama", config=walk, seq=128, batch=8,
                        profile_type=kind, args=f"--preset walkthrough --profile-type {kind}"))
    return pts


def run_flags(kw):
    """The `vramscope profile` flags of a point's run options: fp32 weights, autocast,
    checkpointing, peft's LoRA."""
    args = ""
    if kw.get("dtype") == "fp32":
        args += " --dtype fp32"
    if kw.get("autocast"):
        args += " --precision fp16" if kw["autocast"] == "fp16" else " --precision bf16"
        if kw.get("amp") == "torch":
            args += " --autocast-by torch"
    if kw.get("checkpoint"):
        args += f" --gradient-checkpointing {kw['checkpoint']}"
    if kw.get("shape", {}).get("output_router_logits"):
        args += " --output-router-logits"
    if kw.get("lora_r"):
        args += f" --lora-r {kw['lora_r']} --lora-alpha {kw['lora_alpha']} --target-modules {kw['target_modules']}"
    return args


def grid_hf():
    pts = []
    L1 = dict(config="Llama-3.2-1B", preset="Llama-3.2-1B")
    L8 = dict(config="Llama-3.1-8B", preset="Llama-3.1-8B", num_layers=2)

    def add(model, S, B, kind, tag="", **kw):
        pid = f"hf-{model['config']}{'-L2' if model.get('num_layers') else ''}-S{S}-B{B}-{kind}{tag}"
        args = f"--preset {model['preset']} --context-length {S} --batch-size {B} --profile-type {kind}"
        if model.get("num_layers"):
            args += f" --num-layers {model['num_layers']}"
        if kw.get("attn", "sdpa") != "sdpa":
            args += f" --attn-implementation {kw['attn']}"
        args += run_flags(kw)
        if kw.get("load_in_4bit"):
            args += " --load-in-4bit --bnb-4bit-quant-type nf4 --bnb-4bit-compute-dtype bf16"
        if kind == "generate":
            args += f" --max-new-tokens {kw['max_new_tokens']}"
            if kw.get("cache", "dynamic") != "dynamic":
                args += f" --cache-implementation {kw['cache']} --disable-compile"
        pts.append(dict(id=pid, group="hf", profile_type=kind, seq=S, batch=B, args=args, **{k: v for k, v in model.items() if k != "preset"}, **kw))

    for model in (L1, L8):
        for S, B in ((1024, 2), (4096, 1)):
            add(model, S, B, "training")                                    # bf16 weights, fused AdamW, sdpa (flash)
            add(model, S, B, "inference")
        add(model, 1024, 2, "training", "-eager", attn="eager")
        add(model, 1024, 2, "training", "-autocast", dtype="fp32", autocast=True)   # autocast over fp32 masters (sdpa: efficient)
        add(model, 1024, 2, "training", "-fp32", dtype="fp32")                       # fp32 throughout (sdpa: efficient)
        add(model, 1024, 2, "training", "-ckpt", checkpoint="non-reentrant")
        add(model, 2048, 2, "training", "-lora", lora_r=16, lora_alpha=32, target_modules="q_proj,k_proj,v_proj,o_proj",
            checkpoint="non-reentrant")
        add(model, 2048, 2, "training", "-lora-nockpt", lora_r=16, lora_alpha=32, target_modules="q_proj,v_proj")
        add(model, 2048, 2, "training", "-qlora", lora_r=16, lora_alpha=32, target_modules="q_proj,k_proj,v_proj,o_proj",
            checkpoint="non-reentrant", load_in_4bit=True)
        add(model, 512, 2, "generate", "-dynamic", max_new_tokens=16)
        add(model, 512, 2, "generate", "-static", max_new_tokens=16, cache="static")
    # The Trainer's fp16=True: fp16 autocast over fp32 masters with accelerate's GradScaler.
    add(L1, 1024, 2, "training", "-fp16", dtype="fp32", autocast="fp16")
    add(L8, 1024, 2, "training", "-fp16", dtype="fp32", autocast="fp16")
    pts[0]["snapshot"] = True
    return pts


# ----------------------------------------------------------------------------- MoE and the other families (#30)
GPU_CONFIGS = "tests/fixtures/gpu/configs"


def write_moe_configs():
    """tests/fixtures/gpu/configs/NAME/config.json: the published MoE configs of
    tests/fixtures/moe_grid/*meta_params.json cut to two layers (DeepSeek-V3 also to 32 routed
    experts, one dense layer first), with the bf16 torch_dtype their checkpoints carry."""
    def pub(f, name):
        return dict(json.load(open(os.path.join(REPO, "tests/fixtures/moe_grid", f)))["models"][name]["config"])
    cuts = {
        "Mixtral-8x7B-L2": (pub("meta_params.json", "Mixtral-8x7B"), dict(num_hidden_layers=2)),
        "Qwen3-30B-A3B-L2": (pub("meta_params.json", "Qwen3-30B-A3B"), dict(num_hidden_layers=2)),
        "Qwen1.5-MoE-A2.7B-L2": (pub("meta_params.json", "Qwen1.5-MoE-A2.7B"), dict(num_hidden_layers=2)),
        "Qwen1.5-MoE-A2.7B-L2-window": (pub("meta_params.json", "Qwen1.5-MoE-A2.7B"),
                                        dict(num_hidden_layers=2, use_sliding_window=True, sliding_window=512, max_window_layers=2)),
        "gpt-oss-20b-L2": (pub("gpt_oss_meta_params.json", "gpt-oss-20b"), dict(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])),
        "DeepSeek-V3-L2-E32": (pub("deepseek_v3_meta_params.json", "DeepSeek-V3"), dict(num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=32)),
    }
    for name, (c, cut) in cuts.items():
        c.update(cut)
        c["torch_dtype"] = "bfloat16"
        c.pop("quantization_config", None)
        d = os.path.join(REPO, GPU_CONFIGS, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=1, sort_keys=True)
            f.write("\n")


# model: (config folder, model_type, experts, top_k, attn)
MOE_MODELS = {
    "Mixtral-8x7B-L2": ("mixtral", 8, 2, "sdpa"),
    "Qwen3-30B-A3B-L2": ("qwen3_moe", 128, 8, "sdpa"),
    "Qwen1.5-MoE-A2.7B-L2": ("qwen2_moe", 60, 4, "sdpa"),
    # Qwen2-MoE's window: layer 0 slides (512 positions), layer 1 is full.
    "Qwen1.5-MoE-A2.7B-L2-window": ("qwen2_moe", 60, 4, "sdpa"),
    "gpt-oss-20b-L2": ("gpt_oss", 32, 4, "eager"),   # only eager dispatches (_supports_sdpa = False)
    # MLA's value head (128) differs from its q/k head (192): which SDPA kernel CUDA picks is
    # measured by the two `-sdpa` points and sdpa_unequal_heads(), not modelled yet: eager here.
    "DeepSeek-V3-L2-E32": ("deepseek_v3", 32, 8, "eager"),
}


def grid_moe():
    """Each MoE model on the GPU: bf16 weights with fused AdamW (grouped_mm, balanced and worst;
    eager experts; checkpointing), inference (grouped_mm; batched_mm at a few tokens), fp32
    forward, and autocast over fp32 masters. `modelled: false` marks the runs vramscope refuses
    today (autocast of gpt-oss and DeepSeek-V3): measured for when it lands."""
    pts = []

    def add(name, S, B, kind, experts="grouped_mm", routing="balanced", tag="", **kw):
        mt, E, k, attn = MOE_MODELS[name]
        attn = kw.pop("attn", attn)
        pid = f"moe-{name}-S{S}-B{B}-{kind}-{experts}-{routing}{tag}"
        args = (f"--config {GPU_CONFIGS}/{name} --context-length {S} --batch-size {B} --profile-type {kind} "
                f"--experts-implementation {experts} --routing {routing}")
        if attn != "sdpa":
            args += f" --attn-implementation {attn}"
        args += run_flags(kw)
        if kind == "generate":
            args += f" --max-new-tokens {kw['max_new_tokens']}" + (" --do-sample" if kw.get("do_sample") else "")
        modelled = not (mt == "deepseek_v3" and attn == "sdpa")
        pts.append(dict(id=pid, group="moe", profile_type=kind, seq=S, batch=B, args=args, config_dir=f"{GPU_CONFIGS}/{name}",
                        model_type=mt, num_experts=E, top_k=k, experts=experts, routing=routing, attn=attn, modelled=modelled, **kw))

    for name in MOE_MODELS:
        add(name, 1024, 2, "training")
        add(name, 1024, 2, "training", routing="worst")
        add(name, 1024, 2, "inference")
        add(name, 512, 2, "training", experts="eager")
        add(name, 32, 1, "inference", experts="batched_mm")
        add(name, 512, 2, "forward", tag="-fp32", dtype="fp32")
        add(name, 1024, 2, "training", tag="-autocast", dtype="fp32", autocast=True)
        add(name, 1024, 2, "training", tag="-ckpt", checkpoint="non-reentrant")
    add("DeepSeek-V3-L2-E32", 1024, 2, "training", tag="-sdpa", attn="sdpa")
    add("DeepSeek-V3-L2-E32", 1024, 2, "inference", tag="-sdpa", attn="sdpa")
    add("Mixtral-8x7B-L2", 1024, 2, "training", tag="-lora", lora_r=16, lora_alpha=32, target_modules="q_proj,v_proj")
    for name, routing in (("Mixtral-8x7B-L2", "balanced"), ("Qwen3-30B-A3B-L2", "worst"), ("gpt-oss-20b-L2", "balanced"),
                          ("DeepSeek-V3-L2-E32", "balanced")):
        add(name, 512, 2, "generate", routing=routing, tag="-N16", max_new_tokens=16)
    # Larger batches, where the decode's batched_mm copies (top-k expert weights per row) dominate.
    add("Mixtral-8x7B-L2", 128, 16, "generate", tag="-N4", max_new_tokens=4)
    add("Qwen3-30B-A3B-L2", 128, 16, "generate", tag="-N4-sample", max_new_tokens=4, do_sample=True)
    add("gpt-oss-20b-L2", 256, 8, "generate", routing="worst", tag="-N4", max_new_tokens=4)
    add("Qwen3-30B-A3B-L2", 512, 1, "training", tag="-snapshot")
    pts[-1]["snapshot"] = True
    # What landed after the first card run: fp16 autocast (GradScaler), the router's aux loss
    # under autocast, LoRA under autocast, Qwen2-MoE's sliding window.
    add("Mixtral-8x7B-L2", 1024, 2, "training", tag="-fp16", dtype="fp32", autocast="fp16")
    add("Qwen3-30B-A3B-L2", 1024, 2, "training", tag="-fp16", dtype="fp32", autocast="fp16")
    add("Qwen3-30B-A3B-L2", 1024, 2, "training", tag="-aux-autocast", dtype="fp32", autocast=True, shape=dict(output_router_logits=True))
    add("Mixtral-8x7B-L2", 1024, 2, "training", tag="-aux", shape=dict(output_router_logits=True))
    add("Mixtral-8x7B-L2", 1024, 2, "training", tag="-lora-autocast", dtype="fp32", autocast=True, lora_r=16, lora_alpha=32,
        target_modules="q_proj,v_proj")
    add("Qwen1.5-MoE-A2.7B-L2-window", 1024, 2, "training", tag="-window")
    add("Qwen1.5-MoE-A2.7B-L2-window", 1024, 2, "inference", tag="-window")
    return pts


def grid_families():
    """Gemma-2, Gemma-3 (text), Phi-3 and OLMo-2 at two layers: bf16 weights with fused AdamW,
    inference, autocast over fp32 masters, checkpointing."""
    pts = []
    # Gemma-3's window is 1024: a context of 768 keeps SDPA unmasked on every layer.
    # Gemma-2 has no SDPA path in transformers 5.23 (eager only).
    for name, S, attn in (("gemma-2-9b", 1024, "eager"), ("gemma-3-27b-text", 768, "sdpa"), ("Phi-3-mini-4k-instruct", 1024, "sdpa"),
                          ("OLMo-2-1124-7B", 1024, "sdpa")):
        def add(kind, tag="", **kw):
            args = (f"--config tests/fixtures/hf_models/{name} --num-layers 2 --context-length {S} --batch-size 2 --profile-type {kind} "
                    f"--attn-implementation {attn}")
            # hf_body loads bf16 unless the point says fp32; Gemma-2's and OLMo-2's configs name
            # float32, which `--dtype auto` would load.
            args += " --dtype fp32" if kw.get("dtype") == "fp32" else " --dtype bf16"
            if kw.get("autocast"):
                args += " --precision bf16" + (" --autocast-by torch" if kw.get("amp") == "torch" else "")
            if kw.get("checkpoint"):
                args += f" --gradient-checkpointing {kw['checkpoint']}"
            pts.append(dict(id=f"fam-{name}-L2-S{S}-B2-{kind}{tag}", group="families", profile_type=kind, seq=S, batch=2, args=args,
                            config=name, num_layers=2, attn=attn, modelled=True, **kw))
        add("training")
        add("inference")
        add("training", "-autocast", dtype="fp32", autocast=True)
        add("training", "-ckpt", checkpoint="non-reentrant")
    # generate(): the sliding layers' caches crossed by the prompt or the decode steps (Gemma-2's
    # window 4096, Gemma-3's 1024), static caches, sampling and beams.
    gen = [("gemma-2-9b", "eager", 4090, 1, 16, {}), ("gemma-3-27b-text", "sdpa", 1000, 2, 48, {}),
           ("gemma-3-27b-text", "sdpa", 1000, 2, 48, dict(cache="static")), ("gemma-3-27b-text", "sdpa", 1000, 2, 48, dict(do_sample=True)),
           ("Phi-3-mini-4k-instruct", "sdpa", 512, 2, 16, {}), ("Phi-3-mini-4k-instruct", "sdpa", 512, 2, 16, dict(num_beams=2)),
           ("OLMo-2-1124-7B", "sdpa", 512, 2, 16, {}), ("OLMo-2-1124-7B", "sdpa", 512, 2, 16, dict(cache="static"))]
    for name, attn, S, B, N, kw in gen:
        args = (f"--config tests/fixtures/hf_models/{name} --num-layers 2 --context-length {S} --batch-size {B} --profile-type generate "
                f"--attn-implementation {attn} --dtype bf16 --max-new-tokens {N}")
        tag = ""
        if kw.get("cache"):
            args += " --cache-implementation static --disable-compile"
            tag += "-static"
        if kw.get("do_sample"):
            args += " --do-sample"
            tag += "-sample"
        if kw.get("num_beams"):
            args += f" --num-beams {kw['num_beams']}"
            tag += f"-beams{kw['num_beams']}"
        pts.append(dict(id=f"fam-{name}-L2-S{S}-B{B}-generate-N{N}{tag}", group="families", profile_type="generate", seq=S, batch=B,
                        args=args, config=name, num_layers=2, attn=attn, modelled=True, max_new_tokens=N, **kw))
    return pts


def grid_expandable():
    """A subset under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."""
    keep = {"cs336-small-S128-B2-training-fp32", "cs336-small-S1024-B8-training-fp32", "cs336-medium-S1024-B2-training-bf16",
            "cs336-medium-S128-B2-inference-fp32", "hf-Llama-3.2-1B-S1024-B2-training", "hf-Llama-3.2-1B-S512-B2-generate-dynamic",
            "hf-Llama-3.1-8B-L2-S1024-B2-training-autocast"}
    pts = [dict(p) for p in grid_course() + grid_hf() if p["id"] in keep]
    for p in pts:
        p["id"] += "-expandable"
        p["args"] += " --allocator-conf expandable_segments:True"
        p["snapshot"] = p["id"] == "cs336-small-S128-B2-training-fp32-expandable"
    return pts


def shrink(pts):
    """--dry on CPU: the same points at toy shapes."""
    out = []
    for p in pts:
        p = dict(p)
        p["seq"], p["batch"] = min(p["seq"], 16), min(p["batch"], 2)
        if "flavour" in p:
            p["config"] = dict(p["config"], d_model=64, num_layers=2, num_heads=4, num_kv_heads=4 if p["flavour"] == "cs336" else 2,
                               d_ff=128, vocab_size=500, max_seq_len=p["seq"])
        else:
            p["shape"] = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
                              head_dim=16)
            p["shape"]["pad_token_id"] = 0
            if p.get("group") == "moe":
                p["shape"].update(moe_intermediate_size=32, num_key_value_heads=4 if p["model_type"] == "deepseek_v3" else 2)
                if p["model_type"] == "deepseek_v3":
                    p["shape"].update(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)
                    p["shape"]["head_dim"] = 8  # DeepseekV3Config sets head_dim = qk_rope_head_dim in __init__
            p["num_layers"] = 2
            p.pop("load_in_4bit", None)
            if p.get("max_new_tokens"):
                p["max_new_tokens"] = 3
        out.append(p)
    return out


# ----------------------------------------------------------------------------- card and micro
def versions():
    v = dict(torch=torch.__version__, cuda=torch.version.cuda, python=sys.version.split()[0])
    for m in ("transformers", "peft", "bitsandbytes", "accelerate"):
        try:
            v[m] = __import__(m).__version__
        except Exception as e:  # noqa: BLE001 -- recorded, not fatal
            v[m] = f"missing ({type(e).__name__})"
    return v


def card():
    r = dict(versions=versions(), env={k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG",
                                                                     "CUDA_MODULE_LOADING", "TORCH_CUBLASLT_UNIFIED_WORKSPACE")})
    try:
        r["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.used,driver_version",
                                          "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        r["nvidia_smi"] = f"failed: {e}"
    if not CUDA:
        return r
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    pr = torch.cuda.get_device_properties(0)
    r.update(name=torch.cuda.get_device_name(0), total_memory=pr.total_memory, mem_get_info_total=total,
             sm_count=pr.multi_processor_count, capability=list(torch.cuda.get_device_capability(0)))

    def used():
        torch.cuda.synchronize()
        f, t = torch.cuda.mem_get_info()
        return dict(used=t - f, reserved=torch.cuda.memory_reserved(), allocated=torch.cuda.memory_allocated())

    r["after_init"] = dict(used=total - free, reserved=0, allocated=0)
    x = torch.ones(16, device="cuda")
    r["after_first_alloc"] = used()
    a = torch.randn(1024, 1024, device="cuda")
    b = a @ a
    r["after_first_matmul"] = used()
    w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
    (w @ a).sum().backward()
    r["after_first_backward"] = used()
    q = torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.bfloat16)
    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    r["after_first_sdpa"] = used()
    del x, a, b, w, q
    gc.collect()
    r["after_del"] = used()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    r["after_clear"] = used()
    return r


def trace_of(fn):
    """The allocator's trace (action, size) while fn runs, from the memory history."""
    reset_allocator()
    if not CUDA:
        fn()
        return []
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    tr = snap["device_traces"][0] if snap["device_traces"] else []
    out = [[e["action"], e["size"]] for e in tr if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free")]
    reset_allocator()
    return out


def micro():
    rows = []

    def run(name, fn, **meta):
        try:
            peak0 = 0
            tr = trace_of(fn)
            reset_allocator()
            fn()
            if CUDA:
                torch.cuda.synchronize()
                peak0 = torch.cuda.max_memory_allocated()
            rows.append(dict(name=name, trace=tr, peak_allocated=peak0, **meta))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(name=name, error=f"{type(e).__name__}: {e}", **meta))

    from transformers.generation.logits_process import TopPLogitsWarper, TopKLogitsWarper
    for B, V in ((1, 128256), (4, 128256), (2, 32000), (8, 151936), (3, 1000)):
        def topp(B=B, V=V):
            ids = torch.zeros(B, 1, dtype=torch.long, device=DEV)
            s = torch.randn(B, V, device=DEV)
            out = TopPLogitsWarper(0.9)(ids, s)
            del out, s
        run(f"top_p B{B} V{V}", topp, batch=B, vocab=V, op="TopPLogitsWarper(0.9) on fp32 (B, V) scores, scores made inside")

        def sort(B=B, V=V):
            s = torch.randn(B, V, device=DEV)
            v, i = torch.sort(s, descending=False)
            del v, i, s
        run(f"sort B{B} V{V}", sort, batch=B, vocab=V, op="torch.sort fp32 (B, V), scores made inside")

        def topk(B=B, V=V):
            ids = torch.zeros(B, 1, dtype=torch.long, device=DEV)
            s = torch.randn(B, V, device=DEV)
            out = TopKLogitsWarper(50)(ids, s)
            del out, s
        run(f"top_k B{B} V{V}", topk, batch=B, vocab=V, op="TopKLogitsWarper(50), scores made inside")
    if CUDA:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backs = dict(flash=SDPBackend.FLASH_ATTENTION, efficient=SDPBackend.EFFICIENT_ATTENTION, math=SDPBackend.MATH)
        for (B, H, S, D, dt) in ((2, 32, 1024, 64, torch.bfloat16), (1, 32, 4096, 128, torch.bfloat16), (2, 8, 1000, 64, torch.bfloat16),
                                 (2, 32, 1024, 64, torch.float32)):
            for name, be in backs.items():
                if dt == torch.float32 and name == "flash":
                    continue

                def sdpa(B=B, H=H, S=S, D=D, dt=dt, be=be):
                    q = torch.randn(B, H, S, D, device=DEV, dtype=dt, requires_grad=True)
                    k = torch.randn(B, H, S, D, device=DEV, dtype=dt, requires_grad=True)
                    v = torch.randn(B, H, S, D, device=DEV, dtype=dt, requires_grad=True)
                    with sdpa_kernel(be):
                        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    o.sum().backward()
                    del q, k, v, o
                run(f"sdpa {name} B{B} H{H} S{S} D{D} {str(dt)[6:]}", sdpa, backend=name, shape=[B, H, S, D], dtype=str(dt)[6:],
                    op="q, k, v (requires_grad), sdpa(is_causal=True), o.sum().backward()")
            # which backend PyTorch picks by itself: the profiler's kernel names
            try:
                from torch.profiler import ProfilerActivity, profile
                q = torch.randn(B, H, S, D, device=DEV, dtype=dt, requires_grad=True)
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
                names = sorted({e.name for e in prof.events() if "attention" in e.name})
                rows.append(dict(name=f"sdpa auto B{B} H{H} S{S} D{D} {str(dt)[6:]}", picked=names))
                del q
            except Exception as e:  # noqa: BLE001
                rows.append(dict(name="sdpa auto", error=str(e)))
    for dt in (torch.float32, torch.bfloat16):
        def clip(dt=dt):
            ps = [torch.nn.Parameter(torch.randn(n, device=DEV, dtype=dt)) for n in (2048 * 2048, 8192 * 2048, 2048, 512 * 2048, 3)]
            for q in ps:
                q.grad = torch.randn_like(q)
            torch.nn.utils.clip_grad_norm_(ps, 1.0)
            del ps
        run(f"clip_grad_norm_ {str(dt)[6:]}", clip, dtype=str(dt)[6:], op="5 params with grads, clip_grad_norm_(1.0)")

        def fused_adamw(dt=dt):
            ps = [torch.nn.Parameter(torch.randn(n, device=DEV, dtype=dt)) for n in (2048 * 2048, 8192 * 2048, 2048, 3)]
            for q in ps:
                q.grad = torch.randn_like(q)
            o = torch.optim.AdamW(ps, fused=True)
            o.step()
            o.step()
            del o, ps
        run(f"adamw fused {str(dt)[6:]}", fused_adamw, dtype=str(dt)[6:], op="4 params, AdamW(fused=True), two steps")
    return rows


def micro2():
    """Traces for the CUDA-only rules the grid's misses name: cuDNN attention (forward and
    backward, with and without GQA and a mask), the reduce kernel's staging buffer (a sum over
    the token dims, as RMSNorm's weight gradient takes it) and embedding_dense_backward."""
    rows = []

    def run(name, fn, **meta):
        try:
            rows.append(dict(name=name, trace=trace_of(fn), **meta))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(name=name, error=f"{type(e).__name__}: {e}", **meta))

    if CUDA:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for (B, H, Hk, S, D, mask) in ((2, 32, 8, 1024, 64, False), (1, 32, 8, 4096, 128, False), (8, 12, 12, 1024, 64, False),
                                       (2, 16, 16, 512, 128, False), (1, 8, 8, 1000, 64, False), (4, 32, 32, 256, 128, False),
                                       (2, 32, 8, 1024, 64, True), (2, 16, 16, 512, 128, True)):
            def cudnn(B=B, H=H, Hk=Hk, S=S, D=D, mask=mask):
                q = torch.randn(B, H, S, D, device=DEV, dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(B, Hk, S, D, device=DEV, dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(B, Hk, S, D, device=DEV, dtype=torch.bfloat16, requires_grad=True)
                m = torch.ones(S, S, device=DEV, dtype=torch.bool).tril().expand(B, 1, S, S) if mask else None
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=not mask,
                                                                         enable_gqa=Hk != H)
                o.sum().backward()
                del q, k, v, o, m
            run(f"cudnn B{B} H{H} Hkv{Hk} S{S} D{D}{' mask' if mask else ''}", cudnn, shape=[B, H, Hk, S, D], mask=mask,
                op="q, k, v bf16 (requires_grad), cudnn sdpa (enable_gqa when Hkv < H), o.sum().backward()")
            # which kernel auto picks for the same call
            try:
                from torch.profiler import ProfilerActivity, profile
                q = torch.randn(B, H, S, D, device=DEV, dtype=torch.bfloat16)
                k = torch.randn(B, Hk, S, D, device=DEV, dtype=torch.bfloat16)
                m = torch.ones(S, S, device=DEV, dtype=torch.bool).tril().expand(B, 1, S, S) if mask else None
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=m, is_causal=not mask, enable_gqa=Hk != H)
                rows.append(dict(name=f"auto B{B} H{H} Hkv{Hk} S{S} D{D}{' mask' if mask else ''}",
                                 picked=sorted({e.name for e in prof.events() if "attention" in e.name})))
                del q, k, m
            except Exception as e:  # noqa: BLE001
                rows.append(dict(name="auto", error=str(e)))
    for (S, D, dt) in ((4096, 4096, torch.bfloat16), (2048, 4096, torch.bfloat16), (1024, 2048, torch.bfloat16), (8192, 768, torch.float32),
                       (2048, 3072, torch.float32), (512, 4096, torch.bfloat16), (16384, 2048, torch.bfloat16), (100, 256, torch.float32)):
        def reduce(S=S, D=D, dt=dt):
            x = torch.randn(1, S, D, device=DEV, dtype=dt)
            y = x.sum((0, 1))
            del x, y
        run(f"sum over tokens S{S} D{D} {str(dt)[6:]}", reduce, shape=[1, S, D], dtype=str(dt)[6:], op="x (1, S, D), x.sum((0, 1))")

        def reduce_f32(S=S, D=D, dt=dt):
            x = torch.randn(1, S, D, device=DEV, dtype=dt)
            y = x.sum((0, 1), dtype=torch.float32)
            del x, y
        run(f"fp32 sum over tokens S{S} D{D} {str(dt)[6:]}", reduce_f32, shape=[1, S, D], dtype=str(dt)[6:], op="x.sum((0, 1), dtype=float32)")
    for (V, D, n, dt) in ((128256, 4096, 4096, torch.bfloat16), (128256, 2048, 2048, torch.bfloat16), (10000, 768, 8192, torch.float32),
                          (32000, 4096, 1000, torch.float32), (151936, 1024, 16384, torch.bfloat16), (1000, 256, 1024, torch.float32)):
        def emb(V=V, D=D, n=n, dt=dt):
            w = torch.nn.Parameter(torch.randn(V, D, device=DEV, dtype=dt))
            idx = torch.randint(0, V, (n,), device=DEV)
            out = torch.nn.functional.embedding(idx, w)
            out.backward(torch.ones_like(out))
            del w, idx, out
        run(f"embedding backward V{V} D{D} n{n} {str(dt)[6:]}", emb, vocab=V, dim=D, tokens=n, dtype=str(dt)[6:],
            op="w (V, D) param, idx (n,) uniform, F.embedding, backward of ones")
    return rows


def sdpa_unequal_heads():
    """Which kernel CUDA's SDPA picks when the value head differs from the q/k head (DeepSeek-V3's
    MLA: 192 and 128), and what it allocates, forward and backward, bf16 and fp32."""
    rows = []
    if not CUDA:
        return rows
    from torch.profiler import ProfilerActivity, profile
    for (B, H, S, Dqk, Dv, dt) in ((2, 128, 1024, 192, 128, torch.bfloat16), (1, 128, 512, 192, 128, torch.bfloat16),
                                   (2, 128, 512, 192, 128, torch.float32), (2, 16, 1024, 192, 128, torch.bfloat16)):
        def run(B=B, H=H, S=S, Dqk=Dqk, Dv=Dv, dt=dt):
            q = torch.randn(B, H, S, Dqk, device=DEV, dtype=dt, requires_grad=True)
            k = torch.randn(B, H, S, Dqk, device=DEV, dtype=dt, requires_grad=True)
            v = torch.randn(B, H, S, Dv, device=DEV, dtype=dt, requires_grad=True)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.1)
            o.sum().backward()
            del q, k, v, o
        name = f"sdpa B{B} H{H} S{S} Dqk{Dqk} Dv{Dv} {str(dt)[6:]}"
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                run()
            picked = sorted({e.name for e in prof.events() if "attention" in e.name or "sdpa" in e.name or "flash" in e.name})
            rows.append(dict(name=name, picked=picked, trace=trace_of(run), shape=[B, H, S, Dqk, Dv], dtype=str(dt)[6:],
                             op="q, k (B, H, S, Dqk), v (B, H, S, Dv), requires_grad; sdpa(is_causal=True, scale=0.1); o.sum().backward()"))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(name=name, error=f"{type(e).__name__}: {e}"))
    return rows


# ----------------------------------------------------------------------------- driver
GPU_NAME = torch.cuda.get_device_name(0) if CUDA else "cpu"
VERSIONS = versions()
OUT_DIR = "."


def run_points(pts, out_path, budget_s):
    t0 = time.time()
    with open(out_path, "a") as f:
        for p in pts:
            if time.time() - t0 > budget_s:
                f.write(json.dumps(dict(id=p["id"], ok=False, error="skipped: the part's time budget ran out")) + "\n")
                continue
            body = course_body if "flavour" in p else hf_body
            row = measure_point(p, body)
            row["gpu"] = GPU_NAME
            if p.get("group") in ("moe", "families"):
                row["versions"] = VERSIONS
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{p['id']}: {'ok' if row.get('ok') else row.get('error')} "
                  f"{row.get('measured', {}).get('peak_allocated', 0) / MIB:.1f} MiB alloc "
                  f"{row.get('measured', {}).get('peak_reserved', 0) / MIB:.1f} MiB res {row['seconds']} s", flush=True)


def main(argv=None):
    global OUT_DIR
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("card", "course", "hf", "expandable", "micro", "micro2", "moe", "families"))
    ap.add_argument("--all", action="store_true", help="card first, then the other parts as parallel processes")
    ap.add_argument("--out", default="gpu_out")
    ap.add_argument("--dry", action="store_true", help="toy shapes (for a CPU check of the script)")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds a part may take before it skips its remaining points")
    ap.add_argument("--only", help="points whose id holds this text")
    ap.add_argument("--ids", help="a comma list of point ids: only these, each with a snapshot")
    ap.add_argument("--write-configs", action="store_true", help="(re)write tests/fixtures/gpu/configs from the MoE meta_params fixtures")
    a = ap.parse_args(argv)
    if a.write_configs:
        write_moe_configs()
        return 0
    OUT_DIR = a.out
    os.makedirs(a.out, exist_ok=True)
    if a.all:
        me = [sys.executable, os.path.abspath(__file__), "--out", a.out, "--budget", str(a.budget)] + (["--dry"] if a.dry else [])
        subprocess.run(me + ["--part", "card"], check=False)
        procs = []
        for part in ("course", "hf", "expandable", "micro"):
            env = dict(os.environ)
            if part == "expandable":
                env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
            procs.append(subprocess.Popen(me + ["--part", part] + (["--only", a.only] if a.only else []) + (["--ids", a.ids] if a.ids else []), env=env))
        return max(p.wait() for p in procs)
    if a.part == "card" and a.ids:
        return 0
    if a.part == "micro" and a.ids:
        return 0
    if a.part == "card":
        with open(os.path.join(a.out, "card.json"), "w") as f:
            json.dump(dict(card(), gpu=GPU_NAME), f, indent=1)
        return 0
    if a.part == "micro2":
        with open(os.path.join(a.out, "micro2.json"), "w") as f:
            json.dump(dict(gpu=GPU_NAME, versions=versions(), rows=micro2()), f)
        return 0
    if a.part == "micro":
        with open(os.path.join(a.out, "micro.json"), "w") as f:
            json.dump(dict(gpu=GPU_NAME, versions=versions(), rows=micro()), f)
        return 0
    pts = {"course": grid_course, "hf": grid_hf, "expandable": grid_expandable, "moe": grid_moe, "families": grid_families}[a.part]()
    if a.only:
        pts = [p for p in pts if a.only in p["id"]]
    if a.ids:
        want = a.ids.split(",")
        pts = [dict(p, snapshot=True) for p in pts if p["id"] in want]
    if a.dry:
        pts = shrink(pts)
    run_points(pts, os.path.join(a.out, f"{a.part}.jsonl"), a.budget)
    if a.part == "moe" and not a.ids:
        with open(os.path.join(a.out, "moe_sdpa.json"), "w") as f:
            json.dump(dict(gpu=GPU_NAME, versions=versions(), rows=sdpa_unequal_heads()), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
