"""Writes tests/fixtures/pytorch_snapshots/: memory snapshot pickles in PyTorch's format, each
small, for the test that requires `analyze`'s numbers to equal memory_viz's own
(tests/pytorch_snapshots.rs runs the viewer's process_alloc_data on every file).

- hand-built ones, per the format `torch.cuda.memory._snapshot()` writes (torch/cuda/memory.py's
  `_snapshot` docstring, c10's CUDACachingAllocator `TraceEntry`/`BlockInfo`), built from plain
  dicts and lists with the stdlib pickle, one per case the viewer treats specially;
- real ones from `torch.cuda.memory._profile_to_snapshot` on CPU (what the profiler's memory
  timeline becomes; its blocks carry no `address`, its parameters are in no trace entry).

usage: /work/pyenv/bin/python tools/pytorch/make_snapshot_corpus.py [--hand-built-only] [OUT_DIR]
(--hand-built-only keeps the profiled files: their addresses, hence reserved spans, differ per run)
"""

import os
import pickle
import sys

MiB = 1 << 20
KiB = 1 << 10
BASE = 0x7F0000000000  # a CUDA-like device address
BASE1 = 0x7E0000000000  # device 1


def frames(name, line):
    return [{"filename": "model.py", "line": line, "name": name}]


def ev(action, addr, size, stream=0, name=None, line=0, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": 1000 + line}
    if name is not None:
        e["frames"] = frames(name, line)
    e.update(extra)
    return e


def block(size, state, requested=None, frames_=None, address=None):
    b = {"size": size, "state": state}
    if requested is not None:
        b["requested_size"] = requested
    if frames_ is not None:
        b["frames"] = frames_
    if address is not None:
        b["address"] = address
    return b


def segment(address, blocks, device=0, stream=0, expandable=False, pool=(0, 0)):
    total = sum(b["size"] for b in blocks)
    active = sum(b["size"] for b in blocks if b["state"].startswith("active"))
    # Blocks carry their address as _snapshot() writes it (memory_viz recomputes it).
    a = address
    for b in blocks:
        b.setdefault("address", a)
        a += b["size"]
    return {
        "device": device,
        "address": address,
        "total_size": total,
        "allocated_size": active,
        "active_size": active,
        "requested_size": sum(b.get("requested_size", 0) for b in blocks),
        "stream": stream,
        "segment_type": "large",
        "segment_pool_id": pool,
        "is_expandable": expandable,
        "frames": [],
        "blocks": blocks,
    }


def snapshot(segments, traces, **extra):
    s = {"segments": segments, "device_traces": traces, "allocator_settings": {"expandable_segments": False}}
    s.update(extra)
    return s


def cases():
    """(name, snapshot) for each case memory_viz treats specially."""
    out = []
    seg = lambda blocks, **kw: segment(BASE, blocks, **kw)

    # record_stream / NCCL: free_requested long before free_completed; A stays active until
    # its free_completed (memory_viz), so the peak holds A, C and D together.
    out.append(("multi_stream_frees", snapshot(
        [seg([block(2 * MiB, "active_allocated", 2 * MiB - 512, frames("c", 6)), block(10 * MiB, "inactive"),
              block(5 * MiB, "active_allocated", 5 * MiB, frames("d", 7)), block(3 * MiB, "inactive")])],
        [[
            ev("segment_alloc", BASE, 20 * MiB, name="seg", line=1),
            ev("alloc", BASE + 4 * MiB, 4 * MiB - 100, name="a", line=2),
            ev("alloc", BASE + 8 * MiB, 3 * MiB, name="b", line=3),
            ev("free_requested", BASE + 4 * MiB, 4 * MiB - 100, stream=1, name="a_free", line=4),
            ev("free_requested", BASE + 8 * MiB, 3 * MiB, name="b_free", line=5),
            ev("free_completed", BASE + 8 * MiB, 3 * MiB, name="b_free", line=5),
            ev("alloc", BASE, 2 * MiB - 512, name="c", line=6),
            ev("alloc", BASE + 12 * MiB, 5 * MiB, name="d", line=7),
            ev("free_completed", BASE + 4 * MiB, 4 * MiB - 100, stream=1, name="a_free", line=8),
        ]],
    )))

    # Frees requested but never completed by the end: the blocks are active_pending_free.
    out.append(("pending_frees_at_end", snapshot(
        [seg([block(1 * MiB, "active_pending_free", MiB - 8, frames("p", 2)),
              block(1 * MiB, "active_allocated", MiB, frames("q", 3)),
              block(1 * MiB, "active_allocated", MiB, frames("r", 5)),
              block(1 * MiB, "inactive")])],
        [[
            ev("segment_alloc", BASE, 4 * MiB, line=1),
            ev("alloc", BASE, MiB - 8, name="p", line=2),
            ev("alloc", BASE + MiB, MiB, name="q", line=3),
            ev("free_requested", BASE, MiB - 8, stream=2, name="p_free", line=4),
            ev("alloc", BASE + 2 * MiB, MiB, name="r", line=5),
        ]],
    )))

    # Recording began after the allocations: the trace holds only their free_completed
    # (unmatched frees are live from the start), and one block no entry names.
    out.append(("only_free_completed", snapshot(
        [seg([block(3 * MiB, "inactive"), block(MiB, "active_allocated", 700 * KiB, frames("ghost", 9))])],
        [[
            ev("free_completed", BASE, MiB, name="x", line=1),
            ev("free_completed", BASE + MiB, 2 * MiB, name="y", line=2),
        ]],
    )))

    # Back-to-back pairs (vramscope's own style) and an unmatched pair.
    out.append(("adjacent_pairs", snapshot(
        [seg([block(4 * MiB, "inactive")])],
        [[
            ev("free_requested", BASE + 3 * MiB, 512 * KiB, name="old", line=1),
            ev("free_completed", BASE + 3 * MiB, 512 * KiB, name="old", line=1),
            ev("alloc", BASE, MiB, name="u", line=2),
            ev("alloc", BASE + MiB, 2 * MiB, name="v", line=3),
            ev("free_requested", BASE, MiB, name="u", line=4),
            ev("free_completed", BASE, MiB, name="u", line=4),
            ev("free_requested", BASE + MiB, 2 * MiB, name="v", line=5),
            ev("free_completed", BASE + MiB, 2 * MiB, name="v", line=5),
        ]],
    )))

    # Entries and blocks without an address: memory_viz keys them all as `undefined`, and
    # computes block addresses from the segment's address and the sizes before them.
    noaddr = snapshot(
        [seg([block(MiB, "active_allocated", MiB - 4, frames("w", 1)), block(MiB, "inactive"),
              block(2 * MiB, "active_allocated", 2 * MiB, frames("live", 2))])],
        [[
            {"action": "alloc", "size": 300 * KiB, "frames": frames("n1", 3)},
            {"action": "alloc", "size": 200 * KiB, "frames": frames("n2", 4)},
            {"action": "free_completed", "size": 200 * KiB},
            ev("alloc", BASE + 2 * MiB, 2 * MiB, name="live", line=5),
        ]],
    )
    for b in noaddr["segments"][0]["blocks"]:
        del b["address"]
    out.append(("no_address", noaddr))

    # Legacy blocks: no requested_size and no frames (memory_viz counts `size`), and one
    # with history (memory_viz counts history[0].real_size).
    legacy = snapshot(
        [seg([block(2 * MiB, "active_allocated"), block(MiB, "inactive"),
              {"size": MiB, "state": "active_allocated", "history": [{"addr": BASE + 3 * MiB, "real_size": 600 * KiB, "frames": frames("h", 1)}]},
              block(MiB, "active_allocated", 0)])],
        [[ev("alloc", BASE + 2 * MiB, 512 * KiB), ev("free_completed", BASE + 2 * MiB, 512 * KiB)]],
    )
    out.append(("no_requested_size", legacy))

    # Trace entries without frames (context recording off).
    out.append(("no_frames", snapshot(
        [seg([block(MiB, "active_allocated", MiB), block(3 * MiB, "inactive")])],
        [[ev("segment_alloc", BASE, 4 * MiB), ev("alloc", BASE, MiB), ev("alloc", BASE + MiB, MiB),
          ev("free_requested", BASE + MiB, MiB), ev("free_completed", BASE + MiB, MiB)]],
    )))

    # Segments only: _snapshot() after recording stopped (empty traces).
    out.append(("segments_only", snapshot(
        [seg([block(4 * MiB, "active_allocated", 4 * MiB, frames("p0", 1)), block(4 * MiB, "active_allocated", 4 * MiB - 16, frames("p1", 2)),
              block(MiB, "active_pending_free", MiB), block(7 * MiB, "inactive")])],
        [[]],
    )))

    # No device_traces key at all (torch.cuda.memory_snapshot()'s list, put in a dict).
    s = snapshot([segment(BASE, [block(2 * MiB, "active_allocated", 2 * MiB), block(2 * MiB, "inactive")])], None)
    del s["device_traces"]
    out.append(("no_device_traces", s))

    # Several devices: equal trace lengths on 0 and 2 (memory_viz shows the first), device 1
    # with segments only, device 3 with a longer trace on its own.
    d = lambda dev, n: [ev("alloc", BASE + dev * 0x100000000 + k * MiB, (k + 1) * MiB + dev, name=f"d{dev}", line=k) for k in range(n)]
    out.append(("several_devices", snapshot(
        [segment(BASE + 0x100000000, [block(5 * MiB, "active_allocated", 5 * MiB)], device=1),
         segment(BASE, [block(MiB, "active_allocated", MiB), block(2 * MiB, "active_allocated", 2 * MiB), block(MiB, "inactive")], device=0)],
        [d(0, 2), d(1, 0), d(2, 2)],
    )))
    out.append(("several_devices_longest_last", snapshot(
        [segment(BASE, [block(4 * MiB, "inactive")], device=0)],
        [d(0, 1), [], d(2, 3)],
    )))

    # Expandable segments: segment_map/segment_unmap grow and shrink one reserved range.
    out.append(("expandable_segments", snapshot(
        [segment(BASE, [block(2 * MiB, "active_allocated", 2 * MiB - 64, frames("e2", 4)), block(2 * MiB, "inactive")], expandable=True)],
        [[
            ev("segment_map", BASE, 2 * MiB, line=1),
            ev("alloc", BASE, 2 * MiB - 64, name="e1", line=2),
            ev("segment_map", BASE + 2 * MiB, 4 * MiB, line=3),
            ev("alloc", BASE + 2 * MiB, 4 * MiB, name="e3", line=4),
            ev("free_requested", BASE + 2 * MiB, 4 * MiB, name="e3", line=5),
            ev("free_completed", BASE + 2 * MiB, 4 * MiB, name="e3", line=5),
            ev("segment_unmap", BASE + 4 * MiB, 2 * MiB, line=6),
            ev("free_requested", BASE, 2 * MiB - 64, line=7),
            ev("free_completed", BASE, 2 * MiB - 64, line=7),
            ev("alloc", BASE, 2 * MiB - 64, name="e2", line=8),
        ]],
        allocator_settings={"expandable_segments": True},
    )))

    # Actions memory_viz does not know: ignored by it (and reported by vramscope).
    out.append(("unknown_actions", snapshot(
        [seg([block(MiB, "active_allocated", MiB), block(3 * MiB, "inactive")])],
        [[
            ev("segment_alloc", BASE, 4 * MiB),
            ev("alloc", BASE, MiB, name="k", line=1),
            ev("alloc", BASE + MiB, 2 * MiB, name="r", line=2),
            ev("realloc", BASE + MiB, 3 * MiB, name="r", line=3),
            ev("free_deferred", BASE + MiB, 2 * MiB, line=4),
            ev("free_deferred", BASE + 3 * MiB, MiB, line=5),
            ev("free_completed", BASE + MiB, 2 * MiB, line=6),
        ]],
    )))

    # oom and snapshot entries, segment_free, and an alloc at an address still live (the
    # earlier allocation is never freed in memory_viz's replay).
    out.append(("oom_snapshot_realias", snapshot(
        [seg([block(MiB, "active_allocated", MiB), block(MiB, "inactive")])],
        [[
            ev("segment_alloc", BASE, 2 * MiB),
            ev("segment_alloc", BASE + 8 * MiB, 2 * MiB),
            ev("alloc", BASE, MiB, name="first", line=1),
            ev("alloc", BASE, MiB, name="again", line=2),
            ev("alloc", BASE + 8 * MiB, 2 * MiB, name="big", line=3),
            ev("snapshot", 0, 0),
            ev("oom", 0, 64 * MiB, device_free=MiB),
            ev("free_requested", BASE + 8 * MiB, 2 * MiB),
            ev("free_completed", BASE + 8 * MiB, 2 * MiB),
            ev("segment_free", BASE + 8 * MiB, 2 * MiB),
        ]],
    )))
    return out


def profiled():
    """(name, snapshot) from _profile_to_snapshot of small CPU training steps."""
    import torch
    from torch.cuda._memory_viz import _profile_to_snapshot

    torch.manual_seed(0)
    out = []
    for name, width, batch, opt in (("profile_mlp_sgd", 64, 8, "sgd"), ("profile_mlp_adam", 96, 4, "adam")):
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))
        o = torch.optim.SGD(model.parameters(), lr=0.1) if opt == "sgd" else torch.optim.Adam(model.parameters())
        x = torch.randn(batch, width)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
            loss = model(x).square().mean()
            loss.backward()
            o.step()
            o.zero_grad()
        out.append((name, _profile_to_snapshot(prof)))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = [a for a in sys.argv[1:] if a != "--hand-built-only"]
    dst = args[0] if args else os.path.join(here, "..", "..", "tests", "fixtures", "pytorch_snapshots")
    os.makedirs(dst, exist_ok=True)
    legacy_list = ("legacy_segment_list", [segment(BASE, [block(MiB, "active_allocated", MiB - 1), block(MiB, "inactive")])])
    real = [] if "--hand-built-only" in sys.argv else profiled()
    for name, snap in cases() + [legacy_list] + real:
        with open(os.path.join(dst, name + ".pickle"), "wb") as f:
            pickle.dump(snap, f)  # as torch.cuda.memory._dump_snapshot does
        print(name, os.path.getsize(os.path.join(dst, name + ".pickle")), "bytes")


if __name__ == "__main__":
    main()
