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


def kv_cache_bytes(p, model):
    """The DynamicCache's bytes once generate returns: keys and values of S + N - 1 positions
    (the last token is never fed back) per layer."""
    cfg = model.config
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    el = torch.empty((), dtype=model.dtype).element_size()
    return 2 * cfg.num_hidden_layers * p["batch"] * cfg.num_key_value_heads * (p["seq"] + p["max_new_tokens"] - 1) * hd * el


def run(p):
    import transformers as T
    B, S, N = p["batch"], p["seq"], p["max_new_tokens"]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[p.get("dtype", "fp32")]
    lengths = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        with record_function("grid::setup"):
            torch.manual_seed(42)
            model = T.AutoModelForCausalLM.from_config(H.hf_config(p), attn_implementation=p.get("attn", "sdpa"), dtype=dtype)
            model.eval()
            phases = StepPhases(model)
            gen = torch.Generator().manual_seed(42)
        for step in range(M.NSTEPS):
            with record_function(f"{M.STEP_MARK}{step}"):
                with M.phase("data"):
                    input_ids = torch.randint(0, p["vocab_size"], (B, S), generator=gen)
                phases.start()
                out = model.generate(input_ids, max_new_tokens=N, do_sample=False)
                phases.close()
                lengths.append(out.shape[1])
                del out
    assert lengths == [S + N] * M.NSTEPS, f"generate stopped early: lengths {lengths}, want {S + N}"
    assert phases.calls == N, f"{phases.calls} forwards, want {N}"
    return prof, model


def measure(p):
    prof, model = run(p)
    per, log = M.analyse(M.alloc_rows(prof), phases_of(p["max_new_tokens"]))
    info = dict(sdpa_backends=H.sdpa_backends(prof), parameters=sum(t.numel() for t in model.parameters()),
                attn_implementation=model.config._attn_implementation, kv_cache_bytes=kv_cache_bytes(p, model),
                eos_token_id=model.generation_config.eos_token_id, pad_token_id=model.generation_config.pad_token_id)
    return per, log, info


def main(argv=None):
    a = argparse.ArgumentParser(description="Per-phase peak memory of transformers' greedy generate(), mode-free (CPU profiler).")
    H.add_shape_args(a)
    a.add_argument("--max-new-tokens", type=int, default=4)
    a.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    a.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
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
