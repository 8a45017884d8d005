"""prof_log.py -- mode-free cross-check of dispatch_log.py.

A TorchDispatchMode changes some eager behaviour: while any Python dispatch mode
is active, at::isTensorSubclassLike() is true for every tensor, which (a) turns
off the autograd InputBuffer's in-place accumulation (add_ -> add) and (b) makes
several backward formulas pick their out-of-place variant (scatter_ -> scatter,
scatter_add_ -> scatter_add, ...).  This module instead runs the code under
torch.profiler(profile_memory=True), exports the chrome trace and rebuilds the
ordered list of ops and CPU allocator events (address, bytes) with the innermost
enclosing op (and autograd node) of each allocation / free.  Nothing Python-side
touches the tensors, so refcounts and code paths are the real ones.

    from prof_log import prof_trace
    lines = prof_trace(lambda: loss.backward(), labels={t.data_ptr(): "x"})
"""
import json
import os
import tempfile
import torch
from torch.profiler import profile, ProfilerActivity


def prof_trace(fn, labels=None, top_only=False, show_ops=True, file=None, min_depth_ops=None):
    labels = dict(labels or {})
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        fn()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as f:
        tr = json.load(f)
    os.unlink(path)
    evs = tr["traceEvents"] if isinstance(tr, dict) else tr
    ops = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    mems = [e for e in evs if e.get("ph") == "i" and e.get("name") == "[memory]"]
    ops.sort(key=lambda e: (e["ts"], -e["dur"]))

    def enclosing(ts, tid):
        chain = [o for o in ops if o["tid"] == tid and o["ts"] <= ts <= o["ts"] + o["dur"]]
        chain.sort(key=lambda o: (o["ts"], -o["dur"]))
        return chain

    # merge: op starts (depth computed) + memory events, ordered by ts
    items = []
    for o in ops:
        items.append((o["ts"], 0, o))
    for m in mems:
        items.append((m["ts"], 1, m))
    items.sort(key=lambda t: (t[0], t[1]))
    live = 0
    peak = 0
    n_alloc = 0
    out = []
    addr_lab = {}
    for ts, kind, e in items:
        if kind == 0:
            if not show_ops:
                continue
            chain = enclosing(e["ts"] + 1e-9, e["tid"])
            depth = len([c for c in chain if c is not e and c["ts"] <= e["ts"] and
                         c["ts"] + c["dur"] >= e["ts"] + e["dur"]])
            if top_only and depth > 0 and not e["name"].startswith("autograd::engine"):
                # only show ops directly under an autograd node or at top level
                parents = [c for c in chain if c is not e and c["ts"] <= e["ts"] and
                           c["ts"] + c["dur"] >= e["ts"] + e["dur"]]
                if not (parents and parents[-1]["name"].startswith("autograd::engine")):
                    continue
            if min_depth_ops is not None and depth > min_depth_ops:
                continue
            dims = e.get("args", {}).get("Input Dims")
            nm = e["name"].replace("autograd::engine::evaluate_function: ", "NODE ")
            out.append(f"{'  ' * depth}{nm} {dims if dims and not nm.startswith('NODE') else ''}")
        else:
            a = e["args"]
            addr = a.get("Addr")
            nb = a.get("Bytes")
            if a.get("Device Type", 0) != 0:
                continue
            chain = enclosing(e["ts"], e["tid"])
            names = [c["name"].replace("autograd::engine::evaluate_function: ", "") for c in chain]
            # innermost op, and innermost autograd node
            short = [n.replace("aten::", "") for n in names]
            inner = "/".join(short[-3:]) if short else "-"
            node = [n for n in names if n.endswith(tuple("0123456789")) and "Backward" in n or n.startswith("torch::autograd::AccumulateGrad")]
            if nb > 0:
                n_alloc += 1
                lab = addr_lab[addr] = f"A{n_alloc}"
                live += nb
                peak = max(peak, live)
                out.append(f"{'  ' * max(len(chain) - 1, 0)}  + ALLOC {lab} {nb}B in {inner}"
                           f"{' [' + node[-1] + ']' if node else ''}  (live={live})")
            else:
                lab = addr_lab.pop(addr, labels.get(addr, f"ext@{addr}"))
                if lab.startswith("A"):
                    live += nb
                out.append(f"{'  ' * max(len(chain) - 1, 0)}  - FREE  {lab} {-nb}B in {inner}  (live={live})")
    out.append(f"# peak live bytes allocated inside the traced region: {peak}")
    if file:
        with open(file, "w") as f:
            f.write("\n".join(out) + "\n")
    return out
