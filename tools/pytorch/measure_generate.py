#!/usr/bin/env python3
"""measure_generate.py -- what eager PyTorch allocates when Hugging Face transformers' `generate()`
decodes greedily (do_sample=False, num_beams=1, the default DynamicCache) with a causal LM
(llama, mistral, qwen2, qwen3), per phase, mode-free: the ground truth of vramscope's
`--profile-type generate` (issue #28).

Method (measure_hf.py's): model construction from a config with random weights, two warm-up
generate() calls and the measured third, all inside ONE torch.profiler(profile_memory=True)
session with no TorchDispatchMode; allocations read from the profiler's event tree, linked by
address, levels absolute; requested bytes of blocks >= 512 B; CPU RNG stashes and CPU-only
kernel scratch left out as there.

Options of generate() a point may name (gen_kwargs): cache "static" (cache_implementation,
with disable_compile=True), do_sample (with temperature/top_k/top_p when named, else
GenerationConfig's defaults: top_k 50 only), min_new_tokens, num_return_sequences, num_beams
(beam search: generate returns B x num_return_sequences rows). Sampling draws from the global
generator, seeded once in setup: the measured call's tokens, and so its bytes, are the same on
every run.

A step is what a user's script does:
  data       input_ids = torch.randint(0, V, (B, S)) (no attention_mask: generate builds it)
  prefill    out = model.generate(input_ids, max_new_tokens=N, do_sample=False): everything from
             the call up to the second prepare_inputs_for_generation (generate's setup, the
             prefill forward, the first token's argmax and input_ids growth); the whole call
             when N = 1
  decode_k   (k = 1 .. N-1) from the (k+1)-th prepare_inputs_for_generation to the next one
             (the last: until generate returns): the one-token forward with the DynamicCache
             growing by torch.cat per layer, the fp32 copy of the last logits, argmax, the
             input_ids cat and the stopping criteria
  then `del out` (outside every phase).
4-bit (or 8-bit: `load_in_8bit`, LLM.int8() with CUDA's MatMul8bitLt as measure_hf.load_4bit runs it)
weights and LoRA (issue #28's leftovers; the point's lora_bias, use_dora and modules_to_save as
measure_hf.py passes them), as a user's inference script after QLoRA or LoRA
training runs them: `load_in_4bit` loads the saved random model with
from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, quant_type,
double_quant, compute_dtype)) (measure_hf.load_4bit: bitsandbytes' CPU-only AVX512-BF16 repacking
off); peft's prepare_model_for_kbit_training only when the point's `prepare` is true (a training
step; an inference script does not call it); `lora_r` wraps the model with
get_peft_model(LoraConfig(r, lora_alpha, target_modules)) -- adapters unmerged, fp32 over bf16
weights (autocast_adapter_dtype) -- and PeftModelForCausalLM.generate runs; then model.eval()
(no dropout, no autograd under generate's no_grad).

The boundaries are record_function marks opened by a wrapper around the model's
prepare_inputs_for_generation (called once before each forward). The config's eos_token_id
(2) stays, as a user's model has one: generate then adds EosTokenCriteria and pads finished
rows; a point asserts that all N tokens were generated (no row of the random model met eos in
every row at once).

Run:  python3 measure_generate.py --model-type llama --hidden-size 128 --intermediate-size 384 \
          --num-layers 2 --num-heads 4 --num-kv-heads 2 --vocab-size 1000 --seq 64 --batch 2 \
          --max-new-tokens 4 [--attn sdpa] [--dtype bf16] [--json out.json]
"""
import argparse
import functools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import measure_cs336 as M
import measure_hf as H
import measure_moe as MOE


def phases_of(n):
    return ("data", "prefill") + tuple(f"decode_{k}" for k in range(1, n))


class StepPhases:
    """Opens `prefill` before generate() and `decode_k` at each later prepare_inputs_for_generation."""

    def __init__(self, model):
        self.rf, self.calls = None, 0
        inner = model.prepare_inputs_for_generation

        @functools.wraps(inner)
        def wrapper(*a, **kw):
            self.calls += 1
            if self.calls > 1:
                self.open(f"decode_{self.calls - 1}")
            return inner(*a, **kw)

        model.prepare_inputs_for_generation = wrapper

    def open(self, name):
        self.close()
        self.rf = record_function(M.PHASE_MARK + name)
        self.rf.__enter__()

    def start(self):
        self.calls = 0
        self.open("prefill")

    def close(self):
        if self.rf is not None:
            self.rf.__exit__(None, None, None)
        self.rf = None


def gen_kwargs(p):
    """generate()'s keyword arguments for the point: greedy by default; `cache` static
    (StaticCache, disable_compile=True: on CUDA a static cache would otherwise auto-compile the
    decode forward; on CPU nothing compiles either way), `do_sample` with GenerationConfig's
    defaults unless the point names temperature/top_k/top_p, `min_new_tokens`."""
    kw = dict(max_new_tokens=p["max_new_tokens"], do_sample=bool(p.get("do_sample", False)))
    if p.get("cache", "dynamic") != "dynamic":
        kw.update(cache_implementation=p["cache"], disable_compile=True)
    for k in ("temperature", "top_k", "top_p", "min_new_tokens", "num_beams", "num_return_sequences"):
        if p.get(k) is not None:
            kw[k] = p[k]
    return kw


def kv_cache_bytes(p, model):
    """The cache's bytes once generate returns: keys and values of S + N - 1 positions (the
    last token is never fed back; a StaticCache's max_cache_len is max_length - 1, the same)
    per layer (a sliding layer's window), in the hidden states' type (the embedding's: a 4-bit linear casts its output
    back to its input's type)."""
    cfg = model.config
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    el = model.get_input_embeddings().weight.element_size()
    rows = p["batch"] * max(p.get("num_beams") or 1, p.get("num_return_sequences") or 1)
    full = p["seq"] + p["max_new_tokens"] - 1
    # A sliding layer (layer_types) keeps its window's positions: a DynamicSlidingWindowLayer the
    # last sliding_window - 1 (a view of the last cat), a StaticSlidingWindowLayer
    # min(sliding_window, max_cache_len).
    window = getattr(cfg, "sliding_window", None)
    static = p.get("cache", "dynamic") == "static"
    # Without layer_types (Mistral) a config's sliding_window makes every layer slide
    # (cache_utils.get_layer_types_and_kwargs).
    types = (getattr(cfg, "layer_types", None)
             or ["sliding_attention" if window is not None else "full_attention"] * cfg.num_hidden_layers)
    positions = sum(min(full, window if static else window - 1) if t == "sliding_attention" else full for t in types)
    if getattr(cfg, "kv_lora_rank", None):
        # DeepSeek-V3's latent attention caches the compressed latent (B, 1, S, kv_lora_rank)
        # and the roped k_rot (B, 1, S, qk_rope_head_dim) per layer, not per-head keys and values.
        return rows * positions * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * el
    return 2 * rows * cfg.num_key_value_heads * positions * hd * el


def rows_of(p):
    """The rows generate() runs: the batch expanded by max(num_beams, num_return_sequences)."""
    return p["batch"] * max(p.get("num_beams") or 1, p.get("num_return_sequences") or 1)


def install_generate_routing(p):
    """measure_moe.py's forced routing for generate(): the router's top-k indices are overwritten
    with the point's routing for the forward's token count -- rows x S in the prefill, one per
    row in each decode step -- the forced tensors all built before the profiler starts."""
    import transformers as T
    router = {"mixtral": T.models.mixtral.modeling_mixtral.MixtralTopKRouter,
              "qwen3_moe": T.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeTopKRouter,
              "qwen2_moe": T.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeTopKRouter,
              "gpt_oss": T.models.gpt_oss.modeling_gpt_oss.GptOssTopKRouter,
              "deepseek_v3": T.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3TopkRouter}[p["model_type"]]
    rows = rows_of(p)
    forced = {t: MOE.forced_indices(t, p["top_k"], p["num_experts"], p["routing"]) for t in (rows * p["seq"], rows)}
    original = getattr(router, "_vramscope_original", router.forward)
    router._vramscope_original = original

    def forward(self, hidden_states):
        logits, scores, indices = original(self, hidden_states)
        indices.data.copy_(forced[indices.shape[0]])
        return logits, scores, indices

    router.forward = forward
    return {t: torch.bincount(f.reshape(-1), minlength=p["num_experts"]).tolist() for t, f in forced.items()}


def config_of(p):
    """The point's transformers config: measure_moe.py's for the MoE families, measure_hf.py's else."""
    return MOE.moe_config(p) if p["model_type"] in MOE.MODEL_TYPES else H.hf_config(p)


def prompt_low(model, V):
    """The lowest token id of the random prompt: above the pad token when it is a small id inside
    the vocabulary (OLMo-2's 1, the grid's Phi-3 0), so that generate() cannot infer a padding
    mask from the prompt (as a user's unpadded prompt; vramscope models no padding)."""
    pad = model.generation_config.pad_token_id
    low = pad + 1 if isinstance(pad, int) and 0 <= pad < V else 0
    assert low < V // 2, f"pad token {pad} leaves too few ids"
    return low


def run(p):
    import transformers as T
    B, S, N = p["batch"], p["seq"], p["max_new_tokens"]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[p.get("dtype", "fp32")]
    lengths, shapes = [], []
    routed = install_generate_routing(p) if p["model_type"] in MOE.MODEL_TYPES else None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        with record_function("grid::setup"):
            torch.manual_seed(42)
            if p.get("load_in_4bit") or p.get("load_in_8bit"):
                # load_4bit builds the saved model from measure_hf.hf_config: an MoE point's is
                # measure_moe.py's (as measure_moe.measure sets it for the training grids).
                dense_config = H.hf_config
                H.hf_config = MOE.moe_config if p["model_type"] in MOE.MODEL_TYPES else dense_config
                try:
                    model = H.load_4bit(p, dtype)
                finally:
                    H.hf_config = dense_config
            else:
                model = T.AutoModelForCausalLM.from_config(config_of(p), attn_implementation=p.get("attn", "sdpa"), dtype=dtype)
            # Wrapped before peft: PeftModelForCausalLM keeps the base model's
            # prepare_inputs_for_generation and calls it from its own.
            phases = StepPhases(model)
            if p.get("lora_r"):
                import peft
                targets = p["target_modules"]
                # target_modules "" is [] (only target_parameters: peft's ParamWrapper on the
                # experts' 3-D parameters or the router, as measure_hf.py passes them).
                # bias, use_dora and modules_to_save as measure_hf.py passes them (the
                # --adapters-extras grid).
                save = p.get("modules_to_save")
                lc = peft.LoraConfig(r=p["lora_r"], lora_alpha=p["lora_alpha"], lora_dropout=p.get("lora_dropout", 0.0),
                                     target_modules=targets if targets == "all-linear" else targets.split(",") if targets else [],
                                     target_parameters=p["target_parameters"].split(",") if p.get("target_parameters") else None,
                                     bias=p.get("lora_bias", "none"), use_dora=p.get("use_dora", False),
                                     modules_to_save=save.split(",") if save else None, task_type="CAUSAL_LM")
                model = peft.get_peft_model(model, lc)
            model.eval()
            gen = torch.Generator().manual_seed(42)
            low = prompt_low(model, p["vocab_size"])
        for step in range(M.NSTEPS):
            with record_function(f"{M.STEP_MARK}{step}"):
                with M.phase("data"):
                    input_ids = torch.randint(low, p["vocab_size"], (B, S), generator=gen)
                phases.start()
                out = model.generate(input_ids, **gen_kwargs(p))
                phases.close()
                lengths.append(out.shape[1])
                shapes.append(tuple(out.shape))
                del out
    # generate returns num_return_sequences rows per prompt (beam search: the best of its beams)
    rows = B * (p.get("num_return_sequences") or 1)
    assert shapes == [(rows, S + N)] * M.NSTEPS, f"generate stopped early: shapes {shapes}, want {(rows, S + N)}"
    assert lengths == [S + N] * M.NSTEPS, f"generate stopped early: lengths {lengths}, want {S + N}"
    assert phases.calls == N, f"{phases.calls} forwards, want {N}"
    return prof, model, routed


def measure(p):
    prof, model, routed = run(p)
    per, log = M.analyse(M.alloc_rows(prof), phases_of(p["max_new_tokens"]))
    info = dict(sdpa_backends=H.sdpa_backends(prof), parameters=sum(t.numel() for t in model.parameters()),
                trainable_parameters=sum(t.numel() for t in model.parameters() if t.requires_grad),
                attn_implementation=model.config._attn_implementation, kv_cache_bytes=kv_cache_bytes(p, model),
                eos_token_id=model.generation_config.eos_token_id, pad_token_id=model.generation_config.pad_token_id)
    if p.get("cache") == "static" and getattr(model.config, "layer_types", None):
        # create_masks_for_generate builds one mask per layer type in the order of
        # set(layer_types), which follows the process's string hashes (PYTHONHASHSEED).
        info["mask_order"] = list(set(model.config.layer_types))
    if p.get("load_in_8bit"):
        # (measure_hf.use_cuda_int8_matmul counts them; vramscope models none)
        info["int8_outlier_columns"] = H.INT8_OUTLIER_COLUMNS[0]
        assert H.INT8_OUTLIER_COLUMNS[0] == 0, f"{H.INT8_OUTLIER_COLUMNS[0]} outlier columns: vramscope models none"
    if routed is not None:
        info.update(experts_implementation=p["experts"], routing=p["routing"],
                    tokens_per_expert={str(t): c for t, c in routed.items()})
    return per, log, info


def main(argv=None):
    a = argparse.ArgumentParser(description="Per-phase peak memory of transformers' greedy generate(), mode-free (CPU profiler).")
    H.add_shape_args(a)
    a.add_argument("--max-new-tokens", type=int, default=4)
    a.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    a.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    a.add_argument("--cache", choices=("dynamic", "static"), default="dynamic", help="generate's cache_implementation")
    a.add_argument("--do-sample", action="store_true")
    a.add_argument("--temperature", type=float)
    a.add_argument("--top-k", type=int)
    a.add_argument("--top-p", type=float)
    a.add_argument("--min-new-tokens", type=int)
    a.add_argument("--num-return-sequences", type=int)
    a.add_argument("--num-beams", type=int, help="beam search (_beam_search) with this many beams")
    a.add_argument("--lora-r", type=int, help="peft LoRA adapters of this rank (unmerged)")
    a.add_argument("--lora-alpha", type=float, default=16)
    a.add_argument("--target-modules", default="q_proj,v_proj", help="all-linear or a comma list")
    a.add_argument("--load-in-4bit", action="store_true", help="bitsandbytes 4-bit weights (from_pretrained of the saved model)")
    a.add_argument("--quant-type", choices=("nf4", "fp4"), default="nf4")
    a.add_argument("--double-quant", action="store_true")
    a.add_argument("--compute-dtype", choices=("fp32", "bf16"), default="bf16")
    a.add_argument("--prepare", action="store_true", help="peft's prepare_model_for_kbit_training (a training script's call)")
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--json", help="write the per-phase result (JSON) here")
    a.add_argument("--events", help="write the measured step's allocation/free log (CSV) here")
    x = a.parse_args(argv)
    assert x.max_new_tokens >= 1, "--max-new-tokens must be >= 1"
    torch.set_num_threads(x.threads)
    p = dict(model_type=x.model_type, hidden_size=x.hidden_size, intermediate_size=x.intermediate_size,
             num_layers=x.num_layers, num_heads=x.num_heads, num_kv_heads=x.num_kv_heads, head_dim=x.head_dim,
             vocab_size=x.vocab_size, max_position_embeddings=x.max_position_embeddings, tied=x.tied, seq=x.seq,
             batch=x.batch, max_new_tokens=x.max_new_tokens, attn=x.attn, dtype=x.dtype)
    if x.cache != "dynamic":
        p["cache"] = x.cache
    if x.do_sample:
        p["do_sample"] = True
    for k in ("temperature", "top_k", "top_p", "min_new_tokens", "num_return_sequences", "num_beams"):
        if getattr(x, k) is not None:
            p[k] = getattr(x, k)
    if x.lora_r:
        p.update(lora_r=x.lora_r, lora_alpha=x.lora_alpha, lora_dropout=0.0, target_modules=x.target_modules)
    if x.load_in_4bit:
        p.update(load_in_4bit=True, quant_type=x.quant_type, double_quant=x.double_quant, compute_dtype=x.compute_dtype,
                 prepare=x.prepare, checkpoint="none")
    per, log, info = measure(p)
    if x.events:
        M.write_events(x.events, log)
    import transformers
    print(f"hf generate: {p} (torch {torch.__version__}, transformers {transformers.__version__}, CPU); {info}")
    M.print_phases(per)
    if x.json:
        with open(x.json, "w") as f:
            json.dump(dict(point=p, profile_type="generate", torch=torch.__version__,
                           transformers=transformers.__version__, info=info, phases=per), f, indent=1)


if __name__ == "__main__":
    main()
