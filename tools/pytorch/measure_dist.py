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

Issue 30's models (`--families`, `--moe`, `--gpt-oss-deepseek`): transformers' Phi-3, OLMo-2,
Gemma 2 and Gemma 3 text (make_family_grid.py's points), Mixtral, Qwen3-MoE and Qwen2-MoE
(make_moe_grid.py's points), gpt-oss and DeepSeek-V3 (make_gptoss_grid.py's and
make_deepseek_grid.py's), the routers' top-k indices forced to the point's routing as
measure_moe.py does, run by measure_hf.py's loop as inference, forward or training, under

- ddp: DistributedDataParallel(model) with its defaults over gloo, the Trainer's fused AdamW and
  clip_grad_norm_(1.0);
- zero1: the same DDP with ZeroRedundancyOptimizer(optimizer_class=AdamW, foreach=True) in place
  of the Trainer's optimizer, no clipping;
- fsdp: fully_shard on every decoder layer (`model.model.layers`), then on the CausalLM, under the
  fake process group (3-D expert parameters are sharded on dim 0 like any other; Gemma's tied
  embedding is one parameter of the root), foreach AdamW, no clipping; zero2: the same with
  reshard_after_forward=False on the layers.

LoRA and QLoRA (`--lora`, tests/fixtures/dist_grid/lora.json): transformers' llama and qwen3
with peft adapters (measure_hf.py's point, setup and Trainer step: get_peft_model on bf16 weights
with fp32 adapters, or prepare_model_for_kbit_training + get_peft_model on a bitsandbytes 4-bit
model) under

- ddp: DistributedDataParallel(model) with its defaults (find_unused_parameters=False,
  broadcast_buffers=True, gradient_as_bucket_view=False) over real gloo processes, the Trainer's
  fused AdamW and clip_grad_norm_(1.0) over the parameters that require grad;
- fsdp: fully_shard on every decoder layer, then on the PeftModel, under the fake process group
  (frozen bf16 weights and fp32 adapters in the same groups), foreach AdamW, no clipping;
  zero2: the same with reshard_after_forward=False on the layers.

LoRA and QLoRA of issue 30's models (`--lora-models`, tests/fixtures/dist_grid/lora_models.json):
make_lora_grid.py's family, MoE, gpt-oss and DeepSeek-V3 LoRA points (peft's adapters on the
attention projections of the MoE models and Qwen2-MoE's shared expert, and peft's ParamWrapper
(target_parameters) on their experts and routers, Phi-3's fused qkv_proj and gate_up_proj among
the dense targets; the routers' top-k forced as measure_moe.py forces them) under ddp (LoRA and
bitsandbytes 4-bit QLoRA), fsdp and zero2 (LoRA), wrapped as `--lora` wraps them, run by
measure_hf.py's loop of the point's profile type.

    python3 measure_dist.py              # the grid -> tests/fixtures/dist_grid/dist.json
    python3 measure_dist.py --lora       # the LoRA grid -> tests/fixtures/dist_grid/lora.json
    python3 measure_dist.py --families   # phi3/olmo2/gemma2/gemma3_text -> tests/fixtures/dist_grid/families.json
    python3 measure_dist.py --moe        # mixtral/qwen3_moe/qwen2_moe -> tests/fixtures/dist_grid/moe.json
    python3 measure_dist.py --gpt-oss-deepseek  # gpt_oss/deepseek_v3 -> tests/fixtures/dist_grid/gpt_oss_deepseek.json
    python3 measure_dist.py --lora-models  # LoRA/QLoRA of issue 30's models -> tests/fixtures/dist_grid/lora_models.json
    python3 measure_dist.py --qwen2-moe-sliding  # qwen2_moe with use_sliding_window -> tests/fixtures/dist_grid/qwen2_moe_sliding.json
    python3 measure_dist.py --cs336-autocast  # cs336/tinyllama under bf16 autocast -> tests/fixtures/dist_grid/cs336_autocast.json
    python3 measure_dist.py --aux-loss   # the router's loss (output_router_logits) -> tests/fixtures/dist_grid/aux_loss.json
    python3 measure_dist.py --aux-loss-lora  # the loss with LoRA / QLoRA under ddp -> tests/fixtures/dist_grid/aux_loss_lora.json
    python3 measure_dist.py --mixed-precision  # FSDP2's MixedPrecisionPolicy -> tests/fixtures/dist_grid/mixed_precision.json
    python3 measure_dist.py --units      # fully_shard on N layers or the root, and hsdp -> tests/fixtures/dist_grid/units.json
    python3 measure_dist.py --reentrant  # reentrant checkpointing under fsdp and hsdp -> tests/fixtures/dist_grid/reentrant.json
    python3 measure_dist.py --lora-extras  # peft's modules_to_save and lora_bias -> tests/fixtures/dist_grid/lora_extras.json
    python3 measure_dist.py --lora-mixed-precision  # LoRA under MixedPrecisionPolicy (llama family) -> tests/fixtures/dist_grid/lora_mixed_precision.json
    python3 measure_dist.py --lora-mixed-precision-models  # the same on issue 30's models -> tests/fixtures/dist_grid/lora_mixed_precision_models.json
    python3 measure_dist.py --mixed-precision-pairs  # the policy with hsdp and with the router's loss -> tests/fixtures/dist_grid/mixed_precision_pairs.json
    python3 measure_dist.py --reentrant-mixed-precision  # reentrant checkpointing with the policy -> tests/fixtures/dist_grid/reentrant_mixed_precision.json
    python3 measure_dist.py --fsdp-qlora   # QLoRA with bnb_4bit_quant_storage under fsdp/zero2 -> tests/fixtures/dist_grid/fsdp_qlora.json
    python3 measure_dist.py --fsdp-qlora-models  # the same on issue 30's models -> tests/fixtures/dist_grid/fsdp_qlora_models.json
    python3 measure_dist.py --lora-layouts  # LoRA of issue 30's models under hsdp, other units, reentrant -> tests/fixtures/dist_grid/lora_layouts.json
    python3 measure_dist.py --lora-mixed-precision-layouts  # the policy over LoRA under hsdp -> tests/fixtures/dist_grid/lora_mixed_precision_layouts.json
    python3 measure_dist.py --lora-extras-layouts  # modules_to_save / lora_bias under hsdp, other units, reentrant -> tests/fixtures/dist_grid/lora_extras_layouts.json
    python3 measure_dist.py --fsdp-qlora-layouts  # FSDP-QLoRA under hsdp, other units, reentrant -> tests/fixtures/dist_grid/fsdp_qlora_layouts.json
    python3 measure_dist.py --point JSON # one point, printed as JSON (used by the grid)
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/dist.json")
LORA_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora.json")
FAMILIES_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/families.json")
MOE_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/moe.json")
GPTOSS_DEEPSEEK_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/gpt_oss_deepseek.json")
LORA_MODELS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora_models.json")
QWEN2_MOE_SLIDING_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/qwen2_moe_sliding.json")
AUTOCAST_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/autocast.json")
CS336_AUTOCAST_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/cs336_autocast.json")
AUX_LOSS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/aux_loss.json")
AUX_LOSS_LORA_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/aux_loss_lora.json")
MIXED_PRECISION_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/mixed_precision.json")
UNITS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/units.json")
REENTRANT_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/reentrant.json")
LORA_EXTRAS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora_extras.json")
REENTRANT_MIXED_PRECISION_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/reentrant_mixed_precision.json")
MIXED_PRECISION_PAIRS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/mixed_precision_pairs.json")
LORA_MIXED_PRECISION_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora_mixed_precision.json")
LORA_MIXED_PRECISION_MODELS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora_mixed_precision_models.json")
FSDP_QLORA_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/fsdp_qlora.json")
FSDP_QLORA_MODELS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/fsdp_qlora_models.json")
LORA_LAYOUTS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora_layouts.json")
LORA_MIXED_PRECISION_LAYOUTS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora_mixed_precision_layouts.json")
LORA_EXTRAS_LAYOUTS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/lora_extras_layouts.json")
FSDP_QLORA_LAYOUTS_OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/fsdp_qlora_layouts.json")


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


def fsdp_kwargs(pt):
    """fully_shard's mesh and policy for a point: a 1-D mesh over the ranks, or hsdp's
    (world / shard, shard) mesh; MixedPrecisionPolicy(param_dtype, reduce_dtype) where the point
    names either (`param_dtype`, `reduce_dtype`)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    world = pt["world_size"]
    if pt["layout"] == "hsdp":
        shard = pt["shard"]
        mesh = init_device_mesh("cpu", (world // shard, shard), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    kw = dict(mesh=mesh)
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
    if pt.get("param_dtype") or pt.get("reduce_dtype"):
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=dt.get(pt.get("param_dtype")), reduce_dtype=dt.get(pt.get("reduce_dtype")))
    return kw


def lora_wrapper(pt):
    """The point's layout applied to the peft model, or to the plain CausalLM (measure_hf.run's `wrap`).
    FSDP2's units: every decoder layer (`unit` 1, the default), every `unit` consecutive layers as
    one group (fully_shard on the list of them), or none (`unit` 0: the root alone); then the root."""
    def wrap(model):
        if pt["layout"] in ("ddp", "zero1"):
            from torch.nn.parallel import DistributedDataParallel as DDP
            return DDP(model)
        from torch.distributed.fsdp import fully_shard
        kw = fsdp_kwargs(pt)
        inner = model.base_model.model if pt["hf"].get("lora_r") else model
        layers, unit = list(inner.model.layers), pt.get("unit", 1)
        for i in range(0, len(layers) if unit else 0, unit or 1):
            group = layers[i:i + unit]
            fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=pt["layout"] != "zero2", **kw)
        fully_shard(model, **kw)
        return None
    return wrap


def zero1_optimizer(H):
    """measure_hf.py's optimizer replaced by ZeroRedundancyOptimizer over foreach AdamW (the
    Trainer's hyperparameters)."""
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def make(name, params):
        assert name == "adamw_torch_foreach", name
        return ZeroRedundancyOptimizer(list(params), optimizer_class=torch.optim.AdamW, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                       weight_decay=0.0, foreach=True)
    H.make_optimizer = make


def save_on_every_rank():
    """load_4bit saves a random model and reloads it; under torch.distributed transformers writes
    on rank 0 only, and every rank here reads its own copy (as every node has the checkpoint), so
    each rank writes its own."""
    import transformers as T
    T.PreTrainedModel.should_save_on_this_rank = lambda self, is_main_process: is_main_process


def measure_model(pt):
    """A --families, --moe or --lora-models point: its phases and measure_hf.py's info."""
    import torch
    import measure_hf as H
    torch.set_num_threads(1)
    p, kind = pt["hf"], pt["profile_type"]
    if p.get("load_in_4bit"):
        save_on_every_rank()
    if "num_experts" in p:
        import measure_moe as MOE
        forced = MOE.install_routing(p)
        H.hf_config = MOE.moe_config
    if pt["layout"] == "zero1":
        zero1_optimizer(H)
    per, _, info = H.measure(p, kind, lora_wrapper(pt), other_threads=pt["layout"] in ("ddp", "zero1"))
    if "num_experts" in p:
        info.update(experts_implementation=p["experts"], routing=p["routing"],
                    tokens_per_expert=torch.bincount(forced.reshape(-1), minlength=p["num_experts"]).tolist())
    phases = {ph: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"],
                       start=s["start"], end=s.get("end", s["start"]), peak_with_cpu_scratch=s["peak_with_cpu_scratch"],
                       cpu_scratch_left_out=s["cpu_scratch"], missed_frees=s.get("missed_frees", []))
              for ph, s in per.items()}
    excess = {ph: v["peak_with_cpu_scratch"] - v["peak"] for ph, v in phases.items() if v["peak_with_cpu_scratch"] != v["peak"]}
    return dict(phases=phases, info=info, cpu_scratch_peak_excess=excess)


def measure_here(pt):
    import torch
    if "hf" in pt and "profile_type" in pt:
        return measure_model(pt)
    if "hf" in pt:
        import measure_hf as H
        torch.set_num_threads(1)
        if pt["hf"].get("load_in_4bit"):
            save_on_every_rank()
        per, _, _ = H.measure(pt["hf"], "training", lora_wrapper(pt), other_threads=pt["layout"] == "ddp")
        return {p: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"], start=s["start"],
                        end=s.get("end", s["start"]), cpu_scratch_left_out=s["cpu_scratch"], missed_frees=s.get("missed_frees", []))
                for p, s in per.items()}
    import measure_cs336 as M
    import measure_hf as H
    torch.set_num_threads(1)
    per, _ = M.measure(setup_for(pt), pt.get("profile_type", "training"), other_threads=pt["layout"] in ("ddp", "zero1"),
                       autocast=H.autocast_region(dict(autocast=pt.get("autocast"))))
    return {p: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"], start=s["start"],
                    end=s.get("end", s["start"]), cpu_scratch_left_out=s["cpu_scratch"], missed_frees=s.get("missed_frees", []))
            for p, s in per.items()}


def main_thread_broadcasts():
    """DDP's `dist._broadcast_coalesced` (the construction's `_sync_module_states` of every
    parameter and buffer, each forward's buffer sync) flattens each bucket into one tensor and
    broadcasts it. gloo's work object holds that tensor too and is released on gloo's worker
    thread, whose frees the profiler does not record: when the worker lets go last (a race, lost
    more often on a busy machine), the construction's flat tensor -- every parameter and buffer,
    one parameter-sized block -- looks alive for the rest of the run (autocast.json's DDP forward
    point once started its step 2,337,344 B high this way; a step that allocates over its address
    retires it, see measure_cs336.analyse). This runs c10d's broadcast_coalesced
    (torch/csrc/distributed/c10d/comm.cpp: buckets of buffer_size bytes per dtype and device in
    first-index order, each flattened with cat and broadcast from src, at most two in flight,
    then copied back) and drops each flat tensor only once gloo has let go of it, so its free
    happens, and is recorded, here. Same blocks, same order."""
    import time
    import torch
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    def buckets(tensors, limit):
        done, open_ = [], {}
        for i, t in enumerate(tensors):
            key = (t.dtype, t.device)
            b = open_.setdefault(key, [[], 0])
            b[0].append(i)
            b[1] += t.numel() * t.element_size()
            if b[1] >= limit:
                done.append(b[0])
                del open_[key]
        done.extend(b[0] for b in open_.values())
        return sorted(done, key=min)

    def finish(entry):
        bucket, flat, base, work = entry
        entry.clear()
        work.wait()
        del work
        deadline = time.monotonic() + 60
        while flat._use_count() > base:  # gloo's worker thread still holds it
            assert time.monotonic() < deadline, "gloo kept the broadcast's flat tensor"
            time.sleep(0.0005)
        for t, o in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
            t.copy_(o)

    def broadcast_coalesced(pg, tensors, buffer_size, src=0):
        in_flight = []
        for idx in buckets(list(tensors), buffer_size):
            if len(in_flight) >= 2:
                finish(in_flight.pop(0))
            bucket = [tensors[i] for i in idx]
            flat = _flatten_dense_tensors(bucket)
            base = flat._use_count()
            opts = dist.BroadcastOptions()
            opts.rootRank, opts.rootTensor = src, 0
            in_flight.append([bucket, flat, base, pg.broadcast([flat], opts)])
            del flat
        while in_flight:
            finish(in_flight.pop(0))

    dist._broadcast_coalesced = broadcast_coalesced


def gloo_worker(rank, pt, store, out):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=pt["world_size"])
    main_thread_broadcasts()
    phases = measure_here(pt)
    if rank == pt["rank"]:
        with open(out + ".tmp", "w") as f:
            json.dump(phases, f)
        os.replace(out + ".tmp", out)
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


_SMALL = dict(vocab_size=1000, d_model=64, num_layers=2, num_heads=4, num_kv_heads=4, d_ff=172)
_UNEVEN = dict(vocab_size=1003, d_model=64, num_layers=2, num_heads=4, num_kv_heads=4, d_ff=170)
_WIDE = dict(vocab_size=2000, d_model=128, num_layers=3, num_heads=4, num_kv_heads=4, d_ff=344)
_TINY = dict(vocab_size=1000, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=172)
_TINY_UNEVEN = dict(vocab_size=1003, d_model=64, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=170)


def course_point(flavour, c, seq, batch, layout, world, rank, kind="training", autocast=None):
    """A cs336 / tinyllama point of `kind` under `layout` (CS336's autocast when `autocast`
    names a dtype), named by its shape and options."""
    c = dict(c, max_seq_len=seq)
    opts = (f" autocast={autocast}" if autocast else "") + (f" {kind}" if kind != "training" else "")
    name = f"{flavour} V{c['vocab_size']} d{c['d_model']} L{c['num_layers']} F{c['d_ff']} S{seq} B{batch}{opts} {layout} x{world} rank{rank}"
    pt = dict(name=name, flavour=flavour, config=c, seq=seq, batch=batch, layout=layout, world_size=world, rank=rank,
              iterations=3, profile_type=kind)
    return dict(pt, autocast=autocast) if autocast else pt


def grid():
    configs = [("cs336", _SMALL, 32, 2), ("cs336", _UNEVEN, 32, 2), ("cs336", _WIDE, 64, 2),
               ("tinyllama", _TINY, 32, 2), ("tinyllama", _TINY_UNEVEN, 32, 2)]
    pts = []
    for flavour, c, seq, batch in configs:
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
                pts += [course_point(flavour, c, seq, batch, layout, world, r) for r in ranks]
    # Forward-only (with grad, the output dropped) and inference (no_grad) steps under each layout.
    return pts + [course_point(*row) for row in FORWARD_ROWS]


# (flavour, config, seq, batch, layout, world, rank, profile type)
FORWARD_ROWS = [
    ("cs336", _SMALL, 32, 2, "ddp", 2, 0, "forward"),
    ("cs336", _UNEVEN, 32, 2, "zero1", 2, 1, "inference"),
    ("cs336", _WIDE, 64, 2, "zero2", 2, 1, "forward"),
    ("cs336", _UNEVEN, 32, 2, "fsdp", 4, 3, "forward"),
    ("cs336", _SMALL, 32, 2, "fsdp", 2, 0, "inference"),
    ("cs336", _WIDE, 64, 2, "hsdp", 4, 0, "forward"),
    ("tinyllama", _TINY, 32, 2, "ddp", 2, 1, "inference"),
    ("tinyllama", _TINY_UNEVEN, 32, 2, "zero2", 4, 3, "forward"),
    ("tinyllama", _TINY, 32, 2, "fsdp", 2, 0, "forward"),
]


def cs336_autocast_grid():
    """CS336's `with torch.autocast(device, dtype=torch.bfloat16)` around forward and loss
    (fp32 parameters, backward and the step outside), CUDA's autocast policies on CPU as
    measure_hf.py registers them: the cs336 and tinyllama models of grid() under ddp, zero1,
    zero2, fsdp, fsdp_root and hsdp, ranks 0 and the last (uneven vocabularies), world 2-4; training,
    and FORWARD_ROWS' forward-only and inference steps."""
    # (flavour, config, seq, batch, layout, world, rank)
    rows = [
        ("cs336", _SMALL, 32, 2, "ddp", 2, 0),
        ("cs336", _WIDE, 64, 2, "ddp", 4, 3),
        ("cs336", _UNEVEN, 32, 2, "zero1", 2, 1),
        ("cs336", _SMALL, 32, 2, "zero2", 2, 0),
        ("cs336", _UNEVEN, 32, 2, "zero2", 4, 3),
        ("cs336", _SMALL, 32, 2, "fsdp", 2, 0),
        ("cs336", _UNEVEN, 32, 2, "fsdp", 4, 3),
        ("cs336", _WIDE, 64, 2, "fsdp_root", 2, 1),
        ("cs336", _WIDE, 64, 2, "hsdp", 4, 0),
        ("tinyllama", _TINY, 32, 2, "ddp", 2, 1),
        ("tinyllama", _TINY_UNEVEN, 32, 2, "zero1", 4, 3),
        ("tinyllama", _TINY, 32, 2, "zero2", 2, 0),
        ("tinyllama", _TINY_UNEVEN, 32, 2, "fsdp", 4, 3),
        ("tinyllama", _TINY, 32, 2, "hsdp", 4, 2),
    ]
    return ([course_point(*row, autocast="bf16") for row in rows]
            + [course_point(*row, autocast="bf16") for row in FORWARD_ROWS])


def lora_grid():
    """LoRA and QLoRA points (ddp, fsdp, zero2): llama and qwen3, r 8-32, all-linear and q_proj,v_proj,
    checkpointing off and on, ranks 0 and the last, world 2 and 4."""
    import make_hf_grid as G
    import make_lora_grid as L
    # (layout, model_type, shape, r, targets, checkpoint, world, rank, 4-bit (quant_type, double_quant) or None)
    rows = [
        ("ddp", "llama", 0, 8, "all-linear", "none", 2, 0, None),
        ("ddp", "llama", 3, 16, "q_proj,v_proj", "non-reentrant", 2, 1, None),
        ("ddp", "qwen3", 6, 32, "all-linear", "non-reentrant", 2, 0, None),
        ("ddp", "qwen3", 1, 8, "q_proj,v_proj", "none", 2, 1, None),
        ("ddp", "llama", 2, 16, "all-linear", "none", 4, 3, None),
        ("ddp", "llama", 0, 16, "all-linear", "reentrant", 2, 0, ("nf4", True)),
        ("ddp", "qwen3", 6, 8, "q_proj,v_proj", "non-reentrant", 2, 1, ("nf4", False)),
        ("ddp", "llama", 1, 32, "q_proj,v_proj", "none", 2, 1, ("fp4", False)),
        ("fsdp", "llama", 0, 8, "all-linear", "none", 2, 0, None),
        ("fsdp", "llama", 3, 16, "q_proj,v_proj", "non-reentrant", 2, 1, None),
        ("fsdp", "qwen3", 6, 32, "all-linear", "non-reentrant", 4, 3, None),
        ("fsdp", "qwen3", 1, 8, "q_proj,v_proj", "none", 2, 1, None),
        ("fsdp", "llama", 2, 32, "all-linear", "none", 4, 0, None),
        ("fsdp", "qwen3", 4, 16, "all-linear", "non-reentrant", 2, 0, None),
        ("zero2", "llama", 0, 16, "all-linear", "none", 2, 0, None),
        ("zero2", "qwen3", 6, 8, "q_proj,v_proj", "non-reentrant", 4, 3, None),
    ]
    pts = []
    for layout, mt, i, r, targets, ck, world, rank, quant in rows:
        opt = dict(checkpoint=ck)
        if layout != "ddp":
            # foreach AdamW over DTensors; clip_grad_norm_ under FSDP2 is not modelled
            opt.update(optimizer="adamw_torch_foreach", max_grad_norm=0.0)
        p = L.qlora(mt, i, r, targets, *quant, **opt) if quant else L.lora(mt, i, r, targets, **opt)
        name = f"{L.name_of(p, 'training')} {layout} x{world} rank{rank}"
        pts.append(dict(name=name, hf=p, layout=layout, world_size=world, rank=rank))
    return pts


def fsdp_qlora_grid():
    """FSDP-QLoRA (`--fsdp-qlora`): bitsandbytes 4-bit QLoRA loaded with
    BitsAndBytesConfig(bnb_4bit_quant_storage=<the compute dtype>), so each Params4bit is the
    packed bytes viewed as (bytes / itemsize, 1) of a float type, which fully_shard shards on dim 0
    like any frozen parameter (the quant_state stays whole on every rank, an attribute of the
    Linear4bit that bitsandbytes' fix_4bit_weight_quant_state_from_module puts back on the gathered
    weight); then measure_hf.py's prepare_model_for_kbit_training and get_peft_model, wrapped as
    `--lora` wraps them (fsdp, zero2). llama/mistral/qwen2/qwen3, world 2-4, ranks 0 and the last,
    checkpointing off/non-reentrant/reentrant, nf4/fp4, double quant on/off, compute bf16 (storage
    bf16, one fp16) and fp32 (storage fp32), two points with the default uint8 storage, and three
    without prepare_model_for_kbit_training."""
    import make_lora_grid as L
    # (layout, model_type, shape, r, targets, checkpoint, world, rank, quant_type, double_quant, compute, storage)
    rows = [
        ("fsdp", "llama", 0, 8, "all-linear", "none", 2, 0, "nf4", True, "bf16", "bf16"),
        ("fsdp", "mistral", 1, 16, "q_proj,v_proj", "non-reentrant", 2, 1, "nf4", False, "bf16", "bf16"),
        ("fsdp", "qwen2", 2, 8, "all-linear", "reentrant", 4, 3, "fp4", True, "bf16", "bf16"),
        ("fsdp", "qwen3", 3, 32, "all-linear", "non-reentrant", 4, 0, "nf4", True, "bf16", "bf16"),
        ("fsdp", "llama", 4, 16, "all-linear", "reentrant", 3, 2, "fp4", False, "fp32", "fp32"),
        ("fsdp", "qwen3", 5, 16, "q_proj,v_proj", "none", 3, 0, "nf4", True, "bf16", "fp16"),
        ("zero2", "mistral", 0, 8, "all-linear", "none", 2, 0, "nf4", True, "bf16", "bf16"),
        ("zero2", "qwen3", 6, 8, "q_proj,v_proj", "non-reentrant", 4, 3, "nf4", False, "bf16", "bf16"),
        ("zero2", "qwen2", 7, 16, "all-linear", "reentrant", 2, 1, "fp4", True, "fp32", "fp32"),
        ("fsdp", "llama", 1, 8, "all-linear", "non-reentrant", 2, 1, "nf4", True, "bf16", "uint8"),
        ("zero2", "qwen2", 3, 8, "all-linear", "none", 3, 2, "fp4", False, "bf16", "uint8"),
        # Without prepare_model_for_kbit_training (trl's SFTTrainer skips it when the storage is
        # a float type): the norms, embedding and head stay bf16, one dtype with the storage.
        ("fsdp", "llama", 2, 16, "all-linear", "non-reentrant", 2, 1, "nf4", True, "bf16", "bf16", False),
        ("zero2", "qwen3", 0, 8, "all-linear", "none", 4, 3, "nf4", True, "bf16", "bf16", False),
        ("fsdp", "mistral", 5, 8, "all-linear", "reentrant", 3, 0, "fp4", False, "bf16", "bf16", False),
    ]
    pts = []
    for layout, mt, i, r, targets, ck, world, rank, qt, dq, compute, storage, *prepare in rows:
        p = L.qlora(mt, i, r, targets, qt, dq, checkpoint=ck, compute_dtype=compute, optimizer="adamw_torch_foreach", max_grad_norm=0.0,
                    prepare=prepare[0] if prepare else True)
        p["quant_storage"] = storage
        tag = " storage=uint8" if storage == "uint8" else ""  # name_of names a float storage
        name = f"{L.name_of(p, 'training')}{tag} {layout} x{world} rank{rank}"
        pts.append(dict(name=name, hf=p, layout=layout, world_size=world, rank=rank))
    return pts


def fsdp_qlora_models_grid():
    """FSDP-QLoRA of issue 30's models (`--fsdp-qlora-models`): `--lora-models`' 4-bit rows
    (adapters on nn.Linear modules; bitsandbytes quantizes only those, the MoE models' 3-D experts
    stay in the load dtype) loaded with bnb_4bit_quant_storage bf16, under fsdp and zero2:
    Phi-3, OLMo-2, Gemma 2, Gemma 3 text, Mixtral, Qwen2-MoE and gpt-oss, world 2-4, ranks 0 and
    the last, checkpointing off/non-reentrant/reentrant, nf4/fp4, double quant on/off; and three
    with bitsandbytes' default uint8 storage (Gemma 3 text, Mixtral, gpt-oss)."""
    import make_lora_grid as L
    att = "q_proj,k_proj,v_proj,o_proj"
    fam = lambda mt, i, r, t, ck: L.family_lora(mt, i, r, t, checkpoint=ck, dtype="bf16")
    q4s = lambda p, *a: dict(L.bnb_of(p, 4, *a), quant_storage="bf16")
    rows = [
        ("fsdp", q4s(fam("phi3", 4, 16, "all-linear", "reentrant")), 2, 1),
        ("zero2", q4s(fam("olmo2", 6, 4, "q_proj,v_proj", "none")), 4, 3),
        ("fsdp", q4s(fam("gemma2", 5, 8, None, "non-reentrant"), "fp4", False), 2, 0),
        ("fsdp", q4s(fam("gemma3_text", 7, 16, "k_proj,up_proj", "reentrant")), 3, 2),
        ("fsdp", q4s(L.moe_lora(0, 16, att, checkpoint="reentrant", dtype="bf16")), 2, 1),  # mixtral
        ("zero2", q4s(L.moe_lora(7, 8, "q_proj,v_proj", checkpoint="non-reentrant", dtype="bf16"), "fp4", False), 2, 0),  # qwen3_moe
        ("fsdp", q4s(L.gptoss_lora(4, 16, att, checkpoint="reentrant", dtype="bf16")), 2, 0),
        ("fsdp", q4s(L.moe_lora(12, 8, "q_proj,v_proj", checkpoint="reentrant", dtype="bf16")), 3, 2),  # qwen2_moe
        # bitsandbytes' default uint8 storage: FSDP2 all-gathers a unit of mixed dtypes as bytes.
        ("fsdp", L.bnb_of(fam("gemma3_text", 3, 8, "q_proj,v_proj", "non-reentrant"), 4), 2, 1),
        ("zero2", L.bnb_of(L.moe_lora(3, 8, att, checkpoint="reentrant", dtype="bf16"), 4, "fp4", False), 3, 2),  # mixtral
        ("fsdp", L.bnb_of(L.gptoss_lora(2, 8, "q_proj,v_proj", checkpoint="non-reentrant", dtype="bf16"), 4), 2, 0),
    ]
    return [dist_point(p, "training", layout, world, rank, L.name_of(p, "training")) for layout, p, world, rank in rows]


def lora_layouts_grid():
    """peft's LoRA of issue 30's models (`--lora-models`' targets: the families' projections,
    Phi-3's fused qkv_proj and gate_up_proj, the MoE models' attention and Qwen2-MoE's shared
    expert, and ParamWrapper on the experts' 3-D weights of grouped_mm models) under FSDP2's other
    options: hsdp (a (world / shard, shard) mesh), fully_shard on every 2 consecutive decoder
    layers (`unit` 2: three-layer models, fsdp and one zero2) or the root alone (`unit` 0), and
    reentrant checkpointing (use_reentrant=True) under fsdp and hsdp resharding after forward;
    and llama, qwen3 and mistral (make_lora_grid.py's lora shapes) under hsdp, and llama, qwen2,
    mistral and qwen3 with other units and reentrant checkpointing under fsdp; fp32 and bf16
    weights, r 4-16, world 2-6, ranks 0 and the last, training and a forward."""
    import make_hf_grid as G
    import make_lora_grid as L
    att = "q_proj,k_proj,v_proj,o_proj"
    mla = "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj"
    ex = "mlp.experts.gate_up_proj,mlp.experts.down_proj"
    fam = lambda mt, i, r, t, ck="none", dtype="bf16": L.family_lora(mt, i, r, t, checkpoint=ck, dtype=dtype)
    re = "reentrant"
    h2, h3 = dict(shard=2), dict(shard=3)
    # (layout, point, profile type, world, rank, FSDP2 options)
    rows = [
        # hsdp
        ("hsdp", fam("phi3", 0, 8, "qkv_proj,gate_up_proj"), "training", 4, 0, h2),
        ("hsdp", fam("gemma2", 3, 16, "all-linear", ck="non-reentrant", dtype="fp32"), "training", 4, 3, h2),
        ("hsdp", L.moe_lora(0, 8, att), "training", 4, 1, h2),  # mixtral grouped_mm balanced fp32
        ("hsdp", L.deepseek_lora(0, 8, mla), "training", 4, 2, h2),  # grouped_mm balanced sdpa fp32
        ("hsdp", L.moe_lora(15, 16, "all-linear"), "training", 6, 5, h3),  # qwen2_moe grouped_mm worst eager bf16
        ("hsdp", L.moe_param(6, 8, ex), "training", 4, 3, h2),  # qwen3_moe grouped_mm balanced fp32
        ("hsdp", fam("olmo2", 0, 8, "q_proj,v_proj"), "forward", 4, 1, h2),
        # fully_shard on every 2 decoder layers, or on the root alone
        ("fsdp", fam("olmo2", 2, 8, "all-linear"), "training", 2, 1, dict(unit=2)),
        ("fsdp", fam("gemma3_text", 2, 8, None, ck="non-reentrant", dtype="fp32"), "training", 3, 2, dict(unit=2)),
        ("fsdp", L.gptoss_lora(2, 16, att), "training", 2, 0, dict(unit=2)),  # grouped_mm worst bf16, 3 layers
        ("zero2", L.moe_lora(3, 8, "q_proj,v_proj", num_layers=3), "training", 2, 0, dict(unit=2)),  # mixtral grouped_mm worst bf16
        ("fsdp", fam("phi3", 4, 16, "all-linear", ck="non-reentrant"), "training", 3, 2, dict(unit=0)),
        ("fsdp", L.moe_lora(9, 8, att), "training", 2, 1, dict(unit=0)),  # qwen3_moe grouped_mm worst bf16
        ("fsdp", L.deepseek_lora(7, 8, "q_proj,kv_b_proj"), "training", 2, 0, dict(unit=0)),  # grouped_mm worst sdpa bf16
        ("fsdp", L.gptoss_lora(0, 8, "", ex), "training", 2, 1, dict(unit=0)),  # grouped_mm balanced fp32
        # reentrant checkpointing under fsdp and hsdp
        ("fsdp", fam("gemma2", 0, 8, None, ck=re), "training", 2, 0, {}),
        ("fsdp", fam("olmo2", 1, 16, "all-linear", ck=re, dtype="fp32"), "training", 3, 2, {}),
        ("fsdp", L.moe_lora(1, 16, att, checkpoint=re), "training", 2, 1, {}),  # mixtral eager balanced fp32
        ("fsdp", L.moe_lora(12, 8, "q_proj,v_proj", checkpoint=re), "training", 4, 3, {}),  # qwen2_moe grouped_mm balanced fp32
        ("fsdp", L.gptoss_lora(8, 8, att, checkpoint=re), "training", 2, 0, {}),  # batched_mm balanced fp32
        ("fsdp", L.moe_param(12, 8, ex, checkpoint=re), "training", 2, 1, {}),  # qwen2_moe grouped_mm balanced fp32
        ("hsdp", L.moe_lora(11, 8, att, checkpoint=re), "training", 4, 0, h2),  # qwen3_moe batched_mm balanced bf16
        ("hsdp", fam("gemma3_text", 3, 16, "all-linear", ck=re), "training", 4, 3, h2),
        ("hsdp", L.deepseek_lora(13, 8, mla, checkpoint=re), "training", 4, 1, h2),  # grouped_mm balanced sdpa fp32
        ("hsdp", fam("phi3", 1, 8, "qkv_proj", ck=re, dtype="fp32"), "training", 6, 5, h3),
        # the llama family under hsdp
        ("hsdp", L.lora("llama", 0, 8, "all-linear"), "training", 4, 0, h2),
        ("hsdp", L.lora("qwen3", 6, 16, "q_proj,v_proj", checkpoint=re), "training", 4, 3, h2),
        ("hsdp", L.lora("mistral", 2, 8, "all-linear", checkpoint="non-reentrant", dtype="fp32"), "training", 6, 5, h3),
        # the llama family with other units and reentrant checkpointing under fsdp
        ("fsdp", L.lora("llama", 2, 8, "all-linear"), "training", 2, 1, dict(unit=2)),
        ("zero2", L.lora("qwen2", 2, 16, "q_proj,v_proj", dtype="fp32"), "training", 2, 0, dict(unit=2)),
        ("fsdp", L.lora("mistral", 4, 8, "all-linear", checkpoint="non-reentrant"), "training", 2, 0, dict(unit=0)),
        ("fsdp", L.lora("llama", 3, 16, "all-linear", checkpoint=re), "training", 2, 1, {}),
        ("fsdp", L.lora("qwen3", 6, 8, "q_proj,v_proj", checkpoint=re, dtype="fp32"), "training", 4, 3, {}),
    ]
    return [dist_point(p, kind, layout, world, rank, L.names(p, kind), **o) for layout, p, kind, world, rank, o in rows]


def lora_mixed_precision_layouts_grid():
    """FSDP2's MixedPrecisionPolicy over peft's LoRA under hsdp (a (world / shard, shard) mesh,
    fully_shard per decoder layer): the llama family (make_lora_grid.py's lora shapes) and issue
    30's models (family_lora / moe_lora / gptoss_lora / deepseek_lora: the MoE models'
    attention, Qwen2-MoE's shared expert, Phi-3's fused projections); param_dtype bf16 with
    reduce_dtype fp32 or unset and reduce_dtype fp32 alone, over bf16 and fp32 weights, world
    4-6, ranks 0 and the last, checkpointing off and non-reentrant, training and a forward."""
    import make_lora_grid as L
    bf, pd, rd = dict(param_dtype="bf16", reduce_dtype="fp32"), dict(param_dtype="bf16"), dict(reduce_dtype="fp32")
    h2, h3 = dict(shard=2), dict(shard=3)
    att = "q_proj,k_proj,v_proj,o_proj"
    mla = "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj"
    fam = lambda mt, i, r, t, ck="none", dtype="bf16": L.family_lora(mt, i, r, t, checkpoint=ck, dtype=dtype)
    # (point, profile type, world, rank, mesh, policy)
    rows = [
        (L.lora("llama", 0, 8, "all-linear"), "training", 4, 0, h2, bf),
        (L.lora("qwen3", 6, 16, "q_proj,v_proj", checkpoint="non-reentrant", dtype="fp32"), "training", 4, 3, h2, pd),
        (L.moe_lora(1, 16, att, checkpoint="non-reentrant", dtype="bf16"), "training", 4, 3, h2, bf),  # mixtral eager balanced
        (L.moe_lora(9, 8, "q_proj,v_proj"), "training", 4, 0, h2, bf),  # qwen3_moe grouped_mm worst bf16
        (fam("phi3", 1, 16, "qkv_proj,gate_up_proj"), "training", 4, 3, h2, bf),
        (L.moe_lora(15, 16, "all-linear"), "training", 6, 5, h3, pd),  # qwen2_moe grouped_mm worst eager bf16
        (fam("olmo2", 2, 8, "all-linear", ck="non-reentrant"), "training", 4, 0, h2, rd),
        (L.gptoss_lora(2, 16, att), "training", 4, 1, h2, bf),  # grouped_mm worst bf16
        (fam("gemma2", 3, 16, "all-linear", dtype="fp32"), "training", 6, 5, h3, pd),
        (L.deepseek_lora(0, 8, mla, checkpoint="non-reentrant", dtype="bf16"), "training", 4, 3, h2, bf),  # grouped_mm balanced sdpa
        (L.lora("mistral", 2, 8, "all-linear"), "training", 6, 5, h3, rd),
        (fam("gemma3_text", 0, 8, None), "training", 4, 2, h2, bf),
        (L.lora("qwen2", 3, 8, "q_proj,v_proj", dtype="fp32"), "training", 4, 1, h2, bf),
        (fam("gemma2", 1, 8, None), "forward", 4, 1, h2, bf),
    ]
    return [dist_point(p, kind, "hsdp", world, rank, L.names(p, kind), **mesh, **pol) for p, kind, world, rank, mesh, pol in rows]


def lora_extras_layouts_grid():
    """peft's modules_to_save (trainable copies of lm_head and/or embed_tokens) and trained biases
    (bias all / lora_only: gpt-oss's attention and router, Qwen2-MoE's and Qwen2's q/k/v) under
    FSDP2's other options: hsdp, fully_shard on every 2 decoder layers (three-layer models) or the
    root alone, and reentrant checkpointing under fsdp and hsdp; the llama family and issue 30's
    models, fp32 weights wherever biases train or the root holds the adapters (FSDP2's uniform
    dtype over a unit's trainable parameters), bf16 elsewhere, world 2-6, ranks 0 and the last,
    training."""
    import make_lora_grid as L
    att = "q_proj,k_proj,v_proj,o_proj"
    h2, h3 = dict(shard=2), dict(shard=3)
    re = "reentrant"
    fam = lambda mt, i, r, t, **o: L.family_lora(mt, i, r, t, **o)
    # (layout, point, world, rank, FSDP2 options)
    rows = [
        ("hsdp", fam("olmo2", 0, 8, "q_proj,v_proj", modules_to_save="lm_head"), 4, 0, h2),
        ("hsdp", L.gptoss_lora(0, 8, "q_proj,v_proj", lora_bias="all"), 4, 3, h2),  # grouped_mm balanced fp32
        ("fsdp", fam("phi3", 2, 8, "qkv_proj", modules_to_save="lm_head"), 2, 1, dict(unit=2)),
        ("fsdp", L.lora("qwen2", 3, 8, "q_proj,v_proj", lora_bias="all", dtype="fp32"), 2, 1, dict(unit=0)),
        ("fsdp", L.moe_lora(1, 16, att, checkpoint=re, modules_to_save="lm_head"), 2, 1, {}),  # mixtral eager balanced fp32
        ("fsdp", L.moe_lora(16, 8, att, checkpoint=re, lora_bias="all"), 3, 2, {}),  # qwen2_moe eager worst fp32
        ("hsdp", L.moe_lora(12, 8, "q_proj,v_proj", lora_bias="lora_only"), 4, 1, h2),  # qwen2_moe grouped_mm balanced fp32
        ("fsdp", L.moe_lora(6, 8, att, modules_to_save="lm_head"), 2, 0, dict(unit=0)),  # qwen3_moe grouped_mm balanced fp32
        ("hsdp", L.gptoss_lora(8, 8, att, checkpoint=re, lora_bias="lora_only"), 4, 0, h2),  # batched_mm balanced fp32
        ("fsdp", L.gptoss_lora(2, 8, att, lora_bias="all", dtype="fp32"), 3, 2, dict(unit=2)),  # grouped_mm worst, 3 layers
        ("hsdp", L.lora("llama", 0, 8, "all-linear", modules_to_save="embed_tokens,lm_head"), 6, 5, h3),
        ("hsdp", fam("phi3", 3, 8, "all-linear", checkpoint=re, modules_to_save="lm_head"), 4, 3, h2),
        ("zero2", L.moe_lora(3, 8, "q_proj,v_proj", num_layers=3, modules_to_save="lm_head"), 2, 0, dict(unit=2)),  # mixtral grouped_mm worst bf16
        ("fsdp", L.lora("qwen2", 2, 16, "all-linear", checkpoint=re, lora_bias="lora_only", dtype="fp32"), 2, 0, {}),
    ]
    return [dist_point(p, "training", layout, world, rank, L.names(p, "training"), **o) for layout, p, world, rank, o in rows]


def fsdp_qlora_layouts_grid():
    """FSDP-QLoRA (bitsandbytes 4-bit stored as bf16, bnb_4bit_quant_storage; prepared) under
    FSDP2's other options: hsdp, fully_shard on every 2 decoder layers (three-layer models) or the
    root alone, and reentrant checkpointing under hsdp; the llama family (make_lora_grid.py's qlora
    shapes) and issue 30's models (`--fsdp-qlora-models`' rows: adapters on nn.Linear modules),
    nf4/fp4, double quant on/off, compute (and storage) bf16 and one fp32, world 2-6, ranks 0 and
    the last, training."""
    import make_lora_grid as L
    att = "q_proj,k_proj,v_proj,o_proj"
    h2, h3 = dict(shard=2), dict(shard=3)
    re = "reentrant"
    opt = dict(optimizer="adamw_torch_foreach", max_grad_norm=0.0)
    fam = lambda mt, i, r, t, ck: L.family_lora(mt, i, r, t, checkpoint=ck, dtype="bf16")
    q4s = lambda p, *a: dict(L.bnb_of(p, 4, *a), quant_storage="bf16")
    ql = lambda mt, i, r, t, qt, dq, ck, dt="bf16": dict(L.qlora(mt, i, r, t, qt, dq, checkpoint=ck, compute_dtype=dt, **opt), quant_storage=dt)
    # (layout, point, world, rank, FSDP2 options)
    rows = [
        ("hsdp", ql("llama", 0, 8, "all-linear", "nf4", True, "none"), 4, 0, h2),
        ("fsdp", ql("mistral", 2, 8, "all-linear", "nf4", True, "non-reentrant"), 2, 1, dict(unit=2)),
        ("fsdp", q4s(L.moe_lora(9, 8, "q_proj,v_proj", dtype="bf16")), 2, 0, dict(unit=0)),  # qwen3_moe grouped_mm worst
        ("hsdp", q4s(L.moe_lora(3, 8, att, dtype="bf16")), 4, 1, h2),  # mixtral grouped_mm worst
        ("hsdp", q4s(fam("gemma3_text", 3, 8, "q_proj,v_proj", re)), 4, 0, h2),
        ("fsdp", q4s(fam("olmo2", 2, 8, "all-linear", "non-reentrant")), 3, 2, dict(unit=2)),
        ("hsdp", ql("qwen3", 6, 16, "q_proj,v_proj", "fp4", False, "non-reentrant"), 6, 5, h3),
        ("hsdp", q4s(L.moe_lora(12, 8, "q_proj,v_proj", checkpoint=re, dtype="bf16")), 6, 5, h3),  # qwen2_moe grouped_mm balanced
        ("fsdp", ql("qwen3", 1, 16, "all-linear", "nf4", False, "non-reentrant", "fp32"), 3, 2, dict(unit=0)),  # compute and storage fp32
        ("hsdp", q4s(fam("phi3", 4, 16, "all-linear", "non-reentrant")), 4, 3, h2),
        ("hsdp", q4s(L.gptoss_lora(4, 8, "q_proj,v_proj", dtype="bf16"), "fp4", False), 4, 2, h2),  # grouped_mm balanced
        ("zero2", ql("qwen2", 2, 16, "q_proj,v_proj", "nf4", False, "none"), 3, 2, dict(unit=2)),
        ("fsdp", ql("llama", 3, 8, "all-linear", "fp4", True, "none"), 2, 0, dict(unit=0)),
        ("fsdp", q4s(fam("gemma2", 0, 8, None, "none")), 2, 1, dict(unit=0)),
        ("zero2", q4s(L.moe_lora(15, 8, "all-linear", dtype="bf16")), 2, 1, dict(unit=0)),  # qwen2_moe grouped_mm worst eager
        ("hsdp", ql("mistral", 4, 8, "all-linear", "nf4", True, re), 4, 3, h2),
    ]
    return [dist_point(p, "training", layout, world, rank, L.names(p, "training"), **o) for layout, p, world, rank, o in rows]


def dist_point(p, kind, layout, world, rank, name, **fsdp):
    """A --families / --moe point: the measure_hf.py point with the layout's optimizer (the
    Trainer's fused AdamW and clipping under DDP; foreach AdamW, no clipping, elsewhere), and
    FSDP2's options where given (`param_dtype`, `reduce_dtype`, `unit`, hsdp's `shard`: see
    fsdp_kwargs and lora_wrapper), named after the layout."""
    if kind == "training" and layout != "ddp":
        p = dict(p, optimizer="adamw_torch_foreach", max_grad_norm=0.0)
    tags = "".join(f" {k}={v}" for k, v in fsdp.items())
    return dict(name=f"{name} {layout}{tags} x{world} rank{rank}", hf=p, profile_type=kind, layout=layout, world_size=world, rank=rank, **fsdp)


def aux_loss_grid():
    """The router's auxiliary loss (output_router_logits, make_aux_loss_grid.py's rows: Mixtral,
    Qwen3-MoE, Qwen2-MoE with its shared expert, gpt-oss; coefficients 0.001 and 0.02, the
    collator's all-ones mask on three) under ddp, zero1, zero2 and fsdp, world 2-4, ranks 0 and
    the last, training (checkpointing off, non-reentrant, reentrant), forward and inference."""
    import make_aux_loss_grid as A
    import make_gptoss_grid as GO
    import make_moe_grid as MG
    moe = lambda i: A.with_loss(MG.point(A.POINTS[i][0]), A.POINTS[i][1], A.POINTS[i][2])
    go = lambda i: A.with_loss(GO.point(A.GPT_OSS[i][0]), A.GPT_OSS[i][1], A.GPT_OSS[i][2])
    # (layout, point, profile type, checkpoint, world, rank)
    rows = [
        ("ddp", moe(0), "training", "none", 2, 0),  # mixtral grouped_mm balanced fp32
        ("ddp", moe(6), "training", "non-reentrant", 2, 1),  # qwen2_moe grouped_mm balanced fp32
        ("ddp", go(0), "forward", "none", 2, 1),  # gpt_oss grouped_mm balanced fp32
        ("zero1", moe(3), "training", "none", 2, 1),  # qwen3_moe grouped_mm worst bf16
        ("zero1", go(1), "training", "none", 2, 0),  # gpt_oss eager worst bf16
        ("zero2", moe(1), "training", "none", 3, 2),  # mixtral eager worst bf16
        ("zero2", moe(8), "training", "none", 2, 0),  # qwen2_moe batched_mm balanced bf16, mask
        ("fsdp", moe(4), "training", "none", 3, 2),  # qwen3_moe eager balanced fp32
        ("fsdp", go(2), "training", "none", 4, 3),  # gpt_oss batched_mm worst fp32, mask
        ("fsdp", moe(2), "inference", "none", 2, 0),  # mixtral batched_mm balanced bf16, mask
        ("fsdp", moe(7), "training", "reentrant", 2, 1),  # qwen2_moe eager worst bf16
        ("fsdp", go(0), "training", "non-reentrant", 2, 0),  # gpt_oss grouped_mm balanced fp32
    ]
    pts = []
    for layout, p, kind, ck, world, rank in rows:
        p = dict(p, checkpoint=ck)
        pts.append(dist_point(p, kind, layout, world, rank, A.name_of(p, kind)))
    return pts


def aux_loss_lora_grid():
    """The router's auxiliary loss beside peft's LoRA and 4-bit QLoRA under ddp
    (make_aux_loss_grid.py --lora's rows: Mixtral, Qwen3-MoE, Qwen2-MoE with its shared expert
    adapted, gpt-oss; the attention's linears, the router's weight through ParamWrapper, nf4 loads
    prepared and not), world 2-3, ranks 0 and the last, checkpointing off, non-reentrant and
    reentrant, training and a forward."""
    import make_aux_loss_grid as A
    rows = [
        ("ddp", A.adapted(0, 8, "q_proj,v_proj"), "training", 2, 0),  # mixtral grouped_mm balanced fp32
        ("ddp", A.adapted(4, 4, A.ATT, "mlp.gate.weight", checkpoint="non-reentrant"), "training", 2, 1),  # qwen3_moe eager balanced fp32
        ("ddp", A.adapted(6, 8, "q_proj,v_proj,gate_proj,up_proj,down_proj"), "training", 3, 2),  # qwen2_moe grouped_mm balanced fp32
        ("ddp", A.adapted(0, 8, "q_proj,v_proj", gpt_oss=True, checkpoint="reentrant"), "training", 2, 1),  # gpt_oss grouped_mm balanced fp32
        ("ddp", A.four_bit(A.adapted(2, 8, A.ATT, checkpoint="non-reentrant"), "bf16", True), "training", 2, 0),  # mixtral batched_mm, mask ones
        ("ddp", A.four_bit(A.adapted(5, 16, "q_proj,v_proj"), "fp32", False), "forward", 2, 1),  # qwen3_moe batched_mm worst, mask ones
    ]
    return [dist_point(p, kind, layout, world, rank, A.lora_name_of(p, kind)) for layout, p, kind, world, rank in rows]


def mixed_precision_grid():
    """FSDP2's MixedPrecisionPolicy under fsdp and zero2: param_dtype bf16 over fp32 weights with
    reduce_dtype fp32 or unset (the param dtype), and reduce_dtype fp32 alone over bf16 weights, on
    Phi-3, OLMo-2, Gemma 2, Gemma 3 text, Mixtral, Qwen3-MoE and DeepSeek-V3, world 2-4, ranks 0
    and the last, training and a forward."""
    import make_deepseek_grid as DS
    import make_family_grid as F
    import make_gptoss_grid as GO
    import make_moe_grid as MG
    fam = lambda mt, i, dtype="fp32", ck="none": F.point(mt, i, checkpoint=ck, dtype=dtype, attn="eager" if i % 2 else "sdpa")
    gem = lambda mt, i, dtype="fp32", ck="none": F.gemma_point(mt, i, "below", checkpoint=ck, dtype=dtype)
    moe = lambda i, ck="none": dict(MG.point(MG.POINTS[i]), checkpoint=ck)
    bf = dict(param_dtype="bf16", reduce_dtype="fp32")
    # (layout, point, name_of, profile type, world, rank, policy)
    rows = [
        ("fsdp", fam("phi3", 0), F.name_of, "training", 2, 0, bf),
        ("fsdp", gem("gemma2", 2), F.name_of, "training", 3, 2, dict(param_dtype="bf16")),
        ("zero2", fam("olmo2", 1, ck="non-reentrant"), F.name_of, "training", 4, 3, bf),
        ("fsdp", gem("gemma3_text", 3), F.name_of, "forward", 2, 1, bf),
        ("fsdp", fam("olmo2", 2, dtype="bf16"), F.name_of, "training", 2, 1, dict(reduce_dtype="fp32")),
        ("fsdp", moe(0), MG.name_of, "training", 2, 1, bf),  # mixtral grouped_mm balanced fp32
        ("zero2", moe(8), MG.name_of, "training", 3, 2, dict(param_dtype="bf16")),  # qwen3_moe batched_mm worst fp32
        ("fsdp", DS.point(DS.POINTS[0]), DS.name_of, "training", 3, 2, bf),
        ("zero2", gem("gemma3_text", 1), F.name_of, "training", 2, 0, bf),
        # OLMo-2's norms multiply their weight by fp32 activations: with grad_dtype None in
        # backward those gradients stay fp32, a bf16 + fp32 reduce-scatter group.
        ("fsdp", fam("olmo2", 0), F.name_of, "training", 3, 2, bf),
        ("zero2", fam("olmo2", 3, dtype="bf16"), F.name_of, "training", 2, 0, dict(reduce_dtype="fp32")),
        # Its backward peak is layer 0's all-gather, not the root's reduce-scatter.
        ("fsdp", fam("olmo2", 3, dtype="bf16"), F.name_of, "training", 4, 3, dict(reduce_dtype="fp32")),
        # cast_forward_inputs in the recomputation too (OLMo-2's fp32 cos and sin).
        ("fsdp", fam("olmo2", 1, ck="non-reentrant"), F.name_of, "training", 2, 1, dict(param_dtype="bf16")),
        ("fsdp", moe(9), MG.name_of, "training", 4, 3, dict(reduce_dtype="fp32")),  # qwen3_moe grouped_mm worst bf16
        ("fsdp", GO.point(GO.POINTS[0]), GO.name_of, "training", 2, 0, bf),
        ("zero2", moe(12), MG.name_of, "training", 4, 3, bf),  # qwen2_moe grouped_mm balanced fp32
    ]
    return [dist_point(p, kind, layout, world, rank, name(p, kind), **pol) for layout, p, name, kind, world, rank, pol in rows]


def lora_mixed_precision_grid():
    """peft's LoRA under FSDP2's MixedPrecisionPolicy (fsdp and zero2): llama, mistral, qwen2 and
    qwen3 (make_lora_grid.py's lora shapes) on bf16 weights (fp32 adapters beside them in every
    unit) and on fp32 weights, param_dtype bf16 with reduce_dtype fp32 or unset, and reduce_dtype
    fp32 alone, r 8-32, world 2-4, ranks 0 and the last, checkpointing off and non-reentrant,
    training and a forward."""
    import make_lora_grid as L
    bf, pd, rd = dict(param_dtype="bf16", reduce_dtype="fp32"), dict(param_dtype="bf16"), dict(reduce_dtype="fp32")
    att = "q_proj,k_proj,v_proj,o_proj"
    # (layout, model_type, shape, r, targets, checkpoint, weights, profile type, world, rank, policy)
    rows = [
        ("fsdp", "llama", 0, 8, "all-linear", "none", "bf16", "training", 2, 0, bf),
        ("fsdp", "llama", 3, 16, "q_proj,v_proj", "non-reentrant", "bf16", "training", 2, 1, bf),
        ("fsdp", "qwen3", 6, 32, "all-linear", "non-reentrant", "bf16", "training", 4, 3, pd),
        ("fsdp", "mistral", 1, 8, "all-linear", "none", "fp32", "training", 3, 2, bf),
        ("fsdp", "qwen2", 2, 16, att, "none", "bf16", "training", 4, 0, rd),
        ("fsdp", "mistral", 7, 8, "gate_proj,up_proj,down_proj", "non-reentrant", "bf16", "training", 2, 0, pd),
        ("fsdp", "llama", 2, 16, "all-linear", "none", "bf16", "forward", 2, 1, bf),
        ("zero2", "llama", 4, 16, "all-linear", "none", "bf16", "training", 2, 0, bf),
        ("zero2", "qwen2", 7, 8, "all-linear", "non-reentrant", "fp32", "training", 4, 3, pd),
        ("zero2", "mistral", 5, 8, "q_proj,v_proj", "none", "bf16", "training", 3, 2, bf),
        ("zero2", "qwen3", 1, 16, "all-linear", "none", "fp32", "training", 2, 1, bf),
        ("zero2", "qwen2", 6, 8, att, "non-reentrant", "bf16", "training", 2, 1, rd),
    ]
    pts = []
    for layout, mt, i, r, targets, ck, dtype, kind, world, rank, pol in rows:
        p = L.lora(mt, i, r, targets, checkpoint=ck, dtype=dtype)
        pts.append(dist_point(p, kind, layout, world, rank, L.names(p, kind), **pol))
    return pts


def lora_mixed_precision_models_grid():
    """lora_mixed_precision_grid on issue 30's models: peft's adapters (make_lora_grid.py's
    family_lora / moe_lora / gptoss_lora / deepseek_lora shapes: the attention of the MoE models,
    Qwen2-MoE's shared expert, Phi-3's fused projections) under FSDP2's MixedPrecisionPolicy
    (fsdp and zero2), bf16 and fp32 weights, every model, world 2-4, ranks 0 and the last,
    checkpointing off and non-reentrant, training and a forward."""
    import make_lora_grid as L
    bf, pd, rd = dict(param_dtype="bf16", reduce_dtype="fp32"), dict(param_dtype="bf16"), dict(reduce_dtype="fp32")
    att = "q_proj,k_proj,v_proj,o_proj"
    mla = "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj"
    fam = lambda mt, i, r, t, ck="none", dtype="bf16": L.family_lora(mt, i, r, t, checkpoint=ck, dtype=dtype)
    # (layout, point, profile type, world, rank, policy)
    rows = [
        ("fsdp", fam("phi3", 1, 16, "qkv_proj,gate_up_proj"), "training", 2, 0, bf),
        ("zero2", fam("olmo2", 2, 8, "all-linear", ck="non-reentrant"), "training", 4, 3, bf),
        ("fsdp", fam("gemma2", 3, 16, "all-linear", dtype="fp32"), "training", 3, 2, pd),
        ("fsdp", fam("gemma3_text", 0, 8, None, ck="non-reentrant"), "training", 2, 1, bf),
        ("fsdp", L.moe_lora(1, 16, att, checkpoint="non-reentrant", dtype="bf16"), "training", 3, 2, bf),  # mixtral eager balanced
        ("zero2", L.moe_lora(9, 8, "q_proj,v_proj"), "training", 2, 0, bf),  # qwen3_moe grouped_mm worst bf16
        ("fsdp", L.moe_lora(15, 16, "all-linear"), "training", 4, 3, pd),  # qwen2_moe grouped_mm worst eager bf16
        ("fsdp", L.gptoss_lora(2, 16, att), "training", 2, 1, bf),  # grouped_mm worst bf16
        ("zero2", L.deepseek_lora(0, 8, mla, checkpoint="non-reentrant", dtype="bf16"), "training", 4, 3, bf),  # grouped_mm balanced sdpa
        ("fsdp", fam("olmo2", 1, 8, "q_proj,v_proj", dtype="bf16"), "training", 2, 1, rd),
        ("fsdp", L.moe_lora(6, 8, att), "training", 2, 0, bf),  # qwen3_moe grouped_mm balanced fp32
        ("fsdp", fam("gemma2", 1, 8, None), "forward", 2, 1, bf),
    ]
    return [dist_point(p, kind, layout, world, rank, L.names(p, kind), **pol) for layout, p, kind, world, rank, pol in rows]


def mixed_precision_pairs_grid():
    """FSDP2's MixedPrecisionPolicy together with hsdp (a (world / shard, shard) mesh) on the
    families and the MoE models, and together with the router's auxiliary loss
    (output_router_logits, make_aux_loss_grid.py's rows: Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss)
    under fsdp and zero2; bf16 over fp32 weights with reduce_dtype fp32 or unset, reduce_dtype
    fp32 alone over bf16 weights, world 2-6, ranks 0 and the last, training, checkpointing off and
    non-reentrant."""
    import make_aux_loss_grid as A
    import make_deepseek_grid as DS
    import make_family_grid as F
    import make_gptoss_grid as GO
    import make_moe_grid as MG
    fam = lambda mt, i, dtype="fp32", ck="none": F.point(mt, i, checkpoint=ck, dtype=dtype, attn="eager" if i % 2 else "sdpa")
    gem = lambda mt, i, dtype="fp32", ck="none": F.gemma_point(mt, i, "below", checkpoint=ck, dtype=dtype)
    moe = lambda i, ck="none": dict(MG.point(MG.POINTS[i]), checkpoint=ck)
    aux = lambda i, ck="none": dict(A.with_loss(MG.point(A.POINTS[i][0]), A.POINTS[i][1], A.POINTS[i][2]), checkpoint=ck)
    go_aux = lambda i, ck="none": dict(A.with_loss(GO.point(A.GPT_OSS[i][0]), A.GPT_OSS[i][1], A.GPT_OSS[i][2]), checkpoint=ck)
    bf, pd, rd = dict(param_dtype="bf16", reduce_dtype="fp32"), dict(param_dtype="bf16"), dict(reduce_dtype="fp32")
    # (layout, point, name_of, world, rank, FSDP2 options)
    rows = [
        ("hsdp", gem("gemma3_text", 3), F.name_of, 4, 0, dict(shard=2, **bf)),
        ("hsdp", fam("phi3", 0, ck="non-reentrant"), F.name_of, 4, 3, dict(shard=2, **pd)),
        ("hsdp", fam("olmo2", 2, dtype="bf16"), F.name_of, 4, 1, dict(shard=2, **rd)),
        ("hsdp", gem("gemma2", 1), F.name_of, 6, 5, dict(shard=3, **bf)),
        ("hsdp", moe(6), MG.name_of, 4, 3, dict(shard=2, **bf)),  # qwen3_moe grouped_mm balanced fp32
        ("hsdp", moe(0, ck="non-reentrant"), MG.name_of, 4, 0, dict(shard=2, **pd)),  # mixtral grouped_mm balanced fp32
        ("hsdp", moe(9), MG.name_of, 4, 2, dict(shard=2, **rd)),  # qwen3_moe grouped_mm worst bf16
        ("hsdp", GO.point(GO.POINTS[2]), GO.name_of, 4, 3, dict(shard=2, **bf)),
        ("hsdp", DS.point(DS.POINTS[0]), DS.name_of, 4, 1, dict(shard=2, **bf)),
        # The router's loss (mixtral, qwen3_moe, qwen2_moe, gpt_oss).
        ("fsdp", aux(0), A.name_of, 2, 1, bf),  # mixtral grouped_mm balanced fp32
        ("zero2", aux(3), A.name_of, 3, 2, rd),  # qwen3_moe grouped_mm worst bf16
        ("fsdp", aux(6, ck="non-reentrant"), A.name_of, 4, 3, bf),  # qwen2_moe grouped_mm balanced fp32
        ("fsdp", go_aux(0), A.name_of, 2, 0, pd),  # grouped_mm balanced fp32
        ("zero2", aux(8), A.name_of, 2, 0, rd),  # qwen2_moe batched_mm balanced bf16, mask
        ("fsdp", go_aux(2), A.name_of, 4, 3, bf),  # batched_mm worst fp32, mask
        ("zero2", aux(4), A.name_of, 3, 0, pd),  # qwen3_moe eager balanced fp32
    ]
    return [dist_point(p, "training", layout, world, rank, name(p, "training"), **o) for layout, p, name, world, rank, o in rows]


def reentrant_mixed_precision_grid():
    """Reentrant checkpointing (use_reentrant=True) together with FSDP2's MixedPrecisionPolicy
    under FSDP2 resharding after forward (fsdp per decoder layer), on the families and the MoE
    models (full weights), bf16 over fp32 weights with reduce_dtype fp32 or unset and reduce_dtype
    fp32 alone over bf16 weights, world 2-4, ranks 0 and the last, training."""
    import make_deepseek_grid as DS
    import make_family_grid as F
    import make_gptoss_grid as GO
    import make_moe_grid as MG
    ck = "reentrant"
    fam = lambda mt, i, dtype="fp32": F.point(mt, i, checkpoint=ck, dtype=dtype, attn="eager" if i % 2 else "sdpa")
    gem = lambda mt, i, dtype="fp32": F.gemma_point(mt, i, "below", checkpoint=ck, dtype=dtype)
    moe = lambda i: dict(MG.point(MG.POINTS[i]), checkpoint=ck)
    bf, pd, rd = dict(param_dtype="bf16", reduce_dtype="fp32"), dict(param_dtype="bf16"), dict(reduce_dtype="fp32")
    # (point, name_of, world, rank, policy)
    rows = [
        (fam("phi3", 0), F.name_of, 2, 0, bf),
        (fam("olmo2", 1), F.name_of, 3, 2, pd),  # fp32 cos/sin cast outside the checkpoint
        (fam("olmo2", 2, dtype="bf16"), F.name_of, 4, 3, rd),
        (gem("gemma3_text", 3), F.name_of, 2, 1, bf),
        (moe(1), MG.name_of, 2, 1, bf),  # mixtral eager balanced fp32
        (moe(9), MG.name_of, 4, 0, rd),  # qwen3_moe grouped_mm worst bf16
        (moe(12), MG.name_of, 3, 2, pd),  # qwen2_moe grouped_mm balanced fp32
        (dict(GO.point(GO.POINTS[0]), checkpoint=ck), GO.name_of, 2, 0, bf),
    ]
    return [dist_point(p, "training", "fsdp", world, rank, name(p, "training"), **o) for p, name, world, rank, o in rows]


def reentrant_grid():
    """Reentrant checkpointing (use_reentrant=True, transformers' gradient_checkpointing_enable
    default) under FSDP2 resharding after forward: fsdp per decoder layer and hsdp (shard 2), on
    the families and the MoE models, world 2-4, ranks 0 and the last, training."""
    import make_deepseek_grid as DS
    import make_family_grid as F
    import make_gptoss_grid as GO
    import make_moe_grid as MG
    ck = "reentrant"
    fam = lambda mt, i, dtype="fp32": F.point(mt, i, checkpoint=ck, dtype=dtype, attn="eager" if i % 2 else "sdpa")
    gem = lambda mt, i, dtype="fp32": F.gemma_point(mt, i, "below", checkpoint=ck, dtype=dtype)
    moe = lambda i: dict(MG.point(MG.POINTS[i]), checkpoint=ck)
    # (layout, point, name_of, world, rank, FSDP2 options)
    rows = [
        ("fsdp", fam("phi3", 0), F.name_of, 2, 0, {}),
        ("fsdp", fam("olmo2", 2, dtype="bf16"), F.name_of, 4, 3, {}),
        ("hsdp", gem("gemma3_text", 3), F.name_of, 4, 0, dict(shard=2)),
        ("fsdp", gem("gemma2", 2), F.name_of, 3, 2, {}),
        ("fsdp", moe(1), MG.name_of, 2, 1, {}),  # mixtral eager balanced fp32
        ("hsdp", moe(7), MG.name_of, 4, 3, dict(shard=2)),  # qwen3_moe eager balanced bf16
        ("fsdp", moe(12), MG.name_of, 3, 2, {}),  # qwen2_moe grouped_mm balanced fp32
        ("fsdp", dict(GO.point(GO.POINTS[1]), checkpoint=ck), GO.name_of, 2, 0, {}),
        ("fsdp", dict(DS.point(DS.POINTS[0]), checkpoint=ck), DS.name_of, 3, 2, {}),
    ]
    return [dist_point(p, "training", layout, world, rank, name(p, "training"), **o) for layout, p, name, world, rank, o in rows]


def units_grid():
    """FSDP2 on units other than each decoder layer (fully_shard on every `unit` consecutive
    layers as one group, or on the root alone: `unit` 0) under fsdp and zero2, and hsdp (a
    (world / 2, 2) mesh: sharded over 2 ranks, replicated over the rest), on the families and the
    MoE models, world 2-4, ranks 0 and the last, training and an inference point."""
    import make_deepseek_grid as DS
    import make_family_grid as F
    import make_gptoss_grid as GO
    import make_moe_grid as MG
    fam = lambda mt, i, dtype="fp32", ck="none", **o: F.point(mt, i, checkpoint=ck, dtype=dtype, attn="eager" if i % 2 else "sdpa", **o)
    gem = lambda mt, i, dtype="fp32", ck="none": F.gemma_point(mt, i, "below", checkpoint=ck, dtype=dtype)
    moe = lambda i, ck="none", **o: dict(MG.point(MG.POINTS[i]), checkpoint=ck, **o)
    # (layout, point, name_of, profile type, world, rank, FSDP2 options)
    rows = [
        ("fsdp", fam("phi3", 2), F.name_of, "training", 2, 0, dict(unit=2)),
        ("zero2", fam("olmo2", 0, num_layers=3), F.name_of, "training", 2, 1, dict(unit=2)),
        ("fsdp", gem("gemma2", 0), F.name_of, "training", 3, 2, dict(unit=0)),
        ("fsdp", moe(1, num_layers=3), MG.name_of, "training", 4, 3, dict(unit=2)),  # mixtral eager balanced fp32
        ("fsdp", moe(9), MG.name_of, "training", 2, 0, dict(unit=0)),  # qwen3_moe grouped_mm worst bf16
        ("zero2", moe(7), MG.name_of, "training", 3, 0, dict(unit=0)),  # qwen3_moe eager balanced bf16
        ("hsdp", gem("gemma3_text", 3, ck="non-reentrant"), F.name_of, "training", 4, 0, dict(shard=2)),
        ("hsdp", moe(6), MG.name_of, "training", 4, 3, dict(shard=2)),  # qwen3_moe grouped_mm balanced fp32
        ("hsdp", GO.point(GO.POINTS[2]), GO.name_of, "training", 4, 3, dict(shard=2)),
        ("hsdp", DS.point(DS.POINTS[2]), DS.name_of, "inference", 4, 0, dict(shard=2)),
    ]
    return [dist_point(p, kind, layout, world, rank, name(p, kind), **o) for layout, p, name, kind, world, rank, o in rows]


def lora_extras_grid():
    """peft's modules_to_save (ModulesToSaveWrapper: trainable copies of lm_head and/or
    embed_tokens) and bias all / lora_only (peft's LoraConfig(bias=...): the base biases named
    `*.bias` train -- gpt-oss's attention and router, Qwen2-MoE's q/k/v; the other models have
    none) under ddp, zero2 and fsdp, on the families and the MoE models (make_lora_grid.py's
    shapes), world 2-4, ranks 0 and the last, training and a forward."""
    import make_lora_grid as L
    att = "q_proj,k_proj,v_proj,o_proj"
    fam = lambda mt, i, r, t, **o: L.family_lora(mt, i, r, t, **o)
    # (layout, point, profile type, world, rank)
    rows = [
        ("ddp", fam("phi3", 0, 8, "qkv_proj", modules_to_save="lm_head", dtype="bf16"), "training", 2, 0),
        ("ddp", L.moe_lora(0, 8, "q_proj,v_proj", lora_bias="all"), "training", 2, 1),  # mixtral grouped_mm balanced fp32
        ("ddp", fam("olmo2", 1, 8, "all-linear", lora_bias="all", checkpoint="non-reentrant", dtype="bf16"), "training", 2, 1),
        ("fsdp", fam("olmo2", 2, 16, "q_proj,v_proj", modules_to_save="lm_head", dtype="bf16"), "training", 3, 2),
        ("fsdp", L.moe_lora(6, 8, att, lora_bias="all"), "training", 3, 2),  # qwen3_moe grouped_mm balanced fp32
        ("fsdp", fam("gemma3_text", 0, 8, None, lora_bias="all", dtype="bf16"), "forward", 2, 1),
        ("fsdp", L.gptoss_lora(0, 8, "q_proj,v_proj", modules_to_save="lm_head"), "training", 2, 0),
        ("zero2", fam("gemma2", 3, 8, "all-linear", lora_bias="all", dtype="bf16"), "training", 2, 1),
        ("zero2", L.moe_lora(12, 8, "q_proj,v_proj", modules_to_save="embed_tokens,lm_head"), "training", 4, 3),  # qwen2_moe
        ("zero2", L.deepseek_lora(0, 8, "q_a_proj,o_proj", lora_bias="all"), "training", 2, 0),
        # The models with biases peft's option reaches: gpt-oss's attention and router
        # (mlp.router.bias), Qwen2-MoE's q/k/v.
        ("ddp", L.gptoss_lora(0, 8, "q_proj,v_proj", lora_bias="all"), "training", 2, 1),  # grouped_mm balanced fp32
        # (FSDP2 over bf16 weights: the trained bf16 biases beside the fp32 adapters in one
        # fully_shard unit raise "FSDP expects uniform original parameter dtype"; fp32 here.)
        ("fsdp", L.gptoss_lora(3, 8, "q_proj,k_proj,v_proj,o_proj", lora_bias="lora_only", checkpoint="non-reentrant"), "training", 2, 0),  # eager worst fp32
        ("zero2", L.moe_lora(12, 8, "q_proj,v_proj", lora_bias="all"), "training", 3, 2),  # qwen2_moe grouped_mm balanced fp32
        ("fsdp", L.moe_lora(16, 8, att, lora_bias="lora_only", checkpoint="non-reentrant"), "training", 2, 1),  # qwen2_moe eager worst fp32
        ("ddp", L.moe_lora(14, 4, "v_proj,o_proj", lora_bias="lora_only"), "training", 4, 3),  # qwen2_moe batched_mm worst fp32
    ]
    return [dist_point(p, kind, layout, world, rank, L.names(p, kind)) for layout, p, kind, world, rank in rows]


def families_grid():
    """Phi-3, OLMo-2, Gemma 2 (eager: transformers refuses sdpa) and Gemma 3 text: each layout on two
    or more families, world 2-4, ranks 0 and the last (uneven shards: vocabularies 777 and 1000 over
    3 or 4 ranks), inference, forward and training, checkpointing off and non-reentrant."""
    import make_family_grid as F
    # (layout, family, shape, profile type, checkpoint, world, rank, dtype)
    rows = [
        ("ddp", "phi3", 0, "training", "none", 2, 0, "fp32"),
        ("ddp", "olmo2", 1, "training", "non-reentrant", 2, 1, "bf16"),
        ("ddp", "gemma2", 2, "training", "none", 4, 3, "fp32"),
        ("ddp", "gemma3_text", 3, "training", "non-reentrant", 2, 0, "bf16"),
        ("ddp", "phi3", 4, "forward", "none", 2, 1, "fp32"),
        ("ddp", "gemma3_text", 5, "inference", "none", 2, 0, "bf16"),
        ("fsdp", "phi3", 1, "training", "none", 3, 2, "fp32"),
        ("fsdp", "olmo2", 2, "training", "non-reentrant", 4, 3, "bf16"),
        ("fsdp", "gemma2", 0, "training", "none", 3, 2, "fp32"),
        ("fsdp", "gemma3_text", 6, "training", "non-reentrant", 4, 0, "bf16"),
        ("fsdp", "olmo2", 3, "inference", "none", 2, 0, "fp32"),
        ("fsdp", "gemma2", 4, "forward", "none", 2, 1, "bf16"),
        ("fsdp", "phi3", 7, "forward", "non-reentrant", 4, 3, "fp32"),
        ("zero2", "phi3", 5, "training", "none", 2, 0, "bf16"),
        ("zero2", "gemma3_text", 1, "training", "non-reentrant", 4, 3, "fp32"),
        ("zero1", "olmo2", 0, "training", "none", 2, 1, "fp32"),
        ("zero1", "gemma2", 6, "training", "non-reentrant", 4, 3, "bf16"),
    ]
    pts = []
    for layout, fam, i, kind, ck, world, rank, dtype in rows:
        if fam.startswith("gemma"):
            p = F.gemma_point(fam, i, "below", checkpoint=ck, dtype=dtype)
        else:
            p = F.point(fam, i, checkpoint=ck, dtype=dtype, attn="eager" if i % 2 else "sdpa")
        pts.append(dist_point(p, kind, layout, world, rank, F.name_of(p, kind)))
    return pts


def moe_grid():
    """Mixtral, Qwen3-MoE and Qwen2-MoE (make_moe_grid.py's rows: every experts implementation,
    balanced and worst routing, eager and sdpa, fp32 and bf16) under each layout, world 2-4, ranks
    0 and the last (experts not dividing among the ranks: 5 over 3, 6 over 4, 8 over 3), inference,
    forward and training, checkpointing off, non-reentrant and reentrant."""
    import make_moe_grid as G
    # (layout, row of G.POINTS, profile type, checkpoint, world, rank)
    rows = [
        ("ddp", 0, "training", "none", 2, 0),
        ("ddp", 7, "training", "none", 2, 1),
        ("ddp", 14, "training", "non-reentrant", 4, 3),
        ("ddp", 10, "training", "reentrant", 2, 0),
        ("ddp", 2, "forward", "none", 2, 0),
        ("ddp", 12, "inference", "none", 2, 1),
        ("fsdp", 1, "training", "none", 2, 1),
        ("fsdp", 6, "training", "none", 3, 2),
        ("fsdp", 15, "training", "non-reentrant", 4, 3),
        ("fsdp", 5, "inference", "none", 2, 0),
        ("fsdp", 8, "forward", "none", 4, 3),
        ("zero2", 9, "training", "none", 2, 0),
        ("zero2", 4, "training", "non-reentrant", 3, 2),
        ("zero1", 13, "training", "none", 2, 1),
        ("zero1", 3, "training", "none", 4, 3),
    ]
    pts = []
    for layout, i, kind, ck, world, rank in rows:
        p = dict(G.point(G.POINTS[i]), checkpoint=ck)
        pts.append(dist_point(p, kind, layout, world, rank, G.name_of(p, kind)))
    return pts


def qwen2_moe_sliding_grid():
    """Qwen2-MoE with use_sliding_window (make_qwen2_moe_sliding_grid.py's rows: layers 0, 2, ...
    below max_window_layers slide; windows shorter and longer than the context, max_window_layers
    cutting the stack, above it and 0, one layer: every layer sliding) under each layout as --moe, world 2-4, ranks 0 and the
    last (experts not dividing among the ranks: 8 over 3, 6 over 4), training (and inference,
    forward), checkpointing off and non-reentrant."""
    import make_qwen2_moe_sliding_grid as S
    # (layout, row of S.POINTS, profile type, checkpoint, world, rank)
    rows = [
        ("ddp", 0, "training", "none", 2, 0),
        ("ddp", 2, "training", "non-reentrant", 2, 1),
        ("ddp", 5, "forward", "none", 2, 0),
        ("zero1", 4, "training", "none", 2, 0),
        ("zero1", 1, "training", "none", 4, 3),
        ("zero2", 5, "training", "none", 2, 0),
        ("zero2", 8, "training", "non-reentrant", 3, 2),
        ("fsdp", 0, "training", "none", 3, 2),
        ("fsdp", 2, "training", "non-reentrant", 4, 0),
        ("fsdp", 4, "training", "none", 4, 3),
        ("fsdp", 7, "inference", "none", 2, 1),
        ("fsdp", 3, "training", "non-reentrant", 2, 1),
    ]
    pts = []
    for layout, i, kind, ck, world, rank in rows:
        row, window, mwl, extra, _, _ = S.POINTS[i]
        p = dict(S.point(row, window, mwl, extra), checkpoint=ck)
        pts.append(dist_point(p, kind, layout, world, rank, S.name_of(p, kind)))
    return pts


def autocast_grid():
    """The Trainer's bf16=True / fp16=True under each layout: accelerate's prepared forward
    (measure_hf.accelerate_forward, the point's `amp`) over fp32 and bf16 weights, patched on the
    model before DDP wraps it; fp16 (GradScaler) under DDP; a plain torch.autocast point; dense
    models, a family and two MoE models; training, forward and inference."""
    import make_family_grid as F
    import make_hf_grid as HG
    import make_moe_grid as MG
    moe = {r[0]: r for r in MG.POINTS}
    # (layout, model, profile type, autocast, weights, world, rank, amp)
    rows = [
        ("ddp", ("llama", 0), "training", "bf16", "fp32", 2, 1, "accelerate"),
        ("ddp", ("qwen3", 5), "training", "fp16", "fp32", 2, 0, "accelerate"),
        ("ddp", ("phi3", 1), "training", "bf16", "bf16", 2, 0, "accelerate"),
        ("ddp", ("llama", 3), "forward", "bf16", "fp32", 2, 1, "accelerate"),
        ("ddp", ("mistral", 6), "training", "bf16", "fp32", 2, 0, "torch"),
        ("ddp", ("mixtral", None), "training", "bf16", "fp32", 2, 1, "accelerate"),
        ("zero1", ("llama", 2), "training", "bf16", "fp32", 2, 1, "accelerate"),
        ("fsdp", ("llama", 1), "training", "bf16", "fp32", 3, 2, "accelerate"),
        ("fsdp", ("qwen2", 2), "training", "bf16", "bf16", 2, 0, "accelerate"),
        ("fsdp", ("gemma3_text", 4), "training", "bf16", "fp32", 2, 1, "accelerate"),
        ("fsdp", ("qwen3_moe", None), "training", "bf16", "fp32", 2, 0, "accelerate"),
        ("fsdp", ("olmo2", 3), "inference", "bf16", "fp32", 2, 0, "accelerate"),
        ("zero2", ("mistral", 4), "training", "bf16", "fp32", 2, 1, "accelerate"),
        # Forward-only and inference steps (main_thread_broadcasts: the construction's flat
        # broadcast dies where the profiler sees it).
        ("ddp", ("qwen3", 5), "forward", "fp16", "fp32", 2, 0, "accelerate"),
        ("ddp", ("phi3", 1), "inference", "bf16", "bf16", 2, 1, "accelerate"),
        ("ddp", ("olmo2", 3), "forward", "bf16", "fp32", 3, 2, "accelerate"),
        ("ddp", ("mixtral", None), "forward", "bf16", "fp32", 2, 0, "accelerate"),
        ("ddp", ("mistral", 6), "inference", "fp16", "fp32", 2, 0, "torch"),
        ("zero1", ("gemma3_text", 4), "inference", "bf16", "fp32", 3, 2, "accelerate"),
        ("zero2", ("qwen2", 2), "forward", "bf16", "bf16", 2, 0, "accelerate"),
        ("fsdp", ("llama", 1), "forward", "fp16", "fp32", 4, 3, "accelerate"),
        ("fsdp", ("mistral", 4), "forward", "bf16", "fp32", 2, 0, "accelerate"),
        ("zero1", ("llama", 2), "forward", "bf16", "fp32", 2, 0, "accelerate"),
        ("zero2", ("phi3", 1), "inference", "bf16", "fp32", 3, 1, "accelerate"),
    ]
    pts = []
    for layout, (mt, i), kind, autocast, dtype, world, rank, amp in rows:
        if mt in moe:
            p = dict(MG.point(moe[mt]), dtype=dtype)
            name = MG.name_of(p, kind)
        elif mt.startswith("gemma"):
            p = F.gemma_point(mt, i, "below", dtype=dtype)
            name = F.name_of(p, kind)
        elif mt in ("phi3", "olmo2"):
            p = F.point(mt, i, dtype=dtype)
            name = F.name_of(p, kind)
        else:
            p = HG.point(mt, i, dtype=dtype)
            name = HG.name_of(p, kind)
        p = dict(p, autocast=autocast, amp=amp)
        head, tail = name.rsplit(f" {kind}", 1)
        pts.append(dist_point(p, kind, layout, world, rank, f"{head} autocast={autocast} amp={amp} {kind}{tail}"))
    return pts


def gpt_oss_deepseek_grid():
    """gpt-oss (make_gptoss_grid.py's rows: eager attention with sinks, biased experts) and
    DeepSeek-V3 (make_deepseek_grid.py's rows with shared experts: latent attention, the sigmoid
    router, dense first layers) under each layout, world 2-4, experts not dividing the ranks."""
    import make_deepseek_grid as DS
    import make_gptoss_grid as GO
    # (module, row, layout, profile type, checkpoint, world, rank)
    rows = [
        (GO, 0, "ddp", "training", "none", 2, 0),
        (GO, 1, "ddp", "training", "non-reentrant", 2, 1),
        (GO, 2, "fsdp", "training", "none", 3, 2),
        (GO, 8, "fsdp", "training", "non-reentrant", 2, 1),
        (GO, 6, "zero2", "training", "none", 4, 3),
        (GO, 5, "zero1", "training", "none", 2, 1),
        (GO, 4, "fsdp", "forward", "none", 2, 0),
        (DS, 0, "ddp", "training", "none", 2, 0),
        (DS, 1, "ddp", "training", "non-reentrant", 2, 1),
        (DS, 2, "fsdp", "training", "none", 3, 2),
        (DS, 6, "fsdp", "training", "non-reentrant", 4, 3),
        (DS, 7, "zero2", "training", "none", 2, 0),
        (DS, 9, "zero1", "training", "none", 2, 1),
        (DS, 5, "fsdp", "inference", "none", 2, 1),
    ]
    pts = []
    for mod, i, layout, kind, ck, world, rank in rows:
        p = dict(mod.point(mod.POINTS[i]), checkpoint=ck)
        pts.append(dist_point(p, kind, layout, world, rank, mod.name_of(p, kind)))
    return pts


def lora_models_grid():
    """LoRA under ddp, fsdp and zero2 and QLoRA (bitsandbytes 4-bit, nf4 and fp4) under ddp of
    Phi-3 (fused qkv_proj, gate_up_proj), OLMo-2, Gemma 2 and Gemma 3 text (make_lora_grid.py's
    family_lora shapes), then Mixtral, Qwen3-MoE, gpt-oss and DeepSeek-V3 on their attention
    projections and Qwen2-MoE on its attention and shared expert, and every MoE model through
    ParamWrapper on its experts' 3-D weights and router (make_lora_grid.py's moe_lora /
    moe_param / gptoss_lora / deepseek_lora rows, routing forced): r 4-16, peft's default, custom and all-linear targets, world 2-8, ranks 0 and the
    last, fp32 and bf16, checkpointing off, non-reentrant and (ddp) reentrant, lora_dropout 0 and
    0.05, training, with a forward and two inference points."""
    import make_lora_grid as L
    att = "q_proj,k_proj,v_proj,o_proj"
    mla = "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj"
    ex, rt, grt = "mlp.experts.gate_up_proj,mlp.experts.down_proj", "mlp.gate.weight", "mlp.router.weight"
    fam = lambda mt, i, r, t, ck, dtype: L.family_lora(mt, i, r, t, checkpoint=ck, dtype=dtype)
    q4 = lambda p, *a: L.bnb_of(p, 4, *a)
    # (layout, point, profile type, world, rank)
    rows = [
        ("ddp", fam("phi3", 0, 8, "qkv_proj", "none", "bf16"), "training", 2, 0),
        ("ddp", fam("olmo2", 1, 16, "all-linear", "non-reentrant", "bf16"), "training", 2, 1),
        ("ddp", fam("gemma2", 2, 4, None, "none", "fp32"), "training", 4, 3),
        ("ddp", fam("gemma3_text", 3, 8, "all-linear", "non-reentrant", "bf16"), "training", 2, 0),
        ("ddp", q4(fam("phi3", 4, 16, "all-linear", "reentrant", "bf16")), "training", 2, 1),
        ("ddp", q4(fam("gemma2", 5, 8, None, "non-reentrant", "bf16"), "fp4", False), "training", 2, 0),
        ("ddp", q4(fam("olmo2", 6, 4, "q_proj,v_proj", "none", "bf16")), "training", 4, 3),
        ("ddp", q4(fam("gemma3_text", 7, 16, "k_proj,up_proj", "reentrant", "bf16")), "training", 2, 1),
        ("fsdp", fam("phi3", 1, 16, "gate_up_proj,down_proj", "non-reentrant", "bf16"), "training", 4, 3),
        ("fsdp", fam("olmo2", 2, 8, "all-linear", "none", "fp32"), "training", 8, 7),
        ("fsdp", fam("gemma2", 3, 16, "all-linear", "non-reentrant", "bf16"), "training", 3, 2),
        ("fsdp", fam("gemma3_text", 0, 4, None, "none", "bf16"), "training", 8, 0),
        ("fsdp", fam("gemma2", 1, 8, None, "none", "bf16"), "forward", 2, 1),
        ("zero2", fam("phi3", 2, 8, "all-linear", "none", "fp32"), "training", 2, 0),
        ("zero2", fam("olmo2", 3, 4, "k_proj,o_proj,up_proj", "non-reentrant", "bf16"), "training", 4, 3),
        ("zero2", fam("gemma2", 0, 8, None, "none", "bf16"), "training", 2, 1),
        ("zero2", fam("gemma3_text", 1, 16, "all-linear", "non-reentrant", "fp32"), "training", 3, 2),
        ("ddp", fam("olmo2", 0, 8, "q_proj,v_proj", "none", "bf16"), "inference", 2, 1),
        # The MoE models: the attention's projections (make_lora_grid.py's mgrid/ogrid/dsgrid say why).
        ("ddp", L.moe_lora(2, 8, "q_proj,v_proj"), "training", 2, 0),  # mixtral batched_mm worst bf16
        ("ddp", L.moe_lora(6, 16, att, checkpoint="non-reentrant"), "training", 4, 3),  # qwen3_moe grouped_mm balanced fp32
        ("ddp", L.gptoss_lora(0, 8, "q_proj,v_proj"), "training", 2, 1),  # grouped_mm balanced fp32
        ("ddp", L.deepseek_lora(0, 8, mla), "training", 2, 0),  # grouped_mm balanced sdpa fp32
        ("ddp", q4(L.moe_lora(0, 16, att, checkpoint="reentrant", dtype="bf16")), "training", 2, 1),
        ("ddp", q4(L.moe_lora(7, 8, "q_proj,v_proj", checkpoint="non-reentrant", dtype="bf16"), "fp4", False), "training", 2, 0),
        ("ddp", q4(L.gptoss_lora(4, 16, att, checkpoint="reentrant", dtype="bf16")), "training", 2, 0),
        ("ddp", q4(L.deepseek_lora(13, 16, mla, checkpoint="reentrant", dtype="bf16")), "training", 2, 1),
        ("fsdp", L.moe_lora(1, 16, att, checkpoint="non-reentrant"), "training", 3, 2),  # mixtral eager balanced fp32
        ("fsdp", L.moe_lora(8, 4, "k_proj,o_proj"), "training", 4, 3),  # qwen3_moe batched_mm worst fp32
        ("fsdp", L.gptoss_lora(2, 16, "all-linear"), "training", 3, 2),  # grouped_mm worst bf16
        ("fsdp", L.deepseek_lora(1, 16, "q_proj,kv_b_proj", checkpoint="non-reentrant"), "training", 4, 3),  # eager balanced bf16
        ("fsdp", L.moe_lora(3, 8, "q_proj,v_proj"), "inference", 8, 7),  # mixtral grouped_mm worst bf16
        ("zero2", L.moe_lora(4, 4, "k_proj,o_proj"), "training", 2, 0),  # mixtral eager worst bf16
        ("zero2", L.moe_lora(9, 8, att, checkpoint="non-reentrant"), "training", 2, 1),  # qwen3_moe grouped_mm worst bf16
        ("zero2", L.gptoss_lora(8, 16, att), "training", 4, 3),  # batched_mm balanced fp32
        ("zero2", L.deepseek_lora(2, 4, "q_b_proj,o_proj", checkpoint="non-reentrant"), "training", 8, 7),  # batched_mm worst bf16
        # lora_dropout (the CPU noise tensor of _dropout_impl, as the one-GPU grids measure it)
        ("fsdp", L.family_lora("phi3", 5, 8, "all-linear", lora_dropout=0.05, dtype="bf16"), "training", 2, 1),
        ("ddp", L.gptoss_lora(9, 4, "q_proj,v_proj", lora_dropout=0.05), "training", 2, 0),  # batched_mm worst bf16
        # Qwen2-MoE (make_moe_grid.py's rows 12-16): its attention, its shared expert's
        # nn.Linear modules (gate_proj, up_proj, down_proj, shared_expert_gate) or both.
        ("ddp", L.moe_lora(12, 8, "q_proj,v_proj"), "training", 2, 0),  # grouped_mm balanced sdpa fp32
        ("ddp", L.moe_lora(13, 16, "all-linear", checkpoint="non-reentrant"), "training", 4, 3),  # eager balanced eager bf16
        ("ddp", L.moe_lora(16, 4, "down_proj,v_proj", lora_dropout=0.05), "training", 2, 1),  # eager worst sdpa fp32
        ("ddp", q4(L.moe_lora(12, 8, "q_proj,v_proj", checkpoint="reentrant", dtype="bf16")), "training", 2, 1),
        ("ddp", q4(L.moe_lora(15, 8, "all-linear", checkpoint="non-reentrant", dtype="bf16"), "fp4", False), "training", 2, 0),
        ("fsdp", L.moe_lora(14, 4, "gate_proj,up_proj,down_proj"), "training", 3, 2),  # batched_mm worst sdpa fp32
        ("fsdp", L.moe_lora(15, 16, "all-linear", checkpoint="non-reentrant"), "training", 4, 3),  # grouped_mm worst eager bf16
        ("fsdp", L.moe_lora(16, 8, "q_proj,shared_expert_gate"), "inference", 2, 1),
        ("zero2", L.moe_lora(17, 8, "all-linear", checkpoint="non-reentrant"), "training", 8, 7),  # batched_mm balanced eager bf16
        ("zero2", L.moe_lora(13, 4, "k_proj,o_proj,up_proj"), "training", 2, 0),
        # peft's ParamWrapper (target_parameters) on the experts' 3-D gate_up_proj/down_proj and
        # the router's weight of Mixtral, Qwen3-MoE, gpt-oss, DeepSeek-V3 and Qwen2-MoE
        # (make_lora_grid.py's pgrid / gptoss_pgrid / deepseek_pgrid rows; no dropout:
        # ParamWrapper raises on it).
        ("ddp", L.moe_param(0, 8, ex), "training", 2, 0),  # mixtral grouped_mm balanced sdpa fp32
        ("ddp", L.moe_param(9, 8, rt), "training", 2, 1),  # qwen3_moe grouped_mm worst bf16
        ("ddp", L.moe_param(4, 16, ex + "," + rt, "q_proj,v_proj", checkpoint="non-reentrant"), "training", 4, 3),  # mixtral eager worst bf16
        ("ddp", L.gptoss_lora(0, 8, "", ex), "training", 2, 0),  # grouped_mm balanced fp32
        ("ddp", L.deepseek_lora(0, 8, "", ex), "training", 2, 1),  # grouped_mm balanced sdpa fp32
        ("fsdp", L.moe_param(7, 4, ex, checkpoint="non-reentrant"), "training", 2, 1),  # qwen3_moe eager balanced bf16
        ("fsdp", L.moe_param(2, 4, ex), "training", 3, 2),  # mixtral batched_mm worst bf16
        ("fsdp", L.gptoss_lora(9, 4, "", ex), "training", 4, 3),  # batched_mm worst bf16
        ("fsdp", L.gptoss_lora(2, 8, "", grt), "training", 2, 0),  # grouped_mm worst bf16
        ("fsdp", L.moe_param(6, 8, ex + "," + rt), "forward", 2, 0),  # qwen3_moe grouped_mm balanced fp32
        ("fsdp", L.deepseek_lora(7, 8, "", rt), "training", 2, 1),  # grouped_mm worst sdpa bf16
        ("zero2", L.moe_param(11, 8, "mlp.experts.down_proj", checkpoint="reentrant"), "training", 2, 1),  # qwen3_moe batched_mm balanced bf16
        ("zero2", L.moe_param(3, 8, "gate_up_proj", att), "training", 4, 3),  # mixtral grouped_mm worst bf16
        ("zero2", L.gptoss_lora(8, 8, att, "gate_up_proj", checkpoint="non-reentrant"), "training", 2, 0),  # batched_mm balanced fp32
        ("ddp", L.moe_param(12, 8, ex), "training", 2, 1),  # qwen2_moe grouped_mm balanced sdpa fp32
        ("fsdp", L.moe_param(13, 4, ex + "," + rt, checkpoint="non-reentrant"), "training", 2, 0),  # qwen2_moe eager balanced eager bf16
        ("zero2", L.moe_param(15, 8, rt, "q_proj,shared_expert_gate"), "training", 3, 2),  # qwen2_moe grouped_mm worst eager bf16
    ]
    pts = []
    for layout, p, kind, world, rank in rows:
        pts.append(dist_point(p, kind, layout, world, rank, L.names(p, kind)))
    return pts


def models_header(generator):
    def header():
        import torch
        import transformers
        return dict(generator=generator, torch=torch.__version__, transformers=transformers.__version__,
                    counted="requested bytes of blocks >= 512 B, absolute levels, the third iteration of measure_hf.py's loop "
                            "(the point's profile type), rank `rank` of `world_size`; CPU-only kernel scratch left out as make_grid.py")
    return header


def header():
    import torch
    return dict(generator="tools/pytorch/measure_dist.py", torch=torch.__version__,
                counted="requested bytes of blocks >= 512 B, absolute levels, the third training iteration, rank `rank` of `world_size`")


def lora_header():
    import bitsandbytes
    import peft
    import torch
    import transformers
    return dict(generator="tools/pytorch/measure_dist.py --lora", torch=torch.__version__, transformers=transformers.__version__,
                peft=peft.__version__, bitsandbytes=bitsandbytes.__version__,
                counted="requested bytes of blocks >= 512 B, absolute levels, the third training iteration (measure_hf.py's step), "
                        "rank `rank` of `world_size`")


def lora_models_header():
    return dict(lora_header(), generator="tools/pytorch/measure_dist.py --lora-models",
                counted="requested bytes of blocks >= 512 B, absolute levels, the third iteration of measure_hf.py's loop "
                        "(the point's profile type), rank `rank` of `world_size`; CPU-only kernel scratch left out as make_grid.py")


def main():
    import measure_cs336 as M
    grids = {"--families": (families_grid, FAMILIES_OUT), "--moe": (moe_grid, MOE_OUT),
             "--gpt-oss-deepseek": (gpt_oss_deepseek_grid, GPTOSS_DEEPSEEK_OUT),
             "--lora-models": (lora_models_grid, LORA_MODELS_OUT),
             "--qwen2-moe-sliding": (qwen2_moe_sliding_grid, QWEN2_MOE_SLIDING_OUT),
             "--autocast": (autocast_grid, AUTOCAST_OUT),
             "--aux-loss": (aux_loss_grid, AUX_LOSS_OUT),
             "--aux-loss-lora": (aux_loss_lora_grid, AUX_LOSS_LORA_OUT),
             "--mixed-precision": (mixed_precision_grid, MIXED_PRECISION_OUT),
             "--units": (units_grid, UNITS_OUT),
             "--reentrant": (reentrant_grid, REENTRANT_OUT),
             "--lora-extras": (lora_extras_grid, LORA_EXTRAS_OUT),
             "--lora-mixed-precision-models": (lora_mixed_precision_models_grid, LORA_MIXED_PRECISION_MODELS_OUT),
             "--lora-mixed-precision": (lora_mixed_precision_grid, LORA_MIXED_PRECISION_OUT),
             "--mixed-precision-pairs": (mixed_precision_pairs_grid, MIXED_PRECISION_PAIRS_OUT),
             "--reentrant-mixed-precision": (reentrant_mixed_precision_grid, REENTRANT_MIXED_PRECISION_OUT),
             "--fsdp-qlora-models": (fsdp_qlora_models_grid, FSDP_QLORA_MODELS_OUT),
             "--lora-layouts": (lora_layouts_grid, LORA_LAYOUTS_OUT),
             "--lora-mixed-precision-layouts": (lora_mixed_precision_layouts_grid, LORA_MIXED_PRECISION_LAYOUTS_OUT),
             "--lora-extras-layouts": (lora_extras_layouts_grid, LORA_EXTRAS_LAYOUTS_OUT),
             "--fsdp-qlora-layouts": (fsdp_qlora_layouts_grid, FSDP_QLORA_LAYOUTS_OUT)}
    flag = next((f for f in grids if f in sys.argv), None)
    if flag:
        sys.argv.remove(flag)
        points, out = grids[flag]
        if flag in ("--lora-models", "--aux-loss-lora", "--lora-extras", "--lora-mixed-precision", "--lora-mixed-precision-models", "--fsdp-qlora-models",
                    "--lora-layouts", "--lora-mixed-precision-layouts", "--lora-extras-layouts", "--fsdp-qlora-layouts"):
            head = lambda: dict(lora_models_header(), generator=f"tools/pytorch/measure_dist.py {flag}")
        else:
            head = models_header(f"tools/pytorch/measure_dist.py {flag}")
        M.grid_main(__doc__, __file__, one, points, out, head)
    elif "--cs336-autocast" in sys.argv:
        sys.argv.remove("--cs336-autocast")
        M.grid_main(__doc__, __file__, one, cs336_autocast_grid, CS336_AUTOCAST_OUT,
                    lambda: dict(header(), generator="tools/pytorch/measure_dist.py --cs336-autocast"))
    elif "--fsdp-qlora" in sys.argv:
        sys.argv.remove("--fsdp-qlora")
        M.grid_main(__doc__, __file__, one, fsdp_qlora_grid, FSDP_QLORA_OUT,
                    lambda: dict(lora_header(), generator="tools/pytorch/measure_dist.py --fsdp-qlora"))
    elif "--lora" in sys.argv:
        sys.argv.remove("--lora")
        M.grid_main(__doc__, __file__, one, lora_grid, LORA_OUT, lora_header)
    else:
        M.grid_main(__doc__, __file__, one, grid, OUT, header)


if __name__ == "__main__":
    main()
