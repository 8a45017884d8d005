#!/usr/bin/env python3
"""measure_moe.py -- what eager PyTorch allocates when transformers' mixture-of-experts causal LMs
(Mixtral, Qwen3-MoE, Qwen2-MoE with its shared expert, gpt-oss, DeepSeek-V3) run, per phase, mode-free on CPU: the ground truth of vramscope's MoE
(issue #30), measured with measure_hf.py's machinery (one torch.profiler session, requested bytes
of blocks >= 512 B, absolute levels; the step is the Trainer's).

Routing. How many tokens each expert gets depends on the router's values, which random weights
make arbitrary. The script forces it so PyTorch routes as vramscope's `--routing` says:
  balanced  token t goes to experts (t*k + j) mod E, j < k: every expert gets T*k/E (±1)
  worst     every token goes to experts 0 … k-1
The router (`MixtralTopKRouter` / `Qwen3MoeTopKRouter` / `GptOssTopKRouter` / `DeepseekV3TopkRouter`) runs unchanged -- linear, softmax in
fp32, topk, renormalisation -- and a wrapper then overwrites the top-k indices it returns in place
(`router_indices.data.copy_(forced)`: `.data`, as topk saved the indices for its
backward). `forced` is built before the profiler session starts, so the
copy allocates nothing the profiler sees and the op sequence is the model's own.

Experts implementations (`experts_implementation`, transformers' name): eager (the loop over the
experts that were hit, index_add_), batched_mm (a bmm over the selected weights per token-expert
pair), grouped_mm (torch.nn.functional.grouped_mm over tokens sorted by expert; it has a CPU
kernel in torch 2.15, so a CPU run dispatches it).

The router's auxiliary loss: off (`output_router_logits` false, the configs' default) unless the
point sets output_router_logits (and router_aux_loss_coef), make_aux_loss_grid.py's points. The
OutputRecorder hooks then keep index 0 of each router's output -- the logits of the router's own
linear, which the wrapper above leaves untouched (it overwrites only the indices) -- and
load_balancing_loss_func runs its own softmax and top-k on them: tensors of the same shapes
whichever experts win, so the aux loss allocates the same bytes under any routing.

Run:  python3 measure_moe.py --model-type mixtral --num-experts 4 --top-k 2 --experts grouped_mm \
          --routing balanced --profile-type training [--attn eager] [--dtype bf16] [--json out.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import measure_cs336 as M
import measure_hf as H

MODEL_TYPES = ("mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3")
EXPERTS = ("eager", "batched_mm", "grouped_mm")
ROUTINGS = ("balanced", "worst")


def forced_indices(tokens, top_k, experts, routing):
    """The (tokens, top_k) int64 expert ids `routing` sends each token to."""
    if routing == "worst":
        return torch.arange(top_k).repeat(tokens, 1)
    t = torch.arange(tokens).unsqueeze(1) * top_k + torch.arange(top_k).unsqueeze(0)
    return t % experts


def moe_config(p):
    """A MixtralConfig / Qwen3MoeConfig with the point's shape and experts implementation."""
    import transformers as T
    kw = dict(hidden_size=p["hidden_size"], intermediate_size=p["intermediate_size"], num_hidden_layers=p["num_layers"],
              num_attention_heads=p["num_heads"], num_key_value_heads=p["num_kv_heads"], vocab_size=p["vocab_size"],
              max_position_embeddings=p.get("max_position_embeddings", 4096), tie_word_embeddings=p.get("tied", False),
              use_cache=p.get("use_cache", True), rms_norm_eps=1e-6, num_experts_per_tok=p["top_k"],
              output_router_logits=p.get("output_router_logits", False))
    if "router_aux_loss_coef" in p:
        kw["router_aux_loss_coef"] = p["router_aux_loss_coef"]
    if p["model_type"] == "mixtral":
        # MixtralConfig's sliding_window (default None) when the point names one: every layer slides.
        cfg = T.MixtralConfig(num_local_experts=p["num_experts"], sliding_window=p.get("sliding_window"), **kw)
    elif p["model_type"] == "gpt_oss":
        # gpt-oss: q/k/v/o biases and attention sinks, layer_types alternating sliding and
        # full (the config's default), YaRN rope (its default rope_parameters), biased experts
        # with the clamped SwiGLU. Only eager attention dispatches (_supports_sdpa = False).
        cfg = T.GptOssConfig(num_local_experts=p["num_experts"], head_dim=p.get("head_dim") or 64,
                             sliding_window=p["sliding_window"], **kw)
    elif p["model_type"] == "deepseek_v3":
        # DeepSeek-V3: multi-head latent attention (q_lora_rank None: q_proj), the first
        # first_k_dense_replace layers dense (dense_intermediate_size), then the sigmoid router with
        # group-limited top-k and n_shared_experts as one shared MLP. intermediate_size is one
        # routed expert's (moe_intermediate_size). rope_interleave and the rope type as the point says.
        kw["intermediate_size"] = p["dense_intermediate_size"]
        rope = dict(rope_type="default", rope_theta=10000.0)
        if p.get("yarn_factor"):
            rope = dict(rope_type="yarn", rope_theta=10000.0, factor=p["yarn_factor"], mscale=1.0, mscale_all_dim=1.0,
                        beta_fast=32, beta_slow=1, original_max_position_embeddings=p.get("original_max_position_embeddings", p.get("max_position_embeddings", 4096) // 4))
        cfg = T.DeepseekV3Config(n_routed_experts=p["num_experts"], moe_intermediate_size=p["intermediate_size"],
                                 n_group=p["n_group"], topk_group=p["topk_group"],
                                 first_k_dense_replace=p["first_k_dense_replace"], n_shared_experts=p["n_shared_experts"],
                                 q_lora_rank=p["q_lora_rank"], kv_lora_rank=p["kv_lora_rank"],
                                 qk_nope_head_dim=p["qk_nope_head_dim"], qk_rope_head_dim=p["qk_rope_head_dim"],
                                 v_head_dim=p["v_head_dim"], rope_interleave=p.get("rope_interleave", True),
                                 norm_topk_prob=p.get("norm_topk_prob", True), routed_scaling_factor=2.5,
                                 rope_parameters=rope, **kw)
    elif p["model_type"] == "qwen2_moe":
        # Qwen2-MoE: a shared expert (a dense MLP of shared_expert_intermediate_size) beside the
        # routed ones, scaled by sigmoid(shared_expert_gate(x)).
        if p.get("sliding_window"):
            # Qwen2MoeConfig's window (use_sliding_window): layer_types slides every other layer
            # (0, 2, ...) below max_window_layers (its default 28), the rest full.
            kw.update(use_sliding_window=True, sliding_window=p["sliding_window"], max_window_layers=p.get("max_window_layers", 28))
        cfg = T.Qwen2MoeConfig(num_experts=p["num_experts"], moe_intermediate_size=p["intermediate_size"],
                               shared_expert_intermediate_size=p["shared_intermediate_size"],
                               norm_topk_prob=p.get("norm_topk_prob", False), **kw)
    else:
        kw["intermediate_size"] = p.get("dense_intermediate_size", p["intermediate_size"])
        if p.get("sliding_window"):
            # Qwen3MoeConfig's window (use_sliding_window) covers every layer (no layer_types).
            kw.update(use_sliding_window=True, sliding_window=p["sliding_window"])
        cfg = T.Qwen3MoeConfig(num_experts=p["num_experts"], moe_intermediate_size=p["intermediate_size"],
                               norm_topk_prob=p.get("norm_topk_prob", True), head_dim=p.get("head_dim") or 128, **kw)
    cfg._experts_implementation = p["experts"]
    return cfg


def install_routing(p):
    """Wrap the family's router so its top-k indices are the point's routing (see the docstring)."""
    import transformers as T
    router = {"mixtral": T.models.mixtral.modeling_mixtral.MixtralTopKRouter,
              "qwen3_moe": T.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeTopKRouter,
              "qwen2_moe": T.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeTopKRouter,
              "gpt_oss": T.models.gpt_oss.modeling_gpt_oss.GptOssTopKRouter,
              "deepseek_v3": T.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3TopkRouter}[p["model_type"]]
    forced = forced_indices(p["batch"] * p["seq"], p["top_k"], p["num_experts"], p["routing"])
    original = getattr(router, "_vramscope_original", router.forward)
    router._vramscope_original = original

    def forward(self, hidden_states):
        logits, scores, indices = original(self, hidden_states)
        indices.data.copy_(forced)  # .data: topk saved the indices for backward; no version bump
        return logits, scores, indices

    router.forward = forward
    return forced


def measure(p, kind):
    forced = install_routing(p)
    H.hf_config = moe_config
    per, log, info = H.measure(p, kind)
    info["experts_implementation"] = p["experts"]
    info["routing"] = p["routing"]
    info["tokens_per_expert"] = torch.bincount(forced.reshape(-1), minlength=p["num_experts"]).tolist()
    return per, log, info


def main(argv=None):
    a = argparse.ArgumentParser(description="Per-phase peak memory of a transformers MoE causal LM, mode-free (CPU profiler).")
    H.add_shape_args(a)
    a.set_defaults(model_type="mixtral")
    for act in a._actions:
        if act.dest == "model_type":
            act.choices = MODEL_TYPES
    a.add_argument("--num-experts", type=int, default=4)
    a.add_argument("--top-k", type=int, default=2)
    a.add_argument("--shared-intermediate-size", type=int, default=64, help="qwen2_moe's shared expert width")
    a.add_argument("--sliding-window", type=int, default=None,
                   help="the attention window: gpt_oss's sliding layers' (default 8); mixtral, qwen3_moe, qwen2_moe: none unless given")
    a.add_argument("--max-window-layers", type=int, default=28, help="qwen2_moe with a window: its layers 0, 2, ... below this slide")
    a.add_argument("--experts", choices=EXPERTS, default="grouped_mm")
    a.add_argument("--routing", choices=ROUTINGS, default="balanced")
    a.add_argument("--profile-type", choices=M.PROFILE_TYPES, default="training")
    a.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    a.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    a.add_argument("--autocast", choices=("none", "bf16", "fp16"), default="none",
                   help="the Trainer's bf16=True / fp16=True: torch.autocast('cpu', bfloat16 / float16) around forward "
                        "and loss (fp16: with a GradScaler)")
    a.add_argument("--checkpoint", choices=H.CHECKPOINTS, default="none")
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--json")
    a.add_argument("--events")
    x = a.parse_args(argv)
    torch.set_num_threads(x.threads)
    p = dict(model_type=x.model_type, hidden_size=x.hidden_size, intermediate_size=x.intermediate_size,
             num_layers=x.num_layers, num_heads=x.num_heads, num_kv_heads=x.num_kv_heads, head_dim=x.head_dim,
             vocab_size=x.vocab_size, max_position_embeddings=x.max_position_embeddings, tied=x.tied, seq=x.seq,
             batch=x.batch, attn=x.attn, dtype=x.dtype, use_cache=True, logits_to_keep=0, checkpoint=x.checkpoint,
             optimizer="adamw_torch_fused", max_grad_norm=1.0, attention_mask="none", num_experts=x.num_experts,
             top_k=x.top_k, experts=x.experts, routing=x.routing, shared_intermediate_size=x.shared_intermediate_size,
             sliding_window=x.sliding_window if x.sliding_window is not None or x.model_type != "gpt_oss" else 8,
             max_window_layers=x.max_window_layers)
    if x.autocast != "none":
        p["autocast"] = x.autocast
    per, log, info = measure(p, x.profile_type)
    if x.events:
        M.write_events(x.events, log)
    print(f"moe {x.profile_type}: {p}; {info}")
    M.print_phases(per)
    if x.json:
        with open(x.json, "w") as f:
            json.dump(dict(point=p, profile_type=x.profile_type, info=info, phases=per), f, indent=1)


if __name__ == "__main__":
    main()
