"""measure_tp.py -- what one rank of a tensor-parallel (and FSDP2 x TP) job allocates when
transformers' LlamaForCausalLM trains, measured in PyTorch (issue #17's `--tp`).

The plan is torch's Megatron-style one for LLaMA (torch.distributed.tensor.parallel, as
torchtitan writes it): q/k/v/gate/up ColwiseParallel, o/down RowwiseParallel, the embedding
RowwiseParallel (vocabulary-parallel: weight Shard(0), output all-reduced to Replicate) and
lm_head ColwiseParallel(output_layouts=Replicate()) (the logits all-gathered; no loss_parallel).
The attention modules see their local heads through transformers' `view(*shape, -1, head_dim)`.
With `fsdp` > 1 the mesh is (fsdp, tp): fully_shard on every decoder layer and the root over
the first dimension after the TP plan (2-D). With `sp` the SequenceParallel plan too (norms
SequenceParallel, the hidden states Shard(1) between modules), and the batch passes
`position_ids` (transformers would derive S / tp positions from the local shard).

Under the fake process group (torch.testing._internal.distributed.fake_pg) this process is rank
`rank` of fsdp x tp; collectives return at once and allocate what DTensor / FSDP2 allocate
around them. measure_hf.py's step and method (one profiler session, mode-free, requested bytes
of blocks >= 512 B, the third iteration); for-loop AdamW (foreach refuses a group that mixes DTensor and plain parameters, as the replicated norms are under TP without sequence parallelism), no gradient clipping.

    python3 measure_tp.py --point JSON     # one point -> PHASES JSON on stdout
    python3 measure_tp.py                  # the grid -> tests/fixtures/dist_grid/tp.json
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/tp.json")


def plan(model, sp):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel
    if not sp:
        p = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
             "lm_head": ColwiseParallel(output_layouts=Replicate())}
    else:
        p = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
             "model.norm": SequenceParallel(),
             "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    for i in range(len(model.model.layers)):
        L = f"model.layers.{i}."
        for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            p[L + n] = ColwiseParallel()
        out = Shard(1) if sp else Replicate()
        p[L + "self_attn.o_proj"] = RowwiseParallel(output_layouts=out)
        p[L + "mlp.down_proj"] = RowwiseParallel(output_layouts=out)
        if sp:
            p[L + "input_layernorm"] = SequenceParallel()
            p[L + "post_attention_layernorm"] = SequenceParallel()
            p[L + "self_attn"] = PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                    desired_input_kwarg_layouts={"hidden_states": Replicate()})
            p[L + "mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return p


def wrapper(pt):
    def wrap(model):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module
        tp, dp = pt["tp"], pt.get("fsdp", 1)
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        parallelize_module(model, mesh["tp"], plan(model, pt.get("sp", False)))
        if dp > 1:
            from torch.distributed.fsdp import fully_shard
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh["dp"])
            fully_shard(model, mesh=mesh["dp"])
    return wrap


def one(pt):
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    import measure_hf as H
    import measure_cs336 as M
    torch.set_num_threads(1)
    world = pt["tp"] * pt.get("fsdp", 1)
    dist.init_process_group("fake", rank=pt["rank"], world_size=world, store=FakeStore())
    p = dict(pt["config"], seq=pt["seq"], batch=pt["batch"], attn=pt.get("attn", "sdpa"), optimizer=pt.get("optimizer", "adamw_torch_forloop"),
             max_grad_norm=0.0, use_cache=False, position_ids=pt.get("sp", False))
    per, log, info = H.measure(p, "training", wrapper(pt))
    if pt.get("events"):
        M.write_events(pt["events"], log)
    return {k: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"], start=s["start"],
                    end=s.get("end", s["start"]), cpu_scratch_left_out=s["cpu_scratch"], missed_frees=s.get("missed_frees", []))
            for k, s in per.items()}


def grid():
    configs = [
        dict(model_type="llama", hidden_size=128, intermediate_size=384, num_layers=2, num_heads=4, num_kv_heads=2, vocab_size=1000),
        dict(model_type="llama", hidden_size=128, intermediate_size=256, num_layers=2, num_heads=8, num_kv_heads=4, vocab_size=1024),
    ]
    pts = []
    for c in configs:
        for tp, fsdp, opt, sp in ((2, 1, "adamw_torch_forloop", False), (4, 1, "adamw_torch_forloop", False), (2, 2, "adamw_torch_foreach", False),
                                  (2, 4, "adamw_torch_foreach", False), (2, 1, "adamw_torch_forloop", True), (4, 1, "adamw_torch_forloop", True)):
            if c["num_kv_heads"] % tp:
                continue
            world = tp * fsdp
            for rank in sorted({0, world - 1}):
                name = (f"llama V{c['vocab_size']} d{c['hidden_size']} F{c['intermediate_size']} h{c['num_heads']} kv{c['num_kv_heads']} "
                        f"S64 B2 fsdp{fsdp} x tp{tp}{' sp' if sp else ''} rank{rank} {opt}")
                pt = dict(name=name, config=c, seq=64, batch=2, tp=tp, fsdp=fsdp, rank=rank, optimizer=opt, attn="sdpa")
                if sp:
                    pt["sp"] = True
                pts.append(pt)
    return pts


def header():
    import torch
    import transformers
    return dict(generator="tools/pytorch/measure_tp.py", torch=torch.__version__, transformers=transformers.__version__,
                counted="requested bytes of blocks >= 512 B, absolute levels, the third training iteration, rank `rank` of fsdp x tp")


def main():
    import measure_cs336 as M
    M.grid_main(__doc__, __file__, one, grid, OUT, header)


if __name__ == "__main__":
    main()
