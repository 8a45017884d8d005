"""cuDNN attention on a CUDA GPU: which kernel `F.scaled_dot_product_attention` picks, and the
allocator's traces of the calls vramscope's `cudnn` backend models beyond micro2.json.

Writes $OUT/cudnn_sdpa.json (tests/fixtures/gpu_cudnn/cudnn_sdpa.json; tests/gpu_micro.rs reads it):
- picked: the kernel auto picks (profiler names, shortened to `_cudnn_att`, `_flash_att`,
  `_efficient`; empty: math) per dtype and head size (GQA 8/2, S 256, with and without grad),
  for short sequences, a decode step (one query, 37 keys) and one with a boolean mask;
- traces: ("alloc" | "free", requested bytes) of
  - `i{B},{H},{Hkv},{S},{D}`: a forward under no_grad (no logsumexp is computed);
  - `h0...` / `h1...`: q, k, v as transformers makes them ((B, S, h, d) memory; h1: q contiguous
    (B, h, S, d), as Phi-3's rotary cat leaves it), the output transposed back, made contiguous,
    weighted and summed, then backward (dO's last stride is 1: no copy);
  - `u`: GQA with q/k heads of 192 and v heads of 128; `d256`, `d160`: larger heads.
Measured on an H200 with torch 2.11.0+cu130 (cuDNN 9.19). Run: `OUT=dir python3 measure_cudnn_sdpa.py`.
"""
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

DEV = "cuda"
BF = torch.bfloat16
CUDNN = [SDPBackend.CUDNN_ATTENTION]


def reset():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def trace(fn):
    reset()
    mem = torch.cuda.memory
    mem._record_memory_history(max_entries=99999)
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return str(e)[:200]
    torch.cuda.synchronize()
    snap = mem._snapshot()
    mem._record_memory_history(enabled=None)
    reset()
    names = {"alloc": "alloc", "free_completed": "free"}
    return [[names[e["action"]], e["size"]] for e in snap["device_traces"][0] if e["action"] in names]


def picked(q, k, **kw):
    try:
        with profile(activities=[ProfilerActivity.CPU]) as p:
            F.scaled_dot_product_attention(q, k, k, **kw)
        return sorted({e.name[6:16] for e in p.events() if "ttention_f" in e.name})
    except Exception as e:  # noqa: BLE001
        return str(e)[:80]


def rnd(*shape, grad=False, dtype=BF):
    return torch.randn(*shape, device=DEV, dtype=dtype, requires_grad=bool(grad))


def main():
    out = dict(gpu=torch.cuda.get_device_name(), versions=dict(torch=torch.__version__, cudnn=torch.backends.cudnn.version()))
    p = {}
    for dt in (torch.float16, BF):
        for d in (80, 96, 128, 160, 192, 256):
            for g in (0, 1):
                p[f"{dt}{d}{g}"] = picked(rnd(1, 8, 256, d, grad=g, dtype=dt), rnd(1, 2, 256, d, grad=g, dtype=dt), is_causal=True, enable_gqa=True)
    for s in (1, 7, 100):
        p[f"S{s}"] = picked(rnd(2, 8, s, 128), rnd(2, 8, s, 128), is_causal=s > 1)
    p["dec"] = picked(rnd(2, 8, 1, 128), rnd(2, 8, 37, 128))
    p["decm"] = picked(rnd(2, 8, 1, 128), rnd(2, 8, 37, 128), attn_mask=torch.ones(2, 1, 1, 37, device=DEV, dtype=torch.bool))
    out["picked"] = p
    t = {}
    for (b, h, g, s, d) in ((2, 32, 8, 1024, 64), (1, 16, 16, 1000, 128), (2, 12, 12, 300, 96)):
        def inference():
            q, k = rnd(b, h, s, d), rnd(b, g, s, d)
            with torch.no_grad(), sdpa_kernel(CUDNN):
                F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=g != h)
        t[f"i{b},{h},{g},{s},{d}"] = trace(inference)
        for bhsd in (0, 1):
            def hf():
                q = rnd(b, h, s, d, grad=1) if bhsd else rnd(b, s, h, d, grad=1).transpose(1, 2)
                k = rnd(b, s, g, d, grad=1).transpose(1, 2)
                w = rnd(b, s, h * d)
                with sdpa_kernel(CUDNN):
                    o = F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=g != h)
                (o.transpose(1, 2).contiguous().reshape(b, s, h * d) * w).sum().backward()
            t[f"h{bhsd}{b},{h},{g},{s},{d}"] = trace(hf)

    def unequal():
        q, k, v = rnd(1, 16, 512, 192, grad=1), rnd(1, 4, 512, 192, grad=1), rnd(1, 4, 512, 128, grad=1)
        with sdpa_kernel(CUDNN):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        o.sum().backward()
    t["u"] = trace(unequal)
    for d in (256, 160):
        def big():
            q = rnd(1, 8, 512, d, grad=1)
            with sdpa_kernel(CUDNN):
                o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            o.sum().backward()
        t[f"d{d}"] = trace(big)
    out["traces"] = t
    with open(os.path.join(os.environ.get("OUT", "."), "cudnn_sdpa.json"), "w") as f:
        json.dump(out, f, indent=0)
    print(out["versions"], p)


if __name__ == "__main__":
    main()
