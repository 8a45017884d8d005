#!/usr/bin/env python3
"""measure_optim.py -- what eager PyTorch allocates in one optimizer step (optionally after
torch.nn.utils.clip_grad_norm_), per implementation: the ground truth of vramscope's optimizers
(src/train/optim/), pinned as tests/fixtures/optim_grid.json for tests/optim_grid.rs.

Method (measure_cs336.py's): everything -- the parameters, their gradients, the optimizer and
three steps -- runs inside ONE torch.profiler(profile_memory=True) session with no dispatch mode;
allocations come from the profiler's event tree, linked by address, so levels are absolute.
Requested bytes of blocks >= 512 B (smaller blocks are host scalars on a GPU run, and on CPU the
fused AdamW's 4-byte `step` tensors and clip_grad_norm_'s 0-d norms, which a CUDA run keeps as
512 B device blocks: vramscope's unit tests pin those). Two warm-up steps (the state exists),
the third measured: the level before it, its peak, the level at its end, the tensors live at
the peak and every counted allocation's op.

The step is the Trainer's: `grad_norm = clip_grad_norm_(params, max_norm)` (kept bound through
the step, as Trainer keeps `grad_norm`), then `optimizer.step()`. The gradients are set once
(random, the parameters' dtypes) and persist, as after a backward.

Implementations (CPU's `torch.optim.AdamW()` defaults to the for-loop, so each is explicit):
  adamw_torch_fused    AdamW(fused=True)
  adamw_torch          AdamW(foreach=True)   (CUDA's default)
  adamw_torch_forloop  AdamW(foreach=False)
  sgd                  SGD(foreach=True), --momentum, --weight-decay
  adafactor            transformers.optimization.Adafactor(lr, scale_parameter=False,
                       relative_step=False, weight_decay), as the Trainer's `adafactor` builds it
                       (eps (1e-30, 1e-3), clip_threshold 1.0, decay_rate -0.8, beta1 None)

CUDA-only difference: `_foreach_norm`'s CUDA kernel zeroes an fp32 scratch of
len(grads) x ceil(max numel / 65536) partial sums; the CPU slow path (one linalg_vector_norm
per tensor) has none. The fixture records what the CPU run does; tests/optim_grid.rs leaves
vramscope's scratch (op `_foreach_norm`) out of its levels and checks its size on its own.

Adafactor's `state["RMS"]` and its `_rms` temporaries are 0-d fp32 tensors: 4 B on CPU, below
the filter, 512 B blocks on CUDA (vramscope's unit tests pin them).

Grid: python3 measure_optim.py --grid ../../tests/fixtures/optim_grid.json   (210 points)
Run:  python3 measure_optim.py --shapes '1000x64,64,64x64,172x64,64x172' --dtype bf16 \
          --optimizer adamw_torch --max-grad-norm 1.0
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.profiler import record_function

import measure_cs336 as M

OPTIMIZERS = ("adamw_torch_fused", "adamw_torch", "adamw_torch_forloop", "sgd", "adafactor")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
NSTEPS = 3


def make_optimizer(name, params, lr, weight_decay, momentum):
    if name == "adafactor":
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=lr, scale_parameter=False, relative_step=False, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=True)
    kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, fused=True, **kw)
    if name == "adamw_torch":
        return torch.optim.AdamW(params, foreach=True, **kw)
    if name == "adamw_torch_forloop":
        return torch.optim.AdamW(params, foreach=False, **kw)
    raise ValueError(name)


def run(point):
    """point: dict(shapes=[[...], ...], dtypes=[...], optimizer, max_grad_norm (0 = no clip),
    weight_decay, momentum). Returns the measurement dict."""
    def session():
        torch.manual_seed(0)
        with record_function("grid::setup"):
            params = []
            for shape, dt in zip(point["shapes"], point["dtypes"]):
                p = torch.nn.Parameter(torch.randn(shape, dtype=DTYPES[dt]))
                p.grad = torch.randn(shape, dtype=DTYPES[dt])
                params.append(p)
            opt = make_optimizer(point["optimizer"], params, 1e-3, point["weight_decay"], point["momentum"])
        grad_norm = None
        for step in range(NSTEPS):
            with record_function(f"{M.STEP_MARK}{step}"):
                with M.phase("optimizer"):
                    if point["max_grad_norm"] > 0:
                        grad_norm = torch.nn.utils.clip_grad_norm_(params, point["max_grad_norm"])
                    opt.step()
                    grad_norm = None
        return params, opt

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        keep = session()
    rows = M.alloc_rows(prof)
    live, level, n_live = {}, 0, 0
    out = None
    for r in rows:
        b, ptr = r["bytes"], r["ptr"]
        if b > 0:
            c = M.counted(b, r["op"]) and r["scratch"] is None
            live[ptr] = (b, c)
        elif ptr in live:
            c = live.pop(ptr)[1]
        else:
            continue
        if r["step"] == NSTEPS - 1 and out is None:
            out = dict(start=level, peak=level, live_at_peak=n_live, peak_op="step start", allocs=[])
        if c:
            level += b
            n_live += 1 if b > 0 else -1
        if r["step"] == NSTEPS - 1:
            if c and b > 0:
                out["allocs"].append([r["op"], b])
            if level > out["peak"]:
                out.update(peak=level, live_at_peak=n_live, peak_op=r["op"])
            out["end"] = level
    if out is None:  # nothing allocated or freed in the measured step
        out = dict(start=level, peak=level, live_at_peak=n_live, peak_op="step start", allocs=[])
    out.setdefault("end", out["start"])
    del keep
    return out


def llm_shapes(vocab, d, kv, ff, layers, tied):
    """A LLaMA's parameters in model.parameters() order: embedding, per layer the attention
    norm, q/k/v/o, the MLP norm, gate/up/down, then the final norm and (untied) the head."""
    s = [[vocab, d]]
    for _ in range(layers):
        s += [[d], [d, d], [kv, d], [kv, d], [d, d], [d], [ff, d], [ff, d], [d, ff]]
    s += [[d]]
    return s if tied else s + [[vocab, d]]


# Shape sets of the fixture grid: LLM-like lists (rows of 1000 / 777 elements: not multiples of
# 512 B), odd shapes, one tensor of several 65,536-element chunks among many small ones (CUDA's
# _foreach_norm scratch over 512 B), 130 small tensors (the stacked norms over 512 B in fp32).
SHAPE_SETS = {
    "llm_v1000_d64_2l": llm_shapes(1000, 64, 32, 172, 2, False),
    "llm_v777_d96_1l_tied": llm_shapes(777, 96, 48, 256, 1, True),
    "odd": [[777, 33], [13], [5, 7, 9], [300], [129, 65]],
    "chunks": [[512, 512]] + [[64]] * 40,
    "many_small": [[100, 100]] + [[16]] * 130,
}
# (name, optimizer, weight_decay, momentum)
IMPLS = [
    ("adamw_torch_fused", "adamw_torch_fused", 0.01, 0.0),
    ("adamw_torch", "adamw_torch", 0.01, 0.0),
    ("adamw_torch_forloop", "adamw_torch_forloop", 0.01, 0.0),
    ("sgd", "sgd", 0.0, 0.0),
    ("sgd_momentum_wd", "sgd", 0.01, 0.9),
    ("adafactor", "adafactor", 0.0, 0.0),
    ("adafactor_wd", "adafactor", 0.01, 0.0),
]


def dtypes_of(mode, n):
    if mode == "mixed":  # bf16 and fp32 alternating: two dtype groups in every foreach call
        return ["bf16" if i % 2 == 0 else "fp32" for i in range(n)]
    return [mode] * n


def grid(out):
    points = []
    for set_name, shapes in SHAPE_SETS.items():
        for mode in ("fp32", "bf16", "mixed"):
            for impl, opt, wd, mom in IMPLS:
                for clip in (0.0, 1.0):
                    point = dict(shapes=shapes, dtypes=dtypes_of(mode, len(shapes)), optimizer=opt,
                                 max_grad_norm=clip, weight_decay=wd, momentum=mom)
                    name = f"{set_name}/{mode}/{impl}/{'clip' if clip else 'noclip'}"
                    r = run(point)
                    r.pop("allocs")
                    points.append(dict(name=name, **point, **r))
                    print(f"{name:<56} start {r['start']:>10} peak {r['peak']:>10} end {r['end']:>10} ({r['peak_op']})", flush=True)
    write_grid(out, torch.__version__, points)
    print(f"wrote {len(points)} points to {out}")


def write_grid(out, version, points):
    """One point per line (the shape lists stay readable and the file small)."""
    head = dict(torch=version, method="measure_optim.py: requested bytes, blocks >= 512 B, absolute levels, third step")
    with open(out, "w") as f:
        f.write(json.dumps(head)[:-1] + ', "points": [\n' + ",\n".join(json.dumps(p) for p in points) + "\n]}\n")


def parse_shapes(s):
    return [[int(x) for x in part.split("x")] for part in s.split(",")]


def main(argv=None):
    a = argparse.ArgumentParser(description="Peak and end level of one optimizer step, mode-free (CPU profiler).")
    a.add_argument("--grid", metavar="OUT", help="measure the fixture grid into OUT (tests/fixtures/optim_grid.json)")
    a.add_argument("--shapes", help="comma list of AxB shapes, e.g. 1000x64,64,64x64")
    a.add_argument("--dtype", default="fp32", help="fp32, bf16, or a comma list, one per shape")
    a.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw_torch_fused")
    a.add_argument("--max-grad-norm", type=float, default=0.0, help="clip_grad_norm_ before the step (0: none)")
    a.add_argument("--weight-decay", type=float, default=0.0)
    a.add_argument("--momentum", type=float, default=0.0)
    x = a.parse_args(argv)
    torch.set_num_threads(1)
    if x.grid:
        return grid(x.grid)
    if not x.shapes:
        a.error("--shapes or --grid is required")
    shapes = parse_shapes(x.shapes)
    dts = x.dtype.split(",")
    dts = dts * len(shapes) if len(dts) == 1 else dts
    point = dict(shapes=shapes, dtypes=dts, optimizer=x.optimizer, max_grad_norm=x.max_grad_norm,
                 weight_decay=x.weight_decay, momentum=x.momentum)
    r = run(point)
    print(json.dumps(dict(point=point, torch=torch.__version__, **r), indent=1))


if __name__ == "__main__":
    main()
