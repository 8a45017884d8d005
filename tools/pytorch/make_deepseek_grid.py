#!/usr/bin/env python3
"""make_deepseek_grid.py -- the fixture grid of DeepSeek-V3 (`model_type` deepseek_v3): what
transformers 5.23's DeepseekV3ForCausalLM allocates, per phase, measured by measure_moe.py
(mode-free, one torch.profiler session per measurement, requested bytes of blocks >= 512 B,
absolute; routing forced to balanced or worst as vramscope's `--routing`, by overwriting the
top-k indices DeepseekV3TopkRouter returns), written to tests/fixtures/moe_grid/deepseek_v3.json.

The grid: fourteen shapes, each measured as inference, forward and training, covering multi-head
latent attention with q_lora_rank set and null (q_proj), v_head_dim below, equal to and above
qk_nope_head_dim, rope_interleave on and off, one YaRN point (its mscale changes the softmax
scale only), eager and sdpa attention, fp32 and bf16 weights; the MoE with dense first layers
(first_k_dense_replace 0, 1, 2) and every layer dense, n_shared_experts 0, 1 and 2, group-limited
top-k (n_group 1-4), top-k 1-4, 4-16 experts, every experts implementation that runs on CPU
(eager, batched_mm, grouped_mm), balanced and worst routing; then three training points under
gradient checkpointing (non-reentrant and reentrant). The router's auxiliary loss
(output_router_logits) is off, the config's default.

    python3 make_deepseek_grid.py            # the whole grid (JOBS worker processes, default 1)
    python3 make_deepseek_grid.py --only grouped_mm   # re-measure the points whose name contains it
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch

import make_hf_grid as G
import make_moe_grid as MG

OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid")

# (hidden, dense I, expert I, layers, heads, vocab, S, B, experts, top_k, n_group, topk_group,
#  first_k_dense_replace, n_shared_experts, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head,
#  rope_interleave, yarn factor (0: default rope), experts_implementation, routing, attn, dtype)
POINTS = [
    (64, 160, 32, 2, 4, 1000, 16, 2, 8, 2, 2, 1, 1, 1, 48, 32, 16, 8, 12, True, 0, "grouped_mm", "balanced", "sdpa", "fp32"),
    (96, 128, 48, 2, 6, 777, 24, 1, 8, 1, 1, 1, 0, 1, None, 40, 16, 8, 16, True, 0, "eager", "balanced", "eager", "bf16"),
    (64, 96, 40, 3, 4, 512, 20, 2, 4, 3, 2, 2, 2, 2, 32, 24, 8, 8, 20, False, 0, "batched_mm", "worst", "sdpa", "bf16"),
    (128, 192, 32, 2, 8, 1000, 12, 2, 16, 4, 4, 2, 1, 0, 64, 48, 16, 16, 16, True, 0, "grouped_mm", "worst", "eager", "fp32"),
    (64, 128, 32, 2, 2, 640, 32, 1, 6, 2, 3, 2, 0, 0, None, 32, 24, 8, 24, True, 0, "eager", "worst", "sdpa", "fp32"),
    (96, 160, 48, 2, 6, 900, 16, 3, 12, 2, 4, 3, 1, 1, 48, 32, 16, 8, 8, False, 4.0, "batched_mm", "balanced", "eager", "bf16"),
    (64, 128, 32, 2, 4, 700, 20, 2, 10, 3, 2, 1, 0, 2, 40, 24, 16, 8, 12, True, 0, "grouped_mm", "balanced", "eager", "bf16"),
    (80, 112, 40, 3, 4, 800, 18, 1, 8, 2, 4, 2, 1, 1, None, 32, 16, 16, 16, False, 0, "grouped_mm", "worst", "sdpa", "bf16"),
    (64, 96, 24, 2, 4, 600, 24, 2, 4, 1, 1, 1, 0, 1, 32, 16, 8, 8, 8, True, 4.0, "eager", "balanced", "sdpa", "fp32"),
    (96, 144, 40, 2, 6, 1000, 12, 2, 16, 2, 8, 4, 1, 1, 48, 40, 16, 8, 24, True, 0, "batched_mm", "worst", "sdpa", "fp32"),
    (64, 160, 32, 2, 4, 500, 16, 2, 8, 2, 2, 1, 2, 1, 48, 32, 16, 8, 12, True, 0, "grouped_mm", "balanced", "sdpa", "bf16"),
    (128, 96, 48, 2, 4, 1000, 16, 2, 5, 4, 1, 1, 1, 1, 64, 32, 32, 16, 32, False, 0, "eager", "worst", "eager", "fp32"),
    (64, 128, 32, 1, 4, 800, 20, 2, 6, 2, 2, 2, 0, 1, None, 24, 16, 8, 16, True, 0, "grouped_mm", "worst", "eager", "bf16"),
    (96, 128, 40, 2, 6, 640, 16, 1, 12, 3, 3, 1, 1, 2, 40, 32, 8, 8, 16, True, 0, "grouped_mm", "balanced", "sdpa", "fp32"),
]


def point(row):
    (h, fd, f, L, nh, V, S, B, E, k, ng, tg, fk, ns, ql, kl, nope, rope, vh, inter, yarn, impl, routing, attn,
     dtype) = row
    return dict(model_type="deepseek_v3", hidden_size=h, intermediate_size=f, dense_intermediate_size=fd, num_layers=L,
                num_heads=nh, num_kv_heads=nh, head_dim=None, vocab_size=V, max_position_embeddings=4096, tied=False,
                seq=S, batch=B, attn=attn, dtype=dtype, use_cache=True, logits_to_keep=0, checkpoint="none",
                optimizer="adamw_torch_fused", max_grad_norm=1.0, attention_mask="none", num_experts=E, top_k=k,
                experts=impl, routing=routing, n_group=ng, topk_group=tg, first_k_dense_replace=fk,
                n_shared_experts=ns, q_lora_rank=ql, kv_lora_rank=kl, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                v_head_dim=vh, rope_interleave=inter, yarn_factor=yarn)


def name_of(p, kind):
    ck = "" if p["checkpoint"] == "none" else f" checkpoint={p['checkpoint']}"
    return (f"deepseek_v3 d{p['hidden_size']} Fd{p['dense_intermediate_size']} F{p['intermediate_size']} "
            f"L{p['num_layers']} dense{p['first_k_dense_replace']} h{p['num_heads']} V{p['vocab_size']} "
            f"S{p['seq']} B{p['batch']} E{p['num_experts']} k{p['top_k']} g{p['n_group']}/{p['topk_group']} "
            f"shared{p['n_shared_experts']} q{p['q_lora_rank']} kv{p['kv_lora_rank']} "
            f"nope{p['qk_nope_head_dim']} rope{p['qk_rope_head_dim']} v{p['v_head_dim']}"
            f"{' interleave' if p['rope_interleave'] else ''}{' yarn' + str(p['yarn_factor']) if p['yarn_factor'] else ''} "
            f"{p['experts']} {p['routing']} {p['attn']} {p['dtype']}{ck} {kind}")


CHECKPOINTED = [(0, False), (1, True), (7, False)]


def grid():
    todo = [(point(r), kind) for r in POINTS for kind in MG.TYPES3]
    for i, reentrant in CHECKPOINTED:
        p = point(POINTS[i])
        p["checkpoint"] = "reentrant" if reentrant else "non-reentrant"
        todo.append((p, "training"))
    return todo


def run_one(job):
    r = MG.run_one(job)
    r["name"] = name_of(*job)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", help="re-measure the points whose name contains this; keep the fixture's others")
    a = ap.parse_args()
    import transformers
    path = os.path.join(a.out, "deepseek_v3.json")
    if a.only:
        doc, t0 = G.measure_only(path, grid(), run_one, name_of, a.only, maxtasksperchild=1)
        return G.write_fixture(path, doc, t0)
    results, t0 = G.measure_all(grid(), run_one, maxtasksperchild=1)
    doc = dict(generator="tools/pytorch/make_deepseek_grid.py", torch=torch.__version__,
               transformers=transformers.__version__,
               counted="requested bytes of blocks >= 512 B, absolute; routing forced by overwriting the router's "
                       "top-k indices in place (measure_moe.py); CPU-only kernel scratch left out, as make_grid.py",
               points=results)
    G.write_fixture(path, doc, t0)


if __name__ == "__main__":
    main()
