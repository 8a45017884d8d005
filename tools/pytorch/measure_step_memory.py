#!/usr/bin/env python3
"""measure.py -- exact CPU-allocator view of ONE TinyLlama training step (the 3rd),
mode-free, via torch.profiler(profile_memory=True).

Why the WHOLE run (model construction + 3 steps) is inside one profiler session:
c10's ProfiledCPUMemoryReporter only tracks blocks (size_table_ / allocated_) that were
allocated while memory profiling was on; a free of a block allocated before profiling
emits NO event and does not change "Total Allocated".  Profiling everything from model
construction on makes "Total Allocated" an absolute count of every live CPU tensor byte
created by this script, and every free in step 3 visible.

Events are read from the profiler's own event tree
(prof.profiler.kineto_results.experimental_event_tree()), so the innermost enclosing op of
each allocation is exact (no timestamp matching).  A chrome-trace cross-check is done too.

Run:  python3 measure.py            -> events.csv, events_all.csv, result.json, RESULT_raw.txt
"""
import contextlib
import csv
import json
import os
import sys
import tempfile
from collections import defaultdict, OrderedDict

sys.path.insert(0, os.environ.get("VRAMSCOPE_SHARED_BENCH", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/bench")))
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity, record_function

import pytorch_tinyllama as P

OUTDIR = os.path.dirname(os.path.abspath(__file__))
NSTEPS = 3
PROF_STEP = 2  # 0-based -> third step


class TinyLlamaMarked(P.TinyLlama):
    """Identical to P.TinyLlama.forward, plus a record_function marker 'loss' around the
    loss part (slice/contiguous of logits & labels + cross_entropy)."""

    def forward(self, tokens, labels=None):
        b, s = tokens.shape
        mask = torch.full((s, s), float("-inf"), device=tokens.device).triu(1).view(1, 1, s, s)
        h = self.token_embedding(tokens)
        for blk in self.blocks:
            h = blk(h, mask)
        logits = self.output_proj(self.norm(h))
        if labels is None:
            return logits, None
        with record_function("loss"):
            if self.cfg.loss_shift == "model":
                lg = logits[:, :-1, :].contiguous()
                lb = labels[:, 1:].contiguous()
            else:
                lg, lb = logits, labels
            loss = F.cross_entropy(lg.view(-1, lg.size(-1)), lb.view(-1))
        return logits, loss


def run():
    args = P.parse_args([])  # defaults == requested config
    assert (args.vocab_size, args.hidden_dim, args.num_layers, args.num_heads, args.num_kv_heads,
            args.intermediate_dim, args.batch_size, args.seq_len) == (1000, 256, 4, 8, 4, 512, 8, 128)
    args.threads = int(os.environ.get("THREADS", args.threads))
    torch.set_num_threads(args.threads)
    amp_ctx = contextlib.nullcontext
    info = {}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        with record_function("setup"):
            torch.manual_seed(args.seed)
            model = TinyLlamaMarked(args)
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=args.learning_rate,
                                    weight_decay=args.weight_decay, foreach=True)
            gen = torch.Generator().manual_seed(args.seed)

        def get_batch():
            seq = torch.randint(0, args.vocab_size, (args.batch_size, args.seq_len + 1), generator=gen)
            return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

        # same statements / bindings as the bench loop
        for step in range(NSTEPS):
            with record_function(f"STEP{step}"):
                with record_function("data"):
                    tokens, labels = get_batch()
                with record_function("forward"):
                    with amp_ctx():
                        _, loss = model(tokens, labels)
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    opt.step()
                with record_function("zero_grad"):
                    opt.zero_grad(set_to_none=True)
            lv = loss.item()
    # python-side facts for the breakdown (outside the profile)
    params = list(model.parameters())
    info["n_params_tensors"] = len(params)
    info["param_floats"] = sum(p.numel() for p in params)
    info["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
    st = [opt.state[p] for p in params]
    info["exp_avg_bytes"] = sum(s["exp_avg"].nbytes for s in st)
    info["exp_avg_sq_bytes"] = sum(s["exp_avg_sq"].nbytes for s in st)
    info["step_tensors"] = [(str(s["step"].dtype), s["step"].nbytes, str(s["step"].device)) for s in st][:1]
    info["step_bytes"] = sum(s["step"].nbytes for s in st)
    info["param_ptrs"] = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters()}
    info["state_ptrs"] = {}
    for n, p in model.named_parameters():
        for k in ("exp_avg", "exp_avg_sq", "step"):
            info["state_ptrs"][opt.state[p][k].untyped_storage().data_ptr()] = f"{k}[{n}]"
    info["final_live_ptrs"] = {
        _.untyped_storage().data_ptr(): "logits (_)",
        loss.untyped_storage().data_ptr(): "loss",
        tokens.untyped_storage().data_ptr(): "tokens",
        labels.untyped_storage().data_ptr(): "labels",
    }
    for i, blk in enumerate(model.blocks):
        for key, (c, s_) in blk.attention.rope._cache.items():
            info["final_live_ptrs"][c.untyped_storage().data_ptr()] = f"rope cos blk{i}"
            info["final_live_ptrs"][s_.untyped_storage().data_ptr()] = f"rope sin blk{i}"
    info["last_loss"] = lv
    return prof, info


def fmt_inputs(op):
    try:
        ins = op.extra_fields.inputs
    except Exception:
        return ""
    out, has = [], False
    for x in ins:
        if hasattr(x, "sizes"):
            out.append(list(x.sizes)); has = True
        elif isinstance(x, list) and x and hasattr(x[0], "sizes"):
            out.append(f"list{len(x)}"); has = True
        elif isinstance(x, (int, float, bool)) or x is None:
            out.append(x)
        else:
            out.append(type(x).__name__)
    return str(out) if has else ""


PHASE_MARKERS = ("data", "forward", "loss", "backward", "optimizer", "zero_grad")


def analyse(prof, info):
    roots = prof.profiler.kineto_results.experimental_event_tree()
    allocs = []  # (order key, node)

    def walk(n, anc):
        if str(n.tag) == "_EventType.Allocation":
            allocs.append((n, list(anc)))
            return
        anc.append(n)
        for c in n.children:
            walk(c, anc)
        anc.pop()

    for r in roots:
        walk(r, [])
    allocs = [(n, a) for n, a in allocs if n.extra_fields.device.type == torch.device("cpu").type]
    allocs.sort(key=lambda t: (t[0].start_time_ns, t[0].extra_fields.id if hasattr(t[0].extra_fields, "id") else 0))

    rows = []
    for n, anc in allocs:
        names = [a.name for a in anc]
        ef = n.extra_fields
        step = next((int(x[4:]) for x in names if x.startswith("STEP")), None)
        if "setup" in names:
            step = "setup"
        phase = None
        for x in reversed(names):
            if x in PHASE_MARKERS:
                phase = x
                break
        markers = set(PHASE_MARKERS) | {"setup"} | {f"STEP{i}" for i in range(NSTEPS)}
        ops = [a for a in anc if a.name not in markers]
        inner = ops[-1].name if ops else "-"
        # outermost op below the innermost phase marker / autograd node
        node = next((a.name.replace("autograd::engine::evaluate_function: ", "")
                     for a in reversed(anc) if a.name.startswith("autograd::engine::evaluate_function")), "")
        top = ""
        for a in ops:
            if a.name.startswith("autograd::engine") or a.name.startswith("Optimizer.") or a.name.startswith("Optimizer"):
                continue
            top = a.name
            break
        shapes = ""
        for a in reversed(ops):  # nearest enclosing op that has tensor inputs
            sh = fmt_inputs(a)
            if sh:
                shapes = f"{a.name}{sh}"
                break
        rows.append(dict(ts=n.start_time_ns, step=step, phase=phase, inner=inner, top=top, node=node,
                         bytes=ef.alloc_size, total=ef.total_allocated, ptr=ef.ptr, shapes=shapes,
                         chain="/".join(a.name for a in anc)))

    # consistency: total[i] == total[i-1] + bytes[i]
    bad = 0
    for i in range(1, len(rows)):
        if rows[i]["total"] != rows[i - 1]["total"] + rows[i]["bytes"]:
            bad += 1
    first_total_minus = rows[0]["total"] - rows[0]["bytes"]

    # link allocs/frees by ptr over the whole run
    live = {}  # ptr -> row index of the alloc
    for i, r in enumerate(rows):
        r["idx_all"] = i
        if r["bytes"] > 0:
            assert r["ptr"] not in live
            live[r["ptr"]] = i
            r["freed_at"] = None
        else:
            j = live.pop(r["ptr"], None)
            r["alloc_of"] = j
            if j is not None:
                rows[j]["freed_at"] = i
    return rows, bad, first_total_minus


def origin_label(r, info):
    if r["ptr"] in info["param_ptrs"]:
        return "param"
    if r["ptr"] in info["state_ptrs"]:
        return "optstate:" + info["state_ptrs"][r["ptr"]].split("[")[0]
    return f"{r['step']}/{r['phase']}/{r['inner']}"


def main():
    prof, info = run()
    rows, bad, base0 = analyse(prof, info)
    out = OrderedDict()
    out["consistency_breaks"] = bad
    out["total_before_first_event"] = base0
    step_rows = [r for r in rows if r["step"] == PROF_STEP]
    i0 = step_rows[0]["idx_all"]
    start_total = rows[i0 - 1]["total"]
    out["start_total"] = start_total

    # ---- 1. live set at start of step, by origin
    live_at_start = [r for r in rows[:i0] if r["bytes"] > 0 and (r["freed_at"] is None or r["freed_at"] >= i0)]
    assert sum(r["bytes"] for r in live_at_start) == start_total, (sum(r["bytes"] for r in live_at_start), start_total)
    # identify what is live at the start
    # pointers are re-used, so identify by the python facts captured at the end for persistent ones;
    # for transient leftovers use the alloc's step/phase/op.
    groups = defaultdict(lambda: [0, 0])
    detail = []
    for r in live_at_start:
        if r["ptr"] in info["param_ptrs"] and r["step"] == "setup":
            g = "params (model init)"
        elif r["ptr"] in info["state_ptrs"]:
            g = "optimizer state " + info["state_ptrs"][r["ptr"]].split("[")[0]
        else:
            g = f"step{r['step']}:{r['phase']}:{r['inner']}" if r["step"] != "setup" else f"setup:{r['inner']}"
        groups[g][0] += 1
        groups[g][1] += r["bytes"]
        detail.append((g, r["bytes"], r["inner"], r["shapes"]))
    out["start_breakdown"] = {k: {"count": v[0], "bytes": v[1]} for k, v in sorted(groups.items(), key=lambda kv: -kv[1][1])}
    out["python_facts"] = {k: v for k, v in info.items() if not k.endswith("_ptrs")}

    # ---- phases in step 3 (forward split: 'forward' before loss, 'loss', 'fwd_rebind' after loss)
    seen_loss = False
    for r in step_rows:
        if r["phase"] == "loss":
            seen_loss = True
        elif r["phase"] == "forward" and seen_loss:
            r["phase"] = "fwd_exit"
    phases = ["data", "forward", "loss", "fwd_exit", "backward", "optimizer", "zero_grad"]
    # phase boundaries: level at phase start = total before first event of that phase (phases are contiguous in time)
    per = OrderedDict()
    level = start_total
    for ph in phases:
        evs = [r for r in step_rows if r["phase"] == ph]
        start = level
        peak = max([start] + [r["total"] for r in evs])
        pk_ev = max(evs, key=lambda r: r["total"]) if evs else None
        al = [r for r in evs if r["bytes"] > 0]
        fr = [r for r in evs if r["bytes"] < 0]
        end = evs[-1]["total"] if evs else start
        per[ph] = dict(start=start, peak=peak, end=end, n_alloc=len(al), alloc_bytes=sum(r["bytes"] for r in al),
                       n_free=len(fr), free_bytes=-sum(r["bytes"] for r in fr),
                       n_alloc_lt512=sum(1 for r in al if r["bytes"] < 512),
                       bytes_alloc_lt512=sum(r["bytes"] for r in al if r["bytes"] < 512),
                       peak_at=(pk_ev["inner"] + (f" [{pk_ev['node']}]" if pk_ev["node"] else "") if pk_ev and peak > start else "phase start"))
        level = end
    out["phases"] = per
    # ---- same, counting only blocks >= 512 B (live small blocks from before the step are subtracted too)
    small_live_start = sum(r["bytes"] for r in live_at_start if r["bytes"] < 512)
    out["small_live_at_start"] = small_live_start
    big = start_total - small_live_start
    for r in rows[:i0]:
        pass
    lvl = big
    per_big = OrderedDict()
    for ph in phases:
        evs = [r for r in step_rows if r["phase"] == ph]
        st0 = lvl
        pk_ = lvl
        for r in evs:
            b = r["bytes"] if r["bytes"] > 0 else (-rows[r["alloc_of"]]["bytes"])
            if abs(b) >= 512:
                lvl += b
                pk_ = max(pk_, lvl)
        per_big[ph] = dict(start=st0, peak=pk_, end=lvl,
                           n_alloc=sum(1 for r in evs if r["bytes"] >= 512),
                           alloc_bytes=sum(r["bytes"] for r in evs if r["bytes"] >= 512))
    out["phases_ge512"] = per_big
    out["overall_peak_ge512"] = max(v["peak"] for v in per_big.values())
    # ---- grouped table of all allocations >= 512 B
    grp = OrderedDict()
    for r in step_rows:
        if r["bytes"] >= 512:
            k = (r["phase"], r["node"] or r["top"], r["inner"], r["bytes"])
            g = grp.setdefault(k, [0, 0, r["shapes"]])
            g[0] += 1
            if r["freed_at"] is not None:
                g[1] += 1
    out["grouped_ge512"] = [dict(phase=k[0], node_or_top=k[1], op=k[2], bytes=k[3], count=v[0], freed_in_step=v[1], shapes=v[2])
                            for k, v in grp.items()]
    out["overall_peak"] = max([start_total] + [r["total"] for r in step_rows])
    pk = max(step_rows, key=lambda r: r["total"])
    out["overall_peak_event"] = dict(idx=pk["idx_all"] - i0, phase=pk["phase"], op=pk["inner"], node=pk["node"])
    out["end_total"] = step_rows[-1]["total"]
    out["n_events"] = len(step_rows)

    # ---- check that phases do not interleave
    order = [r["phase"] for r in step_rows]
    compact = [p for i, p in enumerate(order) if i == 0 or order[i - 1] != p]
    out["phase_sequence"] = compact

    # ---- 4. 30 largest allocations in step
    al = [r for r in step_rows if r["bytes"] > 0]
    top = sorted(al, key=lambda r: (-r["bytes"], r["idx_all"]))[:30]
    out["top30"] = [dict(idx=r["idx_all"] - i0, bytes=r["bytes"], phase=r["phase"], op=r["inner"], top_op=r["top"],
                         node=r["node"], shapes=r["shapes"],
                         freed_in_step=(r["freed_at"] is not None),
                         freed_idx=(r["freed_at"] - i0 if r["freed_at"] is not None else None),
                         freed_phase=(rows[r["freed_at"]]["phase"] if r["freed_at"] is not None else None))
                    for r in top]
    # ---- small allocs
    small = [r for r in al if r["bytes"] < 512]
    out["small_allocs"] = [dict(idx=r["idx_all"] - i0, bytes=r["bytes"], phase=r["phase"], op=r["inner"],
                                node=r["node"], freed_in_step=r["freed_at"] is not None) for r in small]
    # ---- frees of blocks allocated before the step
    old_frees = [r for r in step_rows if r["bytes"] < 0 and r.get("alloc_of") is not None and r["alloc_of"] < i0]
    out["frees_of_preexisting"] = [dict(idx=r["idx_all"] - i0, bytes=r["bytes"], phase=r["phase"], op=r["inner"],
                                        origin=f"step{rows[r['alloc_of']]['step']}:{rows[r['alloc_of']]['phase']}:{rows[r['alloc_of']]['inner']}")
                                   for r in old_frees]
    unmatched = [r for r in step_rows if r["bytes"] < 0 and r.get("alloc_of") is None]
    out["unmatched_frees"] = len(unmatched)
    # live at end of step that were allocated in the step
    out["allocated_in_step_still_live"] = [dict(idx=r["idx_all"] - i0, bytes=r["bytes"], phase=r["phase"], op=r["inner"],
                                                node=r["node"], shapes=r["shapes"])
                                           for r in al if r["freed_at"] is None]

    # ---- CSVs
    with open(os.path.join(OUTDIR, "events.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "phase", "op", "top_op", "autograd_node", "bytes", "total_allocated_after",
                    "ptr", "alloc_index_or_freed_index", "origin_if_preexisting", "op_input_shapes"])
        for r in step_rows:
            if r["bytes"] > 0:
                link = (r["freed_at"] - i0) if r["freed_at"] is not None else "live"
                orig = ""
            else:
                j = r.get("alloc_of")
                link = (j - i0) if j is not None else "?"
                orig = "" if j is None or j >= i0 else f"step{rows[j]['step']}:{rows[j]['phase']}:{rows[j]['inner']}"
            w.writerow([r["idx_all"] - i0, r["phase"], r["inner"], r["top"], r["node"], r["bytes"], r["total"],
                        hex(r["ptr"]), link, orig, r["shapes"]])
    with open(os.path.join(OUTDIR, "events_all.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "step", "phase", "op", "autograd_node", "bytes", "total_allocated_after", "ptr"])
        for r in rows:
            w.writerow([r["idx_all"], r["step"], r["phase"], r["inner"], r["node"], r["bytes"], r["total"], hex(r["ptr"])])

    # ---- chrome-trace cross-check: count [memory] events and sum of bytes inside STEP2
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as fh:
        tr = json.load(fh)
    os.unlink(path)
    evs = tr["traceEvents"] if isinstance(tr, dict) else tr
    stepev = [e for e in evs if e.get("ph") == "X" and e.get("name") == f"STEP{PROF_STEP}"][0]
    mems = [e for e in evs if e.get("ph") == "i" and e.get("name") == "[memory]"
            and stepev["ts"] <= e["ts"] <= stepev["ts"] + stepev["dur"]]
    out["chrome_check"] = dict(n=len(mems), n_alloc=sum(1 for e in mems if e["args"]["Bytes"] > 0),
                               sum_bytes=sum(e["args"]["Bytes"] for e in mems),
                               max_total=max(e["args"]["Total Allocated"] for e in mems))
    with open(os.path.join(OUTDIR, "result.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)
    return out


if __name__ == "__main__":
    o = main()
    print(json.dumps({k: v for k, v in o.items() if k not in ("top30", "small_allocs", "allocated_in_step_still_live", "frees_of_preexisting")}, indent=1, default=str))
