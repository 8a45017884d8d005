#!/usr/bin/env python3
"""fake_hf.py -- full-size transformers models where CPU cannot run them: FakeTensorMode +
torch.distributed._tools' MemTracker around transformers' real modeling code (issue #16's
full-size check of the `hf` flavour).

Under FakeTensorMode no memory is touched; MemTracker follows every storage the real Python
code creates, by category (Parameter, Buffer, Gradient, Activation, Temp, Optstate), and keeps
the peak. Its byte counts are a dispatch mode's (see README.md: modes change some byte counts,
e.g. autograd's InputBuffer accumulates out of place under a mode), and on `cuda` it rounds each
storage up to a multiple of 512 B (the caching allocator's kMinBlockSize: allocated, not
requested, bytes).

Devices: `cuda` fake tensors need no GPU for forward passes. The fake-CUDA backward fails on a
machine without a GPU ("hasPrimaryContext expects a valid device index"); `--device cpu` runs
backward, with CPU kernels' choices (SDPA backend) and no 512 B rounding. SDPA on a GPU-less
build picks the math backend for fake CUDA (it keeps the (B, h, S, S) weights), so only `eager`
rows compare across machines; sdpa is settled on real hardware (issue #19).

    python3 fake_hf.py --preset Llama-3.1-8B --seq 2048 --kind inference [--attn eager]
        [--dtype bf16] [--use-cache true|false] [--device cuda|cpu] [--json out.json]
    python3 fake_hf.py --grid        # the rows committed to tests/fixtures/hf_grid/fake_full.json
    python3 fake_hf.py --moe-grid    # Mixtral-8x7B and Qwen3-30B-A3B rows: tests/fixtures/hf_grid/fake_full_moe.json
    python3 fake_hf.py --family-grid # Gemma-3-27B, Gemma-2-9B, Phi-3-mini, OLMo-2-7B rows (their committed
                                     # config.json files): tests/fixtures/hf_grid/fake_full_families.json
    python3 fake_hf.py --deepseek-grid   # DeepSeek-V3 rows (ground truth only, vramscope refuses the
                                         # model): tests/fixtures/hf_grid/fake_full_deepseek.json

MoE rows (issue #30's full-size check): the experts run as `grouped_mm` (transformers' default
where it dispatches), whose shapes do not depend on the routing, so FakeTensorMode runs it; the
router's top-k indices are forced to the balanced routing as measure_moe.py does. transformers asks
`torch.cuda.get_device_capability` whether grouped_mm may run on CUDA, which needs a GPU: the
script answers (9, 0), an H100.
"""
import argparse
import json
import os
import sys
import time

import torch

# Dimension facts of the published config.json files (hidden, intermediate, layers, heads, kv heads,
# vocab, max positions, rope theta, tied, model_type, head_dim).
PRESETS = {
    "Llama-3.2-1B": (2048, 8192, 16, 32, 8, 128256, 131072, 500000.0, True, "llama", 64),
    "Llama-3.1-8B": (4096, 14336, 32, 32, 8, 128256, 131072, 500000.0, False, "llama", 128),
    "Mistral-7B": (4096, 14336, 32, 32, 8, 32768, 32768, 1000000.0, False, "mistral", 128),
    "Qwen2.5-7B": (3584, 18944, 28, 28, 4, 152064, 32768, 1000000.0, False, "qwen2", 128),
    "Qwen3-8B": (4096, 12288, 36, 32, 8, 151936, 40960, 1000000.0, False, "qwen3", 128),
}
GRID = [
    dict(preset="Llama-3.1-8B", seq=2048, kind="inference", use_cache=True),
    dict(preset="Llama-3.1-8B", seq=2048, kind="inference", use_cache=False),
    dict(preset="Llama-3.1-8B", seq=2048, kind="forward", use_cache=True),
    dict(preset="Llama-3.1-8B", seq=2048, kind="forward", use_cache=False),
    dict(preset="Llama-3.1-8B", seq=8192, kind="inference", use_cache=False),
    dict(preset="Llama-3.1-8B", seq=8192, kind="forward", use_cache=False),
    # backward runs only on fake cpu here (see the top): no 512 B rounding, CPU kernel choices
    dict(preset="Llama-3.1-8B", seq=2048, kind="training", use_cache=False, device="cpu"),
]


# MoE presets: measure_moe.py's point dicts with the published configs' dimensions.
MOE_PRESETS = {
    "Mixtral-8x7B": dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
                         num_kv_heads=8, vocab_size=32000, num_experts=8, top_k=2, max_position_embeddings=32768),
    "Qwen3-30B-A3B": dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=768, num_layers=48, num_heads=32,
                          num_kv_heads=4, vocab_size=151936, num_experts=128, top_k=8, max_position_embeddings=40960,
                          head_dim=128, dense_intermediate_size=6144),
}
MOE_GRID = [dict(preset=p, seq=4096, kind=k, use_cache=(k == "inference")) for p in MOE_PRESETS for k in ("inference", "forward")]
# DeepSeek-V3 (671B): its Hub config.json's dimensions (YaRN factor 40, interleaved rope), kept apart
# from MOE_GRID since vramscope does not run the model yet (tests/deepseek_grid.rs).
DEEPSEEK_PRESETS = {
    "DeepSeek-V3": dict(model_type="deepseek_v3", hidden_size=7168, intermediate_size=2048, dense_intermediate_size=18432,
                        num_layers=61, num_heads=128, num_kv_heads=128, vocab_size=129280, num_experts=256, top_k=8,
                        n_group=8, topk_group=4, first_k_dense_replace=3, n_shared_experts=1, q_lora_rank=1536,
                        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                        rope_interleave=True, yarn_factor=40.0, max_position_embeddings=163840,
                        original_max_position_embeddings=4096),
}
DEEPSEEK_GRID = [dict(preset="DeepSeek-V3", seq=4096, kind=k, use_cache=(k == "inference")) for k in ("inference", "forward")]
# Issue 30's dense families: the committed config.json of each preset (family_presets.py's folders),
# read by AutoConfig as from_pretrained would.
FAMILY_PRESETS = {"Gemma-3-27B": "gemma-3-27b-text", "Gemma-2-9B": "gemma-2-9b", "Phi-3-mini": "Phi-3-mini-4k-instruct",
                  "OLMo-2-7B": "OLMo-2-1124-7B"}
FAMILY_GRID = [dict(preset=p, seq=4096, kind=k, use_cache=(k == "inference")) for p in FAMILY_PRESETS for k in ("inference", "forward")]


def moe_config(r):
    """A point's MoE config (balanced routing, grouped_mm) and the routing installed on its router."""
    import measure_moe as MM
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)  # see the top: an H100
    p = dict({**MOE_PRESETS, **DEEPSEEK_PRESETS}[r["preset"]], batch=r.get("batch", 1), seq=r["seq"], routing="balanced", experts="grouped_mm",
             use_cache=r["use_cache"])
    cfg = MM.moe_config(p)
    if p["model_type"] == "mixtral":
        cfg.sliding_window = None
    MM.install_routing(p)
    return cfg


def family_config(name, use_cache):
    from transformers import AutoConfig
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/fixtures/hf_models")
    cfg = AutoConfig.from_pretrained(os.path.join(root, FAMILY_PRESETS[name]))
    cfg.use_cache = use_cache
    return cfg


def config(name, use_cache):
    import transformers as T
    if name in FAMILY_PRESETS:
        return family_config(name, use_cache)
    h, f, L, nh, kv, V, maxpos, theta, tied, mt, hd = PRESETS[name]
    cls = {"llama": T.LlamaConfig, "mistral": T.MistralConfig, "qwen2": T.Qwen2Config, "qwen3": T.Qwen3Config}[mt]
    kw = dict(hidden_size=h, intermediate_size=f, num_hidden_layers=L, num_attention_heads=nh, num_key_value_heads=kv,
              vocab_size=V, max_position_embeddings=maxpos, rope_theta=theta, tie_word_embeddings=tied, use_cache=use_cache,
              head_dim=hd)
    if mt == "mistral":
        kw["sliding_window"] = None
    return cls(**kw)


def measure(r, device="cuda"):
    import transformers as T
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[r.get("dtype", "bf16")]
    B, S, kind = r.get("batch", 1), r["seq"], r["kind"]
    t0 = time.time()
    with FakeTensorMode(allow_non_fake_inputs=True):
        with torch.device(device):
            cfg = moe_config(r) if r["preset"] in MOE_PRESETS or r["preset"] in DEEPSEEK_PRESETS else config(r["preset"], r["use_cache"])
            model = T.AutoModelForCausalLM.from_config(cfg,
                                                       attn_implementation=r.get("attn", "eager"), dtype=dtype)
        model.train() if kind == "training" else model.eval()
        x = torch.randint(0, model.config.vocab_size, (B, S), device=device)
        opt = torch.optim.AdamW(model.parameters(), fused=True) if kind == "training" else None
        mt = MemTracker()
        mt.track_external(model, *( [opt] if opt else []))
        with mt:
            if kind == "inference":
                with torch.no_grad():
                    model(input_ids=x, use_cache=r["use_cache"])
            elif kind == "forward":
                model(input_ids=x, use_cache=r["use_cache"])
            else:
                loss = model(input_ids=x, labels=x.clone(), use_cache=r["use_cache"]).loss
                loss.backward()
                opt.step()
        peak = mt.get_tracker_snapshot("peak")
    dev = next(iter(k for k in peak if isinstance(k, torch.device)))
    by = {str(k.value) if hasattr(k, "value") else str(k): v for k, v in peak[dev].items()}
    return dict(r, device=device, peak_total=by.pop("Total"), peak_by_category=by, seconds=round(time.time() - t0, 1))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--preset", choices=sorted(PRESETS) + sorted(MOE_PRESETS) + sorted(DEEPSEEK_PRESETS) + sorted(FAMILY_PRESETS), default="Llama-3.1-8B")
    a.add_argument("--seq", type=int, default=2048)
    a.add_argument("--batch", type=int, default=1)
    a.add_argument("--kind", choices=("inference", "forward", "training"), default="inference")
    a.add_argument("--attn", choices=("eager", "sdpa"), default="eager")
    a.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    a.add_argument("--use-cache", choices=("true", "false"), default="true")
    a.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a.add_argument("--moe-grid", action="store_true", help="measure the MoE rows into tests/fixtures/hf_grid/fake_full_moe.json")
    a.add_argument("--deepseek-grid", action="store_true", help="measure the DeepSeek-V3 rows into tests/fixtures/hf_grid/fake_full_deepseek.json")
    a.add_argument("--family-grid", action="store_true", help="measure the Gemma/Phi-3/OLMo-2 rows into tests/fixtures/hf_grid/fake_full_families.json")
    a.add_argument("--grid", action="store_true", help="measure the committed rows into tests/fixtures/hf_grid/fake_full.json")
    a.add_argument("--json")
    x = a.parse_args()
    import transformers
    if x.grid or x.moe_grid or x.deepseek_grid or x.family_grid:
        rows = []
        for r in (MOE_GRID if x.moe_grid else DEEPSEEK_GRID if x.deepseek_grid else FAMILY_GRID if x.family_grid else GRID):
            res = measure(dict(r, attn="eager", dtype="bf16", batch=1), r.get("device", "cuda"))
            print(res, flush=True)
            rows.append(res)
        name = ("fake_full_moe.json" if x.moe_grid else "fake_full_deepseek.json" if x.deepseek_grid
                else "fake_full_families.json" if x.family_grid else "fake_full.json")
        flag = "--moe-grid" if x.moe_grid else "--deepseek-grid" if x.deepseek_grid else "--family-grid" if x.family_grid else "--grid"
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/fixtures/hf_grid", name)
        doc = dict(generator="tools/pytorch/fake_hf.py " + flag, torch=torch.__version__, transformers=transformers.__version__,
                   counted="MemTracker peak under FakeTensorMode, by category: on fake cuda storage bytes rounded up "
                           "to 512 B; on fake cpu (the training row) unrounded",
                   rows=rows)
        with open(out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(out + ".tmp", out)
        print(f"wrote {len(rows)} rows to {os.path.relpath(out)}")
        return
    r = dict(preset=x.preset, seq=x.seq, batch=x.batch, kind=x.kind, attn=x.attn, dtype=x.dtype, use_cache=x.use_cache == "true")
    res = measure(r, x.device)
    print(json.dumps(res, indent=1))
    if x.json:
        with open(x.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
