#!/usr/bin/env python3
"""make_grid.py -- regenerate the PyTorch fixture grid of tests/pytorch_grid.rs.

For both flavours -- cs336 (cs336_model.py, the CS336 staff model) and tinyllama
(shared/bench/pytorch_tinyllama.py, the workshop model, with the memory options written
as measure_variants.py writes them, plus flash attention) -- and for every grid point and
profile type (inference, forward, forward-loss, training) this measures eager PyTorch's
per-phase peaks with measure_cs336.py's method (one torch.profiler(profile_memory=True)
session per measurement, mode-free, requested bytes of blocks >= 512 B, absolute) and
writes them as JSON under tests/fixtures/pytorch_grid/{cs336,tinyllama}.json.

    python3 make_grid.py                  # both flavours, the default grid (a few minutes)
    python3 make_grid.py --flavour cs336  # one flavour (rewrites only its file)
    python3 make_grid.py --big            # the issue-13 `small`/`medium` S 1024 B 8 inference
                                          # points (slow: minutes each) -> cs336_big.json
    JOBS=2 (default) worker processes; THREADS=1 torch threads per worker.

CPU PyTorch runs bf16 *models* (--pure-bf16 = model.to(torch.bfloat16)); autocast
(--precision bf16/fp16) is CUDA-only and is not part of the grid.
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# shared/bench beside the checkout (worktrees sit one level deeper than the main checkout)
for _p in [os.environ.get("VRAMSCOPE_SHARED_BENCH", "")] + [os.path.join(HERE, up, "shared/bench") for up in ("../..", "../../..", "../../../..")]:
    if _p and os.path.exists(os.path.join(_p, "pytorch_tinyllama.py")):
        sys.path.insert(0, _p)
        break
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import measure_cs336 as M
import pytorch_tinyllama as P
from measure_variants import FusedSwiGLU  # version 2's gate_up_proj(x).chunk(2, dim=-1)

OUT = os.path.join(HERE, "../../tests/fixtures/pytorch_grid")
PROFILE_TYPES = M.PROFILE_TYPES


# ----------------------------------------------------------------------------- tinyllama
class TLAttention(P.Attention):
    """P.Attention, optionally with version 2's fused qkv_proj (split into views, as
    measure_variants.py) and/or flash attention (F.scaled_dot_product_attention(is_causal=True))."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.fused, self.flash = cfg.fused, cfg.flash
        if self.fused:
            o_proj = self.o_proj
            del self.q_proj, self.k_proj, self.v_proj, self.o_proj
            self.qkv_proj = nn.Linear(cfg.hidden_dim, (self.n_heads + 2 * self.n_kv) * self.hd, bias=False)
            self.o_proj = o_proj

    def forward(self, x, mask):
        b, s, _ = x.shape
        if self.fused:
            qkv = self.qkv_proj(x)
            q, k, v = qkv.split([self.n_heads * self.hd, self.n_kv * self.hd, self.n_kv * self.hd], dim=-1)
            q = q.view(b, s, self.n_heads, self.hd)
            k = k.view(b, s, self.n_kv, self.hd)
            v = v.view(b, s, self.n_kv, self.hd)
        else:
            q = self.q_proj(x).view(b, s, self.n_heads, self.hd)
            k = self.k_proj(x).view(b, s, self.n_kv, self.hd)
            v = self.v_proj(x).view(b, s, self.n_kv, self.hd)
        q = self.rope.apply(q).transpose(1, 2)
        k = self.rope.apply(k).transpose(1, 2)
        v = v.transpose(1, 2)
        rep = self.n_heads // self.n_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if self.flash:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
            scores = scores + mask
            probs = F.softmax(scores, dim=-1)
            out = torch.matmul(probs, v)
        out = out.transpose(1, 2).contiguous().view(b, s, self.n_heads * self.hd)
        return self.o_proj(out)


class TLBlock(P.Block):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.attention_norm = P.RMSNorm(cfg.hidden_dim, cfg.norm_eps)
        self.attention = TLAttention(cfg)
        self.ffn_norm = P.RMSNorm(cfg.hidden_dim, cfg.norm_eps)
        self.feed_forward = FusedSwiGLU(cfg) if cfg.fused else P.SwiGLU(cfg)


class TLModel(P.TinyLlama):
    """P.TinyLlama with TLBlock blocks, optional checkpointing (every N-th block from 0) and
    the loss part of forward marked as the loss phase."""

    def __init__(self, cfg):
        orig = P.Block
        P.Block = TLBlock  # TinyLlama.__init__ builds its blocks from P.Block
        try:
            super().__init__(cfg)
        finally:
            P.Block = orig

    def forward(self, tokens, labels=None):
        b, s = tokens.shape
        mask = None
        if not self.cfg.flash:
            mask = torch.full((s, s), float("-inf"), device=tokens.device).triu(1).view(1, 1, s, s)
        h = self.token_embedding(tokens)
        every = self.cfg.checkpoint_every
        for i, blk in enumerate(self.blocks):
            if every is not None and i % every == 0:
                h = checkpoint(blk, h, mask, use_reentrant=False)
            else:
                h = blk(h, mask)
        logits = self.output_proj(self.norm(h))
        if labels is None:
            return logits, None
        with M.phase("loss"):
            lg = logits[:, :-1, :].contiguous()
            lb = labels[:, 1:].contiguous()
            loss = F.cross_entropy(lg.view(-1, lg.size(-1)), lb.view(-1))
        return logits, loss


def tinyllama_setup(pt):
    c = pt["config"]

    def setup():
        args = P.parse_args([])
        args.vocab_size, args.hidden_dim, args.num_layers = c["vocab_size"], c["d_model"], c["num_layers"]
        args.num_heads, args.num_kv_heads, args.intermediate_dim = c["num_heads"], c["num_kv_heads"], c["d_ff"]
        args.fused, args.flash = pt["fusion"], pt["attention"] == "flash"
        args.checkpoint_every = checkpoint_every(pt["checkpoint"])
        torch.manual_seed(args.seed)
        model = TLModel(args)
        if pt["pure_bf16"]:
            model.to(torch.bfloat16)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay, foreach=True)
        return model, opt, None, M.batcher(c["vocab_size"], pt["batch"], pt["seq"], args.seed)

    return setup


def cs336_setup(pt):
    c = dict(pt["config"], attention=pt["attention"], fused_qkv=pt["fusion"], fused_gate_up=pt["fusion"],
             checkpoint_every=checkpoint_every(pt["checkpoint"]), pure_bf16=pt["pure_bf16"])
    return M.cs336_setup(c, pt["batch"], pt["seq"])


def checkpoint_every(s):
    return M.parse_checkpoint(s)


# ----------------------------------------------------------------------------- the grid
def cfg(v, d, layers, h, kv, f, max_seq=None):
    return dict(vocab_size=v, d_model=d, num_layers=layers, num_heads=h, num_kv_heads=kv, d_ff=f, max_seq_len=max_seq)


def point(flavour, config, seq, batch, checkpoint=None, fusion=False, attention="naive", pure_bf16=False, types=PROFILE_TYPES):
    config = dict(config)
    if config["max_seq_len"] is None:
        config["max_seq_len"] = seq
    return [dict(flavour=flavour, config=config, seq=seq, batch=batch, checkpoint=checkpoint, fusion=fusion,
                 attention=attention, pure_bf16=pure_bf16, profile_type=t) for t in types]


def grid(flavour):
    kv = (lambda h, k: k) if flavour == "tinyllama" else (lambda h, k: h)  # cs336 has no GQA
    A = cfg(1000, 64, 2, 4, kv(4, 2), 128)        # logits row 4,000 B: not a multiple of 512
    B = cfg(777, 128, 2, 8, kv(8, 2), 256)
    C = cfg(2048, 96, 3, 6, kv(6, 6), 256)
    D = cfg(1000, 256, 2, 8, kv(8, 4), 1024)      # issue 13's cs336 point
    E = cfg(512, 64, 1, 2, kv(2, 1), 192)
    G = cfg(1000, 128, 4, 4, kv(4, 4), 384)
    pts = []
    p = lambda *a, **k: pts.extend(point(flavour, *a, **k))
    p(A, 16, 1)
    p(A, 16, 8)
    p(A, 64, 4)
    p(A, 128, 2)
    p(B, 32, 2)
    p(B, 256, 1)
    p(C, 100, 3)
    p(C, 512, 1)
    p(E, 2048, 1)
    p(E, 1024, 2)
    p(D, 512, 2)
    p(G, 64, 2)
    p(cfg(1000, 64, 2, 4, kv(4, 2), 128, 64), 16, 1)   # RoPE buffer / max length longer than S
    p(A, 128, 2, checkpoint="blocks")
    p(C, 64, 2, checkpoint="every-2")
    p(A, 128, 2, fusion=True)
    p(B, 64, 2, fusion=True)
    p(A, 64, 2, fusion=True, checkpoint="blocks")
    p(A, 128, 2, attention="flash")
    p(B, 256, 2, attention="flash")
    p(E, 2048, 1, attention="flash")
    p(B, 512, 1, attention="flash", checkpoint="blocks")
    # The walkthrough model cannot run bf16 with its naive attention: its float32 additive
    # mask promotes the scores to fp32 and matmul(probs, v) then raises on fp32 x bf16. So
    # its bf16 points use flash attention (no mask).
    bf16_att = "flash" if flavour == "tinyllama" else "naive"
    p(A, 128, 2, pure_bf16=True, attention=bf16_att)
    p(B, 64, 4, pure_bf16=True, attention=bf16_att)
    p(E, 16, 8, pure_bf16=True, attention=bf16_att)
    p(C, 32, 8, pure_bf16=True, attention="flash")
    if flavour == "tinyllama":
        p(cfg(1000, 256, 4, 8, 4, 512), 128, 8, types=("training",))  # the walkthrough (tests/models.rs)
    return pts


def big_grid():
    """Issue 13's `small` and `medium` points at S 1024 B 8, inference: one iteration."""
    small = cfg(10000, 768, 12, 12, 12, 3072, 1024)
    medium = cfg(10000, 1024, 24, 16, 16, 4096, 1024)
    return point("cs336", small, 1024, 8, types=("inference",)) + point("cs336", medium, 1024, 8, types=("inference",))


def name_of(pt):
    c = pt["config"]
    s = f"{pt['flavour']} d{c['d_model']} L{c['num_layers']} h{c['num_heads']}"
    if pt["flavour"] == "tinyllama":
        s += f" kv{c['num_kv_heads']}"
    s += f" F{c['d_ff']} V{c['vocab_size']}"
    if c["max_seq_len"] != pt["seq"]:
        s += f" max{c['max_seq_len']}"
    s += f" S{pt['seq']} B{pt['batch']}"
    for k, v in (("checkpoint", pt["checkpoint"]), ("fusion", pt["fusion"] and "all"),
                 ("attention", pt["attention"] != "naive" and pt["attention"]), ("pure-bf16", pt["pure_bf16"])):
        if v:
            s += f" --{k}" + ("" if v is True else f" {v}")
    return s + f" {pt['profile_type']}"


def run_one(pt):
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    import gc
    gc.collect()
    setup = (cs336_setup if pt["flavour"] == "cs336" else tinyllama_setup)(pt)
    kind = pt["profile_type"]
    t0 = time.time()
    M.NSTEPS = pt["iterations"]
    try:
        per, _ = M.measure(setup, kind)
    except Exception as e:  # reported by main, which then writes nothing for the flavour
        print(f"FAILED {name_of(pt)}: {e!r}", flush=True)
        return dict(pt, name=name_of(pt), error=repr(e))
    out = dict(pt, name=name_of(pt), phases={p: dict(peak=s["peak"], peak_all_blocks=s["peak_all"],
                                                      live_at_peak=s["live_at_peak"],
                                                      peak_op=s["peak_op"] + (f" [{s['peak_node']}]" if s["peak_node"] else ""),
                                                      peak_with_cpu_scratch=s["peak_with_cpu_scratch"],
                                                      cpu_scratch_left_out=s["cpu_scratch"])
                                             for p, s in per.items()})
    # per phase: how much higher the peak is with the CPU-only scratch blocks counted (measure_cs336.cpu_kernel_scratch)
    out["cpu_scratch_peak_excess"] = {p: v["peak_with_cpu_scratch"] - v["peak"] for p, v in out["phases"].items()
                                           if v["peak_with_cpu_scratch"] != v["peak"]}
    print(f"{time.time() - t0:6.1f}s  {out['name']}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flavour", choices=("cs336", "tinyllama"), action="append")
    ap.add_argument("--big", action="store_true", help="only issue 13's slow small/medium points -> cs336_big.json")
    ap.add_argument("--type", choices=PROFILE_TYPES, action="append", dest="types",
                    help="regenerate only these profile types; the flavour's other points are kept from its file")
    ap.add_argument("--out", default=OUT, help="output folder (default tests/fixtures/pytorch_grid; the test reads PYTORCH_GRID_DIR)")
    a = ap.parse_args()
    if a.big:
        jobs = {"cs336_big": big_grid()}
    else:
        jobs = {f: grid(f) for f in (a.flavour or ["cs336", "tinyllama"])}
    full = {name: pts for name, pts in jobs.items()}
    if a.types:
        jobs = {name: [pt for pt in pts if pt["profile_type"] in a.types] for name, pts in jobs.items()}
    todo = []
    for name, pts in jobs.items():
        for pt in pts:
            pt["iterations"] = 1 if a.big else (3 if pt["profile_type"] == "training" else 2)
            todo.append((name, pt))
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    n = int(os.environ.get("JOBS", "2"))
    with mp.get_context("fork").Pool(n, maxtasksperchild=8) as pool:
        results = pool.map(run_one, [pt for _, pt in todo], chunksize=1)
    failed = False
    for name in jobs:
        pts = [r for (nm, _), r in zip(todo, results) if nm == name]
        if a.types:  # merge: the new points replace theirs, every other grid point is kept as it was
            path = os.path.join(a.out, f"{name}.json")
            with open(path) as f:
                old = {r["name"]: r for r in json.load(f)["points"]}
            new = {r["name"]: r for r in pts}
            pts = [new.get(name_of(pt)) or old[name_of(pt)] for pt in full[name]]
        errors = [r for r in pts if "error" in r]
        if errors:
            failed = True
            print(f"{name}: {len(errors)} points failed in PyTorch, {name}.json not written:")
            for r in errors:
                print(f"  {r['name']}: {r['error']}")
            continue
        doc = dict(generator="tools/pytorch/make_grid.py" + (" --big" if a.big else ""), torch=torch.__version__,
                   counted="requested bytes of blocks >= 512 B, absolute (parameters, buffers, batch, optimizer state "
                           "included); checkpoint's CPU RNG-state stashes left out; CPU-only kernel scratch left out "
                           "(copy_same_type_transpose_'s 60x60 buffer, the fp32 working copy of bf16/fp16 self in "
                           "scatter_ and scatter_add_; per phase in cpu_scratch_left_out, tools/pytorch/README.md)",
                   points=pts)
        path = os.path.join(a.out, f"{name}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
        print(f"wrote {len(pts)} points to {os.path.relpath(path)}")
    print(f"total {time.time() - t0:.0f}s")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
