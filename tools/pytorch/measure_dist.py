"""measure_dist.py -- what one rank of a data-parallel job allocates, measured in PyTorch.

For tests/dist_grid.rs: the cs336 and tinyllama reference models of make_grid.py, trained with
torch.optim.AdamW(foreach=True) (CUDA's default; vramscope's --optimizer adamw_torch) under

- fsdp / zero2 / fsdp_root / fsdp_mp / hsdp: FSDP2 `fully_shard` on a CPU device mesh under the
  fake process group (torch.testing._internal.distributed.fake_pg): each process is rank r of
  N; collectives return at once and allocate what FSDP2 allocates around them. fsdp: every
  block, then the root; zero2: the same with reshard_after_forward=False on the blocks;
  fsdp_root: fully_shard(model) alone; fsdp_mp: MixedPrecisionPolicy(bf16, fp32); hsdp: a
  (N / 2, 2) mesh, sharded over 2 ranks, replicated over N / 2.
- ddp / zero1: DistributedDataParallel (and ZeroRedundancyOptimizer) over real gloo processes
  (DDP under the fake process group fails in backward); rank r's measurement.

Each point runs in its own process(es), with measure_cs336.py's method: one profiler session,
mode-free, requested bytes of blocks >= 512 B, absolute levels, the third iteration measured
(make_grid.py's CPU-only kernel scratch rules apply).

    python3 measure_dist.py              # the grid -> tests/fixtures/dist_grid/dist.json
    python3 measure_dist.py --point JSON # one point, printed as JSON (used by the grid)
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/dist.json")


def setup_for(pt):
    import torch
    import make_grid as G
    base = dict(flavour=pt["flavour"], config=pt["config"], seq=pt["seq"], batch=pt["batch"], checkpoint=None, fusion=False,
                attention="naive", pure_bf16=False)
    inner = (G.cs336_setup if pt["flavour"] == "cs336" else G.tinyllama_setup)(base)
    layout, world = pt["layout"], pt["world_size"]

    def setup():
        model, _, loss_fn, get_batch = inner()
        if layout in ("ddp", "zero1"):
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            if layout == "hsdp":
                mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))
            else:
                mesh = init_device_mesh("cpu", (world,))
            kw = dict(mesh=mesh)
            if layout == "fsdp_mp":
                kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            blocks = model.layers if pt["flavour"] == "cs336" else model.blocks
            if layout != "fsdp_root":
                for blk in blocks:
                    fully_shard(blk, reshard_after_forward=layout != "zero2", **kw)
            fully_shard(model, **kw)
        if layout == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3, weight_decay=0.01, foreach=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)
        return model, opt, loss_fn, get_batch

    return setup


def measure_here(pt):
    import torch
    import measure_cs336 as M
    torch.set_num_threads(1)
    per, _ = M.measure(setup_for(pt), "training", other_threads=pt["layout"] in ("ddp", "zero1"))
    return {p: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"], start=s["start"],
                    end=s.get("end", s["start"]), cpu_scratch_left_out=s["cpu_scratch"], missed_frees=s.get("missed_frees", []))
            for p, s in per.items()}


def gloo_worker(rank, pt, store, out):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=pt["world_size"])
    phases = measure_here(pt)
    if rank == pt["rank"]:
        with open(out, "w") as f:
            json.dump(phases, f)
    dist.barrier()
    dist.destroy_process_group()


def one(pt):
    import torch.distributed as dist
    if pt["layout"] in ("ddp", "zero1"):
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "phases.json")
            mp.spawn(gloo_worker, args=(pt, os.path.join(tmp, "store"), out), nprocs=pt["world_size"])
            return json.load(open(out))
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", rank=pt["rank"], world_size=pt["world_size"], store=FakeStore())
    return measure_here(pt)


def grid():
    configs = [
        ("cs336", dict(vocab_size=1000, d_model=64, num_layers=2, num_heads=4, num_kv_heads=4, d_ff=172), 32, 2),
        ("cs336", dict(vocab_size=1003, d_model=64, num_layers=2, num_heads=4, num_kv_heads=4, d_ff=170), 32, 2),
        ("cs336", dict(vocab_size=2000, d_model=128, num_layers=3, num_heads=4, num_kv_heads=4, d_ff=344), 64, 2),
        ("tinyllama", dict(vocab_size=1000, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=172), 32, 2),
        ("tinyllama", dict(vocab_size=1003, d_model=64, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=170), 32, 2),
    ]
    pts = []
    for flavour, c, seq, batch in configs:
        c = dict(c, max_seq_len=seq)
        uneven = c["vocab_size"] % 8 != 0
        for world in (2, 4, 8):
            layouts = ["fsdp", "zero2", "fsdp_root", "hsdp"] + (["fsdp_mp"] if flavour == "tinyllama" else [])
            if world <= 4:
                layouts += ["ddp", "zero1"]
            for layout in layouts:
                if layout == "hsdp" and world < 4:
                    continue
                ranks = [0]
                if layout.startswith("fsdp") or layout == "zero2":
                    if uneven:
                        ranks.append(world - 1)
                if layout == "zero1":
                    ranks.append(world - 1)
                for r in ranks:
                    name = f"{flavour} V{c['vocab_size']} d{c['d_model']} L{c['num_layers']} F{c['d_ff']} S{seq} B{batch} {layout} x{world} rank{r}"
                    pts.append(dict(name=name, flavour=flavour, config=c, seq=seq, batch=batch, layout=layout, world_size=world, rank=r,
                                    iterations=3, profile_type="training"))
    return pts


def header():
    import torch
    return dict(generator="tools/pytorch/measure_dist.py", torch=torch.__version__,
                counted="requested bytes of blocks >= 512 B, absolute levels, the third training iteration, rank `rank` of `world_size`")


def main():
    import measure_cs336 as M
    M.grid_main(__doc__, __file__, one, grid, OUT, header)


if __name__ == "__main__":
    main()
