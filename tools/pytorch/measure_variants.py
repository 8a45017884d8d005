#!/usr/bin/env python3
"""measure_variants.py -- measure_step_memory.py for the memory-option variants of the
tinyllama walkthrough step: activation checkpointing and the workshop's version-2 fused
projections. Same method (the whole run under torch.profiler(profile_memory=True), the
3rd step analysed from the profiler's event tree; no TorchDispatchMode, which would change
autograd's gradient accumulation); only the model differs, written as a user would:

  ckpt-blocks   x = checkpoint(blk, x, mask, use_reentrant=False) for every block
  ckpt-every2   the same for blocks 0, 2, ... (vramscope's --checkpoint every-2)
  fused         version 2: qkv = qkv_proj(x); q, k, v = qkv.split([h*hd, kv*hd, kv*hd], -1)
                (then .view as the unfused model); gate, up = gate_up_proj(x).chunk(2, -1)
  fused-ckpt    both
  base          the unchanged model (must reproduce measure_step_memory.py)

Run:  python3 measure_variants.py [VARIANT ...]   -> variants/VARIANT/{result.json,events.csv}
and a summary of the per-phase peaks (all blocks, and blocks >= 512 B, the numbers
tests/models.rs compares against) on stdout.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import measure_step_memory as M

P = M.P
BASE_OUTDIR = os.environ.get("OUTDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "variants"))


class FusedAttention(P.Attention):
    """Version 2: one qkv_proj, its output split into q/k/v."""

    def __init__(self, cfg):
        super().__init__(cfg)
        o_proj = self.o_proj
        del self.q_proj, self.k_proj, self.v_proj, self.o_proj
        # registered where q_proj was (parameter order = optimizer order)
        self.qkv_proj = nn.Linear(cfg.hidden_dim, (self.n_heads + 2 * self.n_kv) * self.hd, bias=False)
        self.o_proj = o_proj

    def forward(self, x, mask):
        b, s, _ = x.shape
        qkv = self.qkv_proj(x)
        q, k, v = qkv.split([self.n_heads * self.hd, self.n_kv * self.hd, self.n_kv * self.hd], dim=-1)
        q = q.view(b, s, self.n_heads, self.hd)
        k = k.view(b, s, self.n_kv, self.hd)
        v = v.view(b, s, self.n_kv, self.hd)
        q = self.rope.apply(q).transpose(1, 2)
        k = self.rope.apply(k).transpose(1, 2)
        v = v.transpose(1, 2)
        rep = self.n_heads // self.n_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        scores = scores + mask
        probs = F.softmax(scores, dim=-1)
        if self.dropout is not None:
            probs = self.dropout(probs)
        out = torch.matmul(probs, v)
        out = out.transpose(1, 2).contiguous().view(b, s, self.n_heads * self.hd)
        return self.o_proj(out)


class FusedSwiGLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_dim, 2 * cfg.intermediate_dim, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_dim, cfg.hidden_dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class FusedBlock(P.Block):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.attention_norm = P.RMSNorm(cfg.hidden_dim, cfg.norm_eps)
        self.attention = FusedAttention(cfg)
        self.ffn_norm = P.RMSNorm(cfg.hidden_dim, cfg.norm_eps)
        self.feed_forward = FusedSwiGLU(cfg)


def make_model_class(fused, every):
    """every: None (no checkpointing) or N (checkpoint blocks 0, N, 2N, ...)."""
    block_cls = FusedBlock if fused else P.Block

    class Variant(M.TinyLlamaMarked):
        def __init__(self, cfg):
            orig = P.Block
            P.Block = block_cls  # TinyLlama.__init__ builds its blocks from P.Block
            try:
                super().__init__(cfg)
            finally:
                P.Block = orig

        def forward(self, tokens, labels=None):
            b, s = tokens.shape
            mask = torch.full((s, s), float("-inf"), device=tokens.device).triu(1).view(1, 1, s, s)
            h = self.token_embedding(tokens)
            for i, blk in enumerate(self.blocks):
                if every is not None and i % every == 0:
                    h = checkpoint(blk, h, mask, use_reentrant=False)
                else:
                    h = blk(h, mask)
            logits = self.output_proj(self.norm(h))
            if labels is None:
                return logits, None
            with M.record_function("loss"):
                lg = logits[:, :-1, :].contiguous()
                lb = labels[:, 1:].contiguous()
                loss = F.cross_entropy(lg.view(-1, lg.size(-1)), lb.view(-1))
            return logits, loss

    return Variant


# torch.utils.checkpoint's default preserve_rng_state=True stashes torch.get_rng_state() (a
# CPU uint8 tensor) per checkpointed call until its backward, and fork_rng takes another
# during each recomputation. On a GPU run these are host memory (the CUDA states are CPU
# tensors too), so "device" peaks leave them out: that is what vramscope models.
RNG_BYTES = torch.get_rng_state().nbytes


def device_peaks(events_csv, out):
    """Per-phase peaks over blocks >= 512 B without the RNG-state stashes."""
    import csv
    rows = list(csv.DictReader(open(events_csv)))
    for r in rows:
        if int(r["bytes"]) == RNG_BYTES:
            assert not r["op"].startswith("aten::"), ("a tensor of RNG-state size made by an op", r)
    level = out["phases_ge512"]["data"]["start"]
    peaks = {}
    for ph in out["phases_ge512"]:
        pk = level
        for r in rows:
            if r["phase"] != ph:
                continue
            b = int(r["bytes"])
            if abs(b) < 512 or abs(b) == RNG_BYTES:
                continue
            level += b
            pk = max(pk, level)
        peaks[ph] = pk
    return peaks


VARIANTS = {
    "base": (False, None),
    "ckpt-blocks": (False, 1),
    "ckpt-every2": (False, 2),
    "fused": (True, None),
    "fused-ckpt": (True, 1),
}


def main(names):
    if len(names) > 1:
        # one process per variant: the allocator's "Total Allocated" is process-wide, so a
        # previous run's surviving blocks would offset the next one.
        import subprocess
        summary = {}
        for name in names:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), name], check=True,
                               capture_output=True, text=True)
            summary.update(json.loads(r.stdout[r.stdout.index("{"):])["variants"])
        print(json.dumps({"torch": torch.__version__, "variants": summary}, indent=1))
        return
    summary = {}
    for name in names:
        fused, every = VARIANTS[name]
        M.TinyLlamaMarked_orig = getattr(M, "TinyLlamaMarked_orig", M.TinyLlamaMarked)
        cls = make_model_class(fused, every) if name != "base" else M.TinyLlamaMarked_orig
        saved = M.TinyLlamaMarked
        M.TinyLlamaMarked = cls
        M.OUTDIR = os.path.join(BASE_OUTDIR, name)
        os.makedirs(M.OUTDIR, exist_ok=True)
        import contextlib, io
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                out = M.main()
        finally:
            M.TinyLlamaMarked = saved
        summary[name] = {
            "peaks_ge512_device": device_peaks(os.path.join(M.OUTDIR, "events.csv"), out),
            "peaks": {p: v["peak"] for p, v in out["phases"].items()},
            "peaks_ge512": {p: v["peak"] for p, v in out["phases_ge512"].items()},
            "overall_peak": out["overall_peak"],
            "overall_peak_ge512": out["overall_peak_ge512"],
            "start_total": out["start_total"],
            "end_total": out["end_total"],
            "n_events": out["n_events"],
        }
    print(json.dumps({"torch": torch.__version__, "variants": summary}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:] or list(VARIANTS))
