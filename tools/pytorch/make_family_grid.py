#!/usr/bin/env python3
"""make_family_grid.py -- the fixture grids of the dense families beyond llama (issue 30): Phi-3
(fused qkv_proj and gate_up_proj), OLMo-2 (post-norms, q/k norms over the whole projection), Gemma 2
and Gemma 3 text (scaled embedding, 1 + w norms, sliding and full layers, soft-capping),
measured by measure_hf.py exactly as make_hf_grid.py measures llama (mode-free, one
torch.profiler session per measurement, requested bytes of blocks >= 512 B, absolute), one file
per family: tests/fixtures/hf_grid/<family>.json.

Per family: eight points, attn eager|sdpa x weights fp32|bf16 x gradient checkpointing
off|non-reentrant, on shapes that vary per point (GQA ratios 1-4, vocabularies whose logits rows
are not multiples of 512 B, S 16-96, B 1-3), each as inference, forward and training; then
single-option points: a sliding window shorter than S (phi3, eager and sdpa), a tied head,
use_cache off, reentrant checkpointing, forward-loss, SGD and foreach AdamW.

    python3 make_family_grid.py --family phi3            # JOBS worker processes, default 1
    python3 make_family_grid.py --family olmo2 --only sgd  # re-measure some, keep the others

Gemma 2 and Gemma 3 text (gemma_grid): their own points, tied heads, sliding windows below, at and
above S over alternating sliding/full layers, query_pre_attn_scalar 24, Gemma 2's soft-capping.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import measure_hf as H
import make_hf_grid as G

TYPES3 = G.TYPES3

# (hidden, intermediate, layers, heads, kv_heads, vocab, S, B)
SHAPES = [
    (128, 384, 2, 4, 2, 1000, 64, 2),
    (96, 256, 1, 6, 3, 777, 48, 3),
    (64, 192, 3, 4, 4, 2048, 32, 1),
    (128, 320, 2, 8, 2, 1000, 16, 3),
    (160, 448, 2, 5, 5, 512, 40, 2),
    (128, 384, 1, 2, 1, 1000, 96, 1),
    (64, 128, 2, 4, 1, 777, 24, 2),
    (192, 512, 2, 6, 2, 1024, 32, 2),
]


def point(mt, i, **opts):
    h, f, L, nh, kv, V, S, B = SHAPES[i % len(SHAPES)]
    p = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
             head_dim=None, vocab_size=V, max_position_embeddings=4096, tied=False, seq=S, batch=B, attn="sdpa",
             dtype="fp32", use_cache=True, logits_to_keep=0, checkpoint="none", optimizer="adamw_torch_fused",
             max_grad_norm=1.0, attention_mask="none")
    p.update(opts)
    return p


def name_of(p, kind):
    s = G.name_of(p, kind)[: -len(kind) - 1]
    if p.get("sliding_window"):
        s += f" sliding_window={p['sliding_window']}"
    if "layer_types" in p:
        s += " layers=" + "".join("s" if t == "sliding_attention" else "f" for t in p["layer_types"])
    for k in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"):
        if k in p:
            s += f" {k}={p[k]}"
    return f"{s} {kind}"


def gemma_point(mt, i, window, **opts):
    """A Gemma point: the family's tied head, `window` as a fraction or offset of S (below S, at S, above
    S), alternating layer types (gemma3_text's default pattern of 6 would leave small models all
    sliding), a query_pre_attn_scalar that is not head_dim, and Gemma 2's soft-capping."""
    p = point(mt, i, tied=True)
    L, S = p["num_layers"], p["seq"]
    p["sliding_window"] = {"below": S // 2, "at": S, "above": S + 8}[window]
    p["layer_types"] = ["sliding_attention" if (j + 1) % 2 else "full_attention" for j in range(L)]
    p["query_pre_attn_scalar"] = 24
    if mt == "gemma2":
        p["attn"] = "eager"
        p["attn_logit_softcapping"] = 50.0
        p["final_logit_softcapping"] = 30.0
    p.update(opts)
    return p


def gemma_grid(family):
    """Gemma 2 has no sdpa in transformers 5.23 (`_supports_sdpa = False`: from_config refuses it),
    so its grid is eager over dtype x checkpointing x window below/above S; Gemma 3 runs eager and
    sdpa (a window below S gives its sliding layers a mask, hence repeat_kv instead of enable_gqa)."""
    todo = []
    k = 0
    attns = ("eager",) if family == "gemma2" else ("eager", "sdpa")
    windows = ("below", "above") if family == "gemma2" else ("below",)
    for attn in attns:
        for dtype in ("fp32", "bf16"):
            for ck in ("none", "non-reentrant"):
                for w in windows:
                    todo += [(gemma_point(family, k, w, attn=attn, dtype=dtype, checkpoint=ck), kind) for kind in TYPES3]
                    k += 1
    a = "eager" if family == "gemma2" else "sdpa"
    singles = [gemma_point(family, 1, "at", attn=a), gemma_point(family, 3, "below", attn=a, tied=False),
               gemma_point(family, 2, "below", attn=a, use_cache=False),
               gemma_point(family, 6, "below", attn="eager", checkpoint="reentrant", dtype="bf16")]
    if family == "gemma2":
        singles += [gemma_point(family, 5, "below", attn_logit_softcapping=None, final_logit_softcapping=None)]
    else:
        singles += [gemma_point(family, 5, "above", attn="sdpa"), gemma_point(family, 0, "below", attn="sdpa", final_logit_softcapping=30.0,
                                                                              layer_types=["full_attention", "sliding_attention"])]
    todo += [(p, kind) for p in singles for kind in TYPES3]
    todo += [(gemma_point(family, 2, "below", attn=a), "forward-loss")]
    todo += [(gemma_point(family, 0, "below", attn=a, optimizer="sgd"), "training"),
             (gemma_point(family, 4, "below", attn=a, optimizer="adamw_torch_foreach", dtype="bf16"), "training")]
    return todo


def window_grid():
    """Mistral's sliding window at its edges: below S (the overlay masks), at S (sdpa must build the
    mask: `_ignore_causal_mask_sdpa` skips only while kv_length < window) and above S (sdpa skips
    it; eager builds it, the overlay changing no value), eager and sdpa, fp32 and bf16."""
    todo = []
    for k, (rel, attn, dtype) in enumerate([(r, a, d) for r in ("below", "at", "above") for a in ("eager", "sdpa")
                                             for d in ("fp32", "bf16")]):
        p = point("mistral", k)
        S = p["seq"]
        p.update(attn=attn, dtype=dtype, sliding_window={"below": S // 2, "at": S, "above": S + 1}[rel])
        todo += [(p, kind) for kind in TYPES3]
    return todo


def grid(family):
    if family == "sliding_window":
        return window_grid()
    if family.startswith("gemma"):
        return gemma_grid(family)
    todo = []
    k = 0
    for attn in ("eager", "sdpa"):
        for dtype in ("fp32", "bf16"):
            for ck in ("none", "non-reentrant"):
                todo += [(point(family, k, attn=attn, dtype=dtype, checkpoint=ck), kind) for kind in TYPES3]
                k += 1
    singles = [point(family, 1, tied=True), point(family, 3, use_cache=False),
               point(family, 6, checkpoint="reentrant", attn="eager")]
    if family == "phi3":
        # Phi-3-mini's config has sliding_window 2047: a window shorter than S masks.
        singles += [point(family, 0, sliding_window=24, attn="eager"), point(family, 5, sliding_window=40, dtype="bf16")]
    todo += [(p, kind) for p in singles for kind in TYPES3]
    todo += [(point(family, 2), "forward-loss")]
    todo += [(point(family, 0, optimizer="sgd"), "training"), (point(family, 4, optimizer="adamw_torch_foreach", dtype="bf16"), "training")]
    return todo


def run_one(job):
    r = G.run_one(job)
    r["name"] = name_of(*job)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=list(H.FAMILY_TYPES) + ["sliding_window"], required=True,
                    help="a model family, or sliding_window: Mistral's window below, at and above S")
    ap.add_argument("--out", default=G.OUT)
    ap.add_argument("--only", help="re-measure the points whose name contains this; keep the fixture's others")
    a = ap.parse_args()
    import transformers
    path = os.path.join(a.out, f"{a.family}.json")
    if a.only:
        doc, t0 = G.measure_only(path, grid(a.family), run_one, name_of, a.only)
        return G.write_fixture(path, doc, t0)
    results, t0 = G.measure_all(grid(a.family), run_one)
    doc = dict(generator=f"tools/pytorch/make_family_grid.py --family {a.family}", torch=torch.__version__,
               transformers=transformers.__version__,
               counted="requested bytes of blocks >= 512 B, absolute (parameters, buffers, batch, optimizer state "
                       "included); checkpoint's CPU RNG-state stashes and CPU-only kernel scratch left out, as "
                       "make_grid.py; the step is the Trainer's (measure_hf.py)",
               points=results)
    G.write_fixture(path, doc, t0)


if __name__ == "__main__":
    main()
