"""measure_tp_hf.py -- what one rank allocates when transformers 5.23 runs its own tensor
parallelism (`from_pretrained(..., tp_plan="auto")`, i.e. `DistributedConfig(tp_size=N)`) on
the dense families: phi3, olmo2, gemma2, gemma3_text, and llama, mistral, qwen2, qwen3 (vramscope's
`--tp-plan auto`).

The plan is the model's own, resolved as from_pretrained resolves it: `_resolve_parallel_plans`
(the config's `base_model_tp_plan`, `embed_tokens: embedding_rowwise`, the class's
`_tp_plan = {"lm_head": "colwise_gather_output"}`, `*` expanded per layer), then
`transformers.distributed.tensor_parallel.apply_tensor_parallelism` on a 1-D "tp" mesh.
from_pretrained builds the model untied (`init.no_tie_weights`), applies the plan, loads, and
ties: a tied head (Gemma) is untied here before the plan and re-tied after it (`tie_weights`),
so the head is the embedding's Shard(0) DTensor parameter.

Under the fake process group (torch.testing._internal.distributed.fake_pg) this process is rank
`rank` of tp; collectives return at once and allocate what DTensor allocates around them.
measure_tp.py's step and method (measure_hf.py's: one profiler session, mode-free, requested
bytes of blocks >= 512 B, the third iteration), `kind` training (for-loop AdamW, no clipping),
forward (grad enabled, no labels) or inference (`torch.no_grad()`, where colwise and rowwise run
on local tensors and rowwise all-reduces its output in place); CHECKPOINTED's training points
enable activation checkpointing (non-reentrant or reentrant) before the plan is applied.

MoE models (`--moe`, tests/fixtures/dist_grid/tp_hf_moe.json): Mixtral's, Qwen3-MoE's and Qwen2-MoE's plans
add `mlp.experts.gate_up_proj: packed_colwise` (the 3-D (E, 2F, d) parameter _StridedShard on
dim 1: this rank's gate and up rows), `mlp.experts.down_proj: rowwise` ((E, d, F) Shard(-1)) and
`mlp.experts: moe_tp_experts` (the experts' forward on local tensors, `_AllReduceBackward` on the
hidden states and the routing weights, `_AllReduceForward` -- an in-place all_reduce -- on the
output); the router (`mlp.gate`) and Qwen2-MoE's shared expert are not in the plan: replicated. The routers' top-k indices are
forced as measure_moe.py's install_routing forces them (`routing` balanced or worst).

The router's auxiliary loss (`--aux-loss`, tests/fixtures/dist_grid/tp_hf_aux_loss.json):
`output_router_logits=True` on Mixtral, Qwen3-MoE and Qwen2-MoE (DeepSeek-V3 has no such loss in
transformers 5.23) under their plans. The router is not in the plan (replicated), so every rank
keeps the full (tokens, experts) logits and load_balancing_loss_func runs on plain tensors, with
no collective.

Autocast (`--autocast`, tests/fixtures/dist_grid/tp_hf_autocast.json): accelerate's prepared
forward (measure_hf.accelerate_forward) under transformers' plan, and under torch's
Megatron-style plan (a point's `tp_plan: torch`: measure_tp.py's parallelize_module); and
(`--moe-autocast`, tests/fixtures/dist_grid/tp_hf_moe_autocast.json) under the MoE plans, with
the router's auxiliary loss too (MOE_AUTOCAST_AUX_LOSS).

Qwen2-MoE's sliding window (`--moe`'s QWEN2_MOE_SLIDING points): use_sliding_window with a
window below the sequence, its layers below max_window_layers sliding every other one.

    python3 measure_tp_hf.py --point JSON     # one point -> PHASES JSON on stdout
    python3 measure_tp_hf.py                  # the grid -> tests/fixtures/dist_grid/tp_hf.json
    python3 measure_tp_hf.py --moe            # the MoE grid -> tests/fixtures/dist_grid/tp_hf_moe.json
    python3 measure_tp_hf.py --autocast       # the autocast grid -> tests/fixtures/dist_grid/tp_hf_autocast.json
    python3 measure_tp_hf.py --moe-autocast   # the MoE plans under autocast -> tests/fixtures/dist_grid/tp_hf_moe_autocast.json
    python3 measure_tp_hf.py --aux-loss       # the router's loss -> tests/fixtures/dist_grid/tp_hf_aux_loss.json
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "../../tests/fixtures/dist_grid/tp_hf.json")
OUT_MOE = os.path.join(HERE, "../../tests/fixtures/dist_grid/tp_hf_moe.json")
OUT_AUTOCAST = os.path.join(HERE, "../../tests/fixtures/dist_grid/tp_hf_autocast.json")
OUT_MOE_AUTOCAST = os.path.join(HERE, "../../tests/fixtures/dist_grid/tp_hf_moe_autocast.json")
OUT_AUX_LOSS = os.path.join(HERE, "../../tests/fixtures/dist_grid/tp_hf_aux_loss.json")


def wrapper(pt):
    if pt.get("tp_plan") == "torch":
        # torch's Megatron-style plan (measure_tp.py's, parallelize_module) on a Llama-style model.
        import measure_tp as T
        plan = T.wrapper(dict(tp=pt["tp"]))

        def wrap_torch(model):
            plan(model)
            # measure_hf.LossPhase hooked lm_head before the plan's ColwiseParallel added its
            # output hook (the logits' all-gather): move the phase mark after it, so the loss
            # phase starts where lm_head returns its gathered logits (as tp.json was measured,
            # when the mark was hooked after the plan).
            hooks = model.lm_head._forward_hooks
            for k in [k for k, f in hooks.items() if type(getattr(f, "__self__", None)).__name__ == "LossPhase"]:
                hooks.move_to_end(k)
        return wrap_torch

    def wrap(model):
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from transformers.distributed.configuration_utils import DistributedConfig
        from transformers.distributed.tensor_parallel import apply_tensor_parallelism
        mesh = init_device_mesh("cpu", (pt["tp"],), mesh_dim_names=("tp",))
        tied = model.lm_head.weight is model.model.embed_tokens.weight
        if tied:
            # from_pretrained's model is untied while the plan is applied (init.no_tie_weights).
            model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach())
        plan, _, _ = model._resolve_parallel_plans(DistributedConfig(tp_size=pt["tp"]))
        apply_tensor_parallelism(model, mesh, plan)
        if tied:
            model.tie_weights()
            assert model.lm_head.weight is model.model.embed_tokens.weight
        import gc
        gc.collect()
    return wrap


def one(pt):
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    import measure_hf as H
    import measure_cs336 as M
    torch.set_num_threads(1)
    dist.init_process_group("fake", rank=pt["rank"], world_size=pt["tp"], store=FakeStore())
    p = dict(pt["config"], seq=pt["seq"], batch=pt["batch"], attn=pt["attn"], dtype=pt["dtype"],
             optimizer=pt.get("optimizer", "adamw_torch_forloop"), max_grad_norm=0.0, use_cache=False,
             checkpoint=pt.get("checkpoint", "none"))
    if pt.get("autocast"):
        # The Trainer's bf16=True / fp16=True: accelerate's prepared forward (measure_hf.accelerate_forward).
        p.update(autocast=pt["autocast"], amp=pt.get("amp", "accelerate"))
    if "num_experts" in p:
        import measure_moe as MOE
        MOE.install_routing(p)
        H.hf_config = MOE.moe_config
    per, log, info = H.measure(p, pt["kind"], wrapper(pt))
    if pt.get("events"):
        M.write_events(pt["events"], log)
    return {k: dict(peak=s["peak"], peak_all_blocks=s["peak_all"], live_at_peak=s["live_at_peak"], peak_op=s["peak_op"], start=s["start"],
                    end=s.get("end", s["start"]), cpu_scratch_left_out=s["cpu_scratch"], missed_frees=s.get("missed_frees", []))
            for k, s in per.items()}


# (model_type, hidden, intermediate, layers, heads, kv_heads, vocab, S, B, tied)
SHAPES = [
    ("phi3", 128, 384, 2, 4, 4, 1000, 64, 2, False),
    ("phi3", 96, 256, 1, 6, 2, 776, 48, 3, False),
    ("olmo2", 128, 384, 2, 4, 4, 1000, 64, 2, False),
    ("olmo2", 128, 256, 2, 8, 4, 1024, 32, 2, False),
    ("gemma2", 128, 384, 2, 4, 4, 1000, 64, 2, True),
    ("gemma2", 96, 256, 2, 8, 4, 1024, 40, 3, True),
    ("gemma3_text", 128, 384, 2, 4, 4, 1000, 64, 2, True),
    ("gemma3_text", 128, 256, 2, 8, 4, 1024, 32, 2, True),
    ("llama", 128, 384, 2, 4, 4, 1000, 64, 2, False),
    # The Llama-style models' own plans: Mistral's and Qwen2's are Llama's (Qwen2's colwise
    # q/k/v biases are Shard(0) like their weights; the second shape ties the head), Qwen3's
    # adds q_norm/k_norm: replicated_with_grad_allreduce (this rank's heads, each over its whole
    # head_dim; the gradient all-reduced in place by a post-accumulate hook). Qwen3's default
    # head_dim is 128; the second shape names 32.
    ("mistral", 128, 384, 2, 8, 4, 1024, 48, 2, False),
    ("qwen2", 128, 384, 2, 4, 4, 1000, 64, 2, False),
    ("qwen2", 96, 256, 2, 8, 4, 1024, 32, 3, True),
    ("qwen3", 128, 384, 2, 4, 4, 1000, 64, 2, False),
    ("qwen3", 128, 256, 2, 8, 4, 1024, 32, 2, False, 32),
]

# Activation checkpointing (gradient_checkpointing_enable(gradient_checkpointing_kwargs=
# {"use_reentrant": ...}), training only: the layers checkpoint in train mode), over the grid's
# configurations: (SHAPES index, tp, rank, attn, dtype, use_reentrant). A reentrant
# checkpoint's first forward runs under no_grad, where colwise/rowwise take their local paths.
CHECKPOINTED = [
    (8, 2, 0, "sdpa", "fp32", False),
    (8, 4, 3, "eager", "bf16", True),
    (9, 2, 1, "eager", "fp32", False),
    (10, 4, 0, "sdpa", "bf16", True),
    (13, 2, 0, "eager", "bf16", False),
    (11, 4, 3, "sdpa", "fp32", True),
    (0, 2, 1, "eager", "fp32", True),
    (2, 2, 0, "sdpa", "bf16", False),
    (4, 2, 1, "eager", "fp32", True),
    (6, 4, 0, "sdpa", "bf16", False),
]


def config(i):
    mt, h, f, L, nh, kv, V, S, B, tied, *hd = SHAPES[i]
    c = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
             vocab_size=V, tied=tied, max_position_embeddings=4096)
    if hd:
        c.update(head_dim=hd[0])
    return c


def grid():
    pts = []
    for i, (mt, h, f, L, nh, kv, V, S, B, tied, *_) in enumerate(SHAPES):
        c = config(i)
        if mt.startswith("gemma"):
            # make_family_grid.py's gemma_point: a window below S, alternating layer types, a
            # query_pre_attn_scalar that is not head_dim, Gemma 2's soft-capping.
            c.update(head_dim=h // nh, sliding_window=S // 2, query_pre_attn_scalar=24,
                     layer_types=["sliding_attention" if (j + 1) % 2 else "full_attention" for j in range(L)])
            if mt == "gemma2":
                c.update(attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
        # Alternate the options over the shapes: each family sees both of each.
        for j, tp in enumerate((2, 4)):
            if kv % tp or nh % tp or f % tp or V % tp:
                continue
            # Gemma 2 has no sdpa in transformers 5.23 (`_supports_sdpa = False`).
            attn = "eager" if mt == "gemma2" else ("eager", "sdpa")[(i + j) % 2]
            dtype = ("fp32", "bf16")[(i // 2 + j) % 2]
            # Inference (torch.no_grad()) takes the styles' local-tensor paths: once per shape.
            for kind in ("training", "forward") + (("inference",) if j == 0 else ()):
                rank = (0, tp - 1)[(i + j + (kind == "forward")) % 2]
                name = (f"{mt} V{V} d{h} F{f} h{nh} kv{kv}{' tied' if tied else ''} S{S} B{B} {attn} {dtype} tp{tp} rank{rank} {kind}")
                pts.append(dict(name=name, config=c, seq=S, batch=B, tp=tp, rank=rank, attn=attn, dtype=dtype, kind=kind,
                                optimizer="adamw_torch_forloop"))
    for i, tp, rank, attn, dtype, reentrant in CHECKPOINTED:
        mt, h, f, L, nh, kv, V, S, B, tied, *_ = SHAPES[i]
        ck = "reentrant" if reentrant else "non-reentrant"
        # The shape's config as the loop above made it (Gemma's window and layer types).
        c = next(p["config"] for p in pts if p["config"]["model_type"] == mt and p["config"]["hidden_size"] == h
                 and p["config"]["vocab_size"] == V)
        name = (f"{mt} V{V} d{h} F{f} h{nh} kv{kv}{' tied' if tied else ''} S{S} B{B} {attn} {dtype} tp{tp} rank{rank} "
                f"checkpoint={ck} training")
        pts.append(dict(name=name, config=c, seq=S, batch=B, tp=tp, rank=rank, attn=attn, dtype=dtype, kind="training",
                        optimizer="adamw_torch_forloop", checkpoint=ck))
    return pts


# The Trainer's autocast under the plan: (SHAPES index, tp, rank, attn, weights, autocast, kind).
AUTOCAST = [
    (8, 2, 0, "sdpa", "fp32", "bf16", "training"),
    (8, 4, 3, "eager", "bf16", "bf16", "training"),
    # (fp16 with the GradScaler stops in PyTorch itself: unscale_'s
    # _amp_foreach_non_finite_check_and_unscale_ gets DTensor and plain-tensor gradients together.)
    (13, 2, 1, "sdpa", "fp32", "bf16", "training"),
    (10, 2, 0, "eager", "fp32", "bf16", "forward"),
    (0, 2, 1, "sdpa", "fp32", "bf16", "training"),
    (6, 2, 0, "sdpa", "bf16", "bf16", "training"),
    (2, 4, 3, "eager", "fp32", "bf16", "training"),
    (9, 2, 1, "sdpa", "fp32", "bf16", "inference"),
    # Forward and inference: accelerate's conversion of the logits in every call; without grad
    # the styles' local weights, whose casts autocast does not cache.
    (0, 2, 0, "eager", "fp32", "bf16", "inference"),
    (2, 2, 1, "sdpa", "bf16", "bf16", "forward"),
    (6, 4, 3, "eager", "fp32", "bf16", "inference"),
    (12, 2, 0, "sdpa", "fp32", "bf16", "forward"),
    (8, 4, 1, "sdpa", "fp32", "bf16", "inference"),
    (11, 2, 1, "eager", "bf16", "bf16", "inference"),
    (4, 2, 0, "eager", "fp32", "bf16", "forward"),
]


# The same under torch's Megatron-style plan (`--tp-plan torch`, measure_tp.py's plan), the
# Llama-style models with untied heads.
AUTOCAST_TORCH_PLAN = [
    (8, 2, 0, "sdpa", "fp32", "bf16", "training"),
    (8, 4, 3, "eager", "bf16", "bf16", "training"),
    (9, 2, 1, "sdpa", "fp32", "bf16", "training"),
    (12, 2, 1, "eager", "fp32", "bf16", "training"),
    (10, 2, 0, "eager", "fp32", "bf16", "forward"),
    (10, 4, 3, "sdpa", "bf16", "bf16", "forward"),
    (9, 4, 0, "sdpa", "fp32", "bf16", "inference"),
    (8, 2, 1, "eager", "fp32", "bf16", "inference"),
]


def autocast_grid():
    base = {p["config"]["model_type"] + str(p["config"]["hidden_size"]) + str(p["config"]["vocab_size"]): p["config"] for p in grid()}
    pts = []
    for plan, rows in (("auto", AUTOCAST), ("torch", AUTOCAST_TORCH_PLAN)):
        for i, tp, rank, attn, dtype, autocast, kind in rows:
            mt, h, f, L, nh, kv, V, S, B, tied, *_ = SHAPES[i]
            name = (f"{mt} V{V} d{h} F{f} h{nh} kv{kv}{' tied' if tied else ''} S{S} B{B} {attn} {dtype} tp{tp} rank{rank} "
                    f"autocast={autocast} amp=accelerate {kind}{' plan=torch' if plan == 'torch' else ''}")
            pts.append(dict(name=name, config=base[mt + str(h) + str(V)], seq=S, batch=B, tp=tp, rank=rank, attn=attn, dtype=dtype,
                            kind=kind, optimizer="adamw_torch_forloop", autocast=autocast, amp="accelerate", tp_plan=plan))
    return pts


# (model_type, hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, S, B, experts,
# top_k, experts implementation, routing, attn, dtype): make_moe_grid.py's rows, their heads,
# intermediate and vocabulary made divisible by the ranks.
MOE_SHAPES = [
    ("mixtral", 64, 96, 1, 4, 4, None, 1000, 16, 2, 4, 2, "grouped_mm", "balanced", "sdpa", "fp32"),
    ("mixtral", 128, 128, 2, 8, 4, None, 1024, 12, 2, 8, 2, "eager", "worst", "eager", "bf16"),
    ("mixtral", 64, 160, 1, 4, 2, None, 512, 20, 2, 6, 3, "batched_mm", "worst", "sdpa", "bf16"),
    ("qwen3_moe", 64, 48, 1, 4, 2, 32, 1000, 16, 2, 8, 2, "grouped_mm", "worst", "sdpa", "bf16"),
    ("qwen3_moe", 128, 64, 2, 4, 4, 32, 1000, 12, 2, 6, 3, "batched_mm", "balanced", "eager", "fp32"),
    ("qwen3_moe", 96, 64, 2, 8, 4, 16, 776, 24, 1, 16, 4, "eager", "balanced", "eager", "fp32"),
    # Qwen2-MoE, then its shared expert's width: `mlp.shared_expert` and `shared_expert_gate` are
    # not in its plan (its `mlp.gate_proj`/`up_proj`/`down_proj` entries name the dense MLP of
    # mlp_only_layers): replicated, added after the experts' all-reduced output.
    ("qwen2_moe", 64, 48, 1, 4, 2, None, 1000, 16, 2, 8, 2, "grouped_mm", "balanced", "sdpa", "fp32", 96),
    ("qwen2_moe", 128, 64, 2, 4, 4, None, 1000, 12, 2, 6, 3, "eager", "worst", "eager", "bf16", 160),
    ("qwen2_moe", 96, 48, 1, 8, 4, None, 776, 16, 3, 12, 4, "batched_mm", "worst", "eager", "fp32", 192),
]


# DeepSeek-V3 (make_deepseek_grid.py's rows): its plan leaves the latent attention out
# (replicated: every head on every rank), shards the dense first layers' MLP and the
# shared_experts MLP colwise/rowwise, and the routed experts under moe_tp_experts.
DEEPSEEK_ROWS = [
    (64, 160, 32, 2, 4, 1000, 16, 2, 8, 2, 2, 1, 1, 1, 48, 32, 16, 8, 12, True, 0, "grouped_mm", "balanced", "sdpa", "fp32"),
    (128, 192, 32, 2, 8, 1000, 12, 2, 16, 4, 4, 2, 1, 1, 64, 48, 16, 16, 16, True, 0, "eager", "worst", "eager", "bf16"),
    (64, 96, 40, 3, 4, 512, 20, 2, 4, 3, 2, 2, 2, 2, 32, 24, 8, 8, 20, False, 0, "batched_mm", "worst", "sdpa", "bf16"),
]


def deepseek_grid():
    import make_deepseek_grid as DS
    pts = []
    for i, row in enumerate(DEEPSEEK_ROWS):
        p = DS.point(row)
        c = {k: v for k, v in p.items() if k not in ("seq", "batch", "attn", "dtype", "optimizer", "max_grad_norm", "use_cache")}
        for j, tp in enumerate((2, 4)):
            for kind in ("training", "forward") + (("inference",) if j == 0 else ()):
                rank = (0, tp - 1)[(i + j + (kind == "forward")) % 2]
                name = DS.name_of(dict(p, checkpoint="none"), kind).replace(f" {kind}", f" tp{tp} rank{rank} {kind}")
                pts.append(dict(name=name, config=c, seq=p["seq"], batch=p["batch"], tp=tp, rank=rank, attn=p["attn"],
                                dtype=p["dtype"], kind=kind, optimizer="adamw_torch_forloop"))
    return pts


MOE_CHECKPOINTED = [
    ("mixtral V1000 d64", 2, 1, False),
    ("mixtral V1024 d128", 4, 0, True),
    ("qwen3_moe V1000 d128", 2, 0, True),
    ("qwen3_moe V776 d96", 4, 3, False),
    ("qwen2_moe V1000 d128", 2, 1, False),
    ("qwen2_moe V776 d96", 4, 0, True),
    ("deepseek_v3 d64 Fd160", 2, 1, True),
    ("deepseek_v3 d64 Fd96", 4, 3, False),
]


# Qwen2-MoE's sliding window under its plan: (MOE_SHAPES index, layers, sliding_window,
# max_window_layers, tp, rank, attn, kind), windows below S over sliding and full layers.
QWEN2_MOE_SLIDING = [
    (6, 3, 8, 3, 2, 0, "sdpa", "training"),
    (7, 3, 6, 2, 4, 3, "eager", "training"),
    (8, 2, 8, 2, 2, 1, "eager", "forward"),
    (6, 3, 4, 28, 2, 1, "sdpa", "inference"),
    (7, 4, 5, 3, 2, 0, "sdpa", "forward"),
]


def moe_grid():
    """Each MoE shape at tp 2 and (where it divides) 4, training and forward (inference once
    per shape), rank 0 or the last, as the dense grid alternates them."""
    pts = []
    for i, (mt, h, f, L, nh, kv, hd, V, S, B, E, k, impl, routing, attn, dtype, *shared) in enumerate(MOE_SHAPES):
        c = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
                 head_dim=hd, vocab_size=V, tied=False, max_position_embeddings=4096, num_experts=E, top_k=k,
                 experts=impl, routing=routing)
        if shared:
            c.update(shared_intermediate_size=shared[0])
        for j, tp in enumerate((2, 4)):
            if kv % tp or nh % tp or f % tp or V % tp:
                continue
            for kind in ("training", "forward") + (("inference",) if j == 0 else ()):
                rank = (0, tp - 1)[(i + j + (kind == "forward")) % 2]
                name = (f"{mt} V{V} d{h} F{f} h{nh} kv{kv}{f' hd{hd}' if hd else ''} S{S} B{B} E{E} k{k}"
                        f"{f' shared{shared[0]}' if shared else ''} {impl} {routing} "
                        f"{attn} {dtype} tp{tp} rank{rank} {kind}")
                pts.append(dict(name=name, config=c, seq=S, batch=B, tp=tp, rank=rank, attn=attn, dtype=dtype, kind=kind,
                                optimizer="adamw_torch_forloop"))
    pts += deepseek_grid()
    # Activation checkpointing, training only, over the grid's configurations: (name prefix,
    # tp, rank, use_reentrant). A reentrant checkpoint's first forward runs under no_grad, where
    # _AllReduceBackward is the input itself and colwise/rowwise take their local paths.
    for prefix, tp, rank, reentrant in MOE_CHECKPOINTED:
        base = next(p for p in pts if p["name"].startswith(prefix) and p["tp"] == tp and p["kind"] == "training")
        ck = "reentrant" if reentrant else "non-reentrant"
        name = base["name"].replace(f" tp{tp} rank{base['rank']} training", f" tp{tp} rank{rank} checkpoint={ck} training")
        pts.append(dict(base, name=name, rank=rank, checkpoint=ck))
    # Qwen2-MoE's window (use_sliding_window): the layers below max_window_layers slide every
    # other one (0, 2, ...), the rest full; the plan shards the heads, the mask is per batch.
    for i, L, W, mwl, tp, rank, attn, kind in QWEN2_MOE_SLIDING:
        mt, h, f, _, nh, kv, hd, V, S, B, E, k, impl, routing, _, dtype, shared = MOE_SHAPES[i]
        c = dict(model_type=mt, hidden_size=h, intermediate_size=f, num_layers=L, num_heads=nh, num_kv_heads=kv,
                 head_dim=hd, vocab_size=V, tied=False, max_position_embeddings=4096, num_experts=E, top_k=k,
                 experts=impl, routing=routing, shared_intermediate_size=shared, sliding_window=W, max_window_layers=mwl)
        name = (f"{mt} V{V} d{h} F{f} L{L} h{nh} kv{kv} S{S} B{B} E{E} k{k} shared{shared} {impl} {routing} "
                f"{attn} {dtype} W{W} mwl{mwl} tp{tp} rank{rank} {kind}")
        pts.append(dict(name=name, config=c, seq=S, batch=B, tp=tp, rank=rank, attn=attn, dtype=dtype, kind=kind,
                        optimizer="adamw_torch_forloop"))
    return pts


# The router's loss under the MoE plans: (MOE_SHAPES index, tp, rank, router_aux_loss_coef,
# checkpoint, kind).
AUX_LOSS = [
    (0, 2, 0, 0.02, "none", "training"),
    (1, 4, 3, 0.001, "none", "training"),
    (2, 2, 1, 0.02, "none", "forward"),
    (3, 2, 1, 0.001, "none", "training"),
    (4, 4, 0, 0.02, "non-reentrant", "training"),
    (5, 4, 3, 0.001, "none", "training"),
    (6, 2, 0, 0.001, "none", "training"),
    (7, 4, 3, 0.02, "reentrant", "training"),
    (8, 2, 1, 0.02, "none", "inference"),
    (8, 4, 0, 0.001, "none", "training"),
]


def aux_point(base, i, tp, rank, coef, ck, kind, tag="", **extra):
    """MOE_SHAPES row i's point of `base` with the router's loss on (coefficient `coef`), at
    (tp, rank), checkpointing `ck`; `tag` ends its name before the kind, `extra` its fields."""
    mt, h, f, L, nh, kv, hd, V, S, B, E, k, impl, routing, attn, dtype, *_ = MOE_SHAPES[i]
    prefix = f"{mt} V{V} d{h} F{f} h{nh} kv{kv}{f' hd{hd}' if hd else ''} S{S} B{B} E{E} k{k}"
    p = next(p for p in base if p["name"].startswith(prefix))
    c = dict(p["config"], output_router_logits=True, router_aux_loss_coef=coef)
    name = p["name"][:p["name"].index(f" {attn} {dtype} ")] + (f" {attn} {dtype} tp{tp} rank{rank} aux_loss={coef}"
                                                              f"{f' checkpoint={ck}' if ck != 'none' else ''}{tag} {kind}")
    return dict(p, name=name, config=c, tp=tp, rank=rank, kind=kind, checkpoint=ck, **extra)


def aux_loss_grid():
    base = [p for p in moe_grid() if p["config"]["model_type"] != "deepseek_v3"]
    pts = []
    for i, tp, rank, coef, ck, kind in AUX_LOSS:
        pts.append(aux_point(base, i, tp, rank, coef, ck, kind))
    return pts


# bf16 autocast under the MoE plans: (name prefix, tp, rank, kind), over moe_grid()'s points.
MOE_AUTOCAST = [
    ("mixtral V1000 d64", 2, 0, "training"),
    ("mixtral V1024 d128", 4, 3, "training"),
    ("qwen3_moe V1000 d128", 2, 1, "training"),
    ("qwen3_moe V1000 d64", 2, 0, "forward"),
    ("qwen2_moe V1000 d64", 2, 1, "training"),
    ("qwen2_moe V776 d96", 4, 0, "inference"),
    ("deepseek_v3 d64 Fd160", 2, 0, "training"),
    ("deepseek_v3 d128", 4, 3, "training"),
    # Inference (torch.no_grad()): every experts implementation, fp32 and bf16 weights.
    ("mixtral V1000 d64", 2, 1, "inference"),
    ("mixtral V512 d64", 2, 0, "inference"),
    ("qwen3_moe V1000 d128", 2, 0, "inference"),
    ("qwen3_moe V776 d96", 4, 3, "inference"),
    ("qwen2_moe V1000 d128", 2, 1, "inference"),
    ("deepseek_v3 d64 Fd160", 4, 0, "inference"),
    ("deepseek_v3 d64 Fd96", 2, 1, "inference"),
]


# The router's loss under bf16 autocast and the MoE plans: (MOE_SHAPES index, tp, rank,
# router_aux_loss_coef, kind), aux_loss_grid()'s points under accelerate's prepared forward.
# (fp16 is not in the grid: its GradScaler stops in PyTorch under tensor parallelism.)
MOE_AUTOCAST_AUX_LOSS = [
    (0, 2, 1, 0.02, "training"),
    (1, 4, 0, 0.001, "forward"),
    (2, 2, 0, 0.02, "training"),
    (3, 2, 0, 0.001, "forward"),
    (4, 2, 1, 0.02, "training"),
    (5, 4, 3, 0.001, "training"),
    (6, 2, 1, 0.02, "training"),
    (8, 4, 3, 0.001, "forward"),
]


def moe_autocast_grid():
    base = moe_grid()
    pts = []
    for prefix, tp, rank, kind in MOE_AUTOCAST:
        p = next(p for p in base if p["name"].startswith(prefix) and p["tp"] == tp and p.get("checkpoint", "none") == "none")
        name = p["name"].replace(f" tp{tp} rank{p['rank']} {p['kind']}", f" tp{tp} rank{rank} autocast=bf16 amp=accelerate {kind}")
        pts.append(dict(p, name=name, rank=rank, kind=kind, autocast="bf16", amp="accelerate"))
    moe = [p for p in base if p["config"]["model_type"] != "deepseek_v3" and p.get("checkpoint", "none") == "none"]
    for i, tp, rank, coef, kind in MOE_AUTOCAST_AUX_LOSS:
        pts.append(aux_point(moe, i, tp, rank, coef, "none", kind, " autocast=bf16 amp=accelerate", autocast="bf16", amp="accelerate"))
    return pts


def header():
    import torch
    import transformers
    return dict(generator="tools/pytorch/measure_tp_hf.py", torch=torch.__version__, transformers=transformers.__version__,
                counted="requested bytes of blocks >= 512 B, absolute levels, the third iteration, rank `rank` of tp, transformers' own tp plan")


def main():
    import measure_cs336 as M
    if "--moe" in sys.argv:
        sys.argv.remove("--moe")
        M.grid_main(__doc__, __file__, one, moe_grid, OUT_MOE, header)
    elif "--moe-autocast" in sys.argv:
        sys.argv.remove("--moe-autocast")
        M.grid_main(__doc__, __file__, one, moe_autocast_grid, OUT_MOE_AUTOCAST, header)
    elif "--aux-loss" in sys.argv:
        sys.argv.remove("--aux-loss")
        M.grid_main(__doc__, __file__, one, aux_loss_grid, OUT_AUX_LOSS, header)
    elif "--autocast" in sys.argv:
        sys.argv.remove("--autocast")
        M.grid_main(__doc__, __file__, one, autocast_grid, OUT_AUTOCAST, header)
    else:
        M.grid_main(__doc__, __file__, one, grid, OUT, header)


if __name__ == "__main__":
    main()
