#!/usr/bin/env python3
"""moe_meta_params.py -- parameter counts of transformers 5.23's mixture-of-experts models as its
own classes build them on the meta device (total, and active per token: the router's top-k
experts of each sparse layer instead of all of them), for the published configs vramscope names
(Mixtral-8x7B, Qwen3-30B-A3B, Qwen1.5-MoE-A2.7B) and small ones; written to tests/fixtures/moe_grid/meta_params.json.

    python3 moe_meta_params.py
    python3 moe_meta_params.py --gpt-oss   # gpt-oss-20b, gpt-oss-120b and small gpt_oss configs
"""
import json
import os
import sys

import torch
import transformers as T

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid/meta_params.json")
# gpt-oss's own file (tests/gptoss_grid.rs reads it).
OUT_GPT_OSS = os.path.join(HERE, "../../tests/fixtures/moe_grid/gpt_oss_meta_params.json")

CONFIGS = {
    # mistralai/Mixtral-8x7B-v0.1 config.json
    "Mixtral-8x7B": dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, num_local_experts=8,
                         num_experts_per_tok=2, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-5,
                         tie_word_embeddings=False),
    # Qwen/Qwen3-30B-A3B config.json
    "Qwen3-30B-A3B": dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                          num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                          vocab_size=151936, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                          decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=40960,
                          rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False),
    # Qwen/Qwen1.5-MoE-A2.7B config.json (Qwen2-MoE: 60 experts and a shared expert)
    "Qwen1.5-MoE-A2.7B": dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
                              shared_expert_intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
                              num_key_value_heads=16, vocab_size=151936, num_experts=60, num_experts_per_tok=4,
                              norm_topk_prob=False, decoder_sparse_step=1, max_position_embeddings=8192,
                              rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen2_moe-small-no-qkv-bias": dict(model_type="qwen2_moe", hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                        shared_expert_intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=500, num_experts=6, num_experts_per_tok=2,
                                        qkv_bias=False, tie_word_embeddings=True),
    "mixtral-small-tied": dict(model_type="mixtral", hidden_size=96, intermediate_size=160, num_hidden_layers=3,
                               num_attention_heads=6, num_key_value_heads=2, vocab_size=777, num_local_experts=6,
                               num_experts_per_tok=3, tie_word_embeddings=True),
    "qwen3_moe-small-dense-layers": dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=200,
                                         moe_intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=32, vocab_size=1000, num_experts=10,
                                         num_experts_per_tok=4, decoder_sparse_step=2, mlp_only_layers=[2],
                                         tie_word_embeddings=False),
}

# openai/gpt-oss-20b and -120b config.json, less their quantization_config (MXFP4: vramscope
# models the bf16 load), and small ones.
_GPT_OSS = dict(model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, head_dim=64, num_attention_heads=64,
                num_key_value_heads=8, vocab_size=201088, num_experts_per_tok=4, experts_per_token=4, sliding_window=128,
                max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000, attention_bias=True,
                swiglu_limit=7.0, tie_word_embeddings=False, eos_token_id=200002, pad_token_id=199999,
                rope_scaling=dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                  original_max_position_embeddings=4096))
GPT_OSS_CONFIGS = {
    "gpt-oss-20b": dict(_GPT_OSS, num_hidden_layers=24, num_local_experts=32,
                        layer_types=["sliding_attention", "full_attention"] * 12),
    "gpt-oss-120b": dict(_GPT_OSS, num_hidden_layers=36, num_local_experts=128,
                         layer_types=["sliding_attention", "full_attention"] * 18),
    "gpt_oss-small-no-bias-tied": dict(model_type="gpt_oss", hidden_size=64, intermediate_size=48, head_dim=16,
                                       num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                       vocab_size=500, num_local_experts=6, num_experts_per_tok=2, sliding_window=8,
                                       attention_bias=False, tie_word_embeddings=True),
    "gpt_oss-small-full-layers": dict(model_type="gpt_oss", hidden_size=96, intermediate_size=80, head_dim=24,
                                      num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=3,
                                      vocab_size=700, num_local_experts=10, num_experts_per_tok=3, sliding_window=16,
                                      layer_types=["full_attention", "full_attention"]),
}


def counts(cfg):
    with torch.device("meta"):
        model = T.AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters())
    routed, active_routed = 0, 0
    for m in model.modules():
        if type(m).__name__.endswith("Experts"):
            n = sum(p.numel() for p in m.parameters())
            routed += n
            active_routed += n // m.num_experts * cfg.num_experts_per_tok
    return dict(total=total, active=total - routed + active_routed)


def write(path, configs):
    out = {}
    for name, kw in configs.items():
        kw = dict(kw)
        cfg = T.AutoConfig.for_model(kw.pop("model_type"), **kw)
        out[name] = dict(config=configs[name], **counts(cfg))
        print(name, out[name]["total"], out[name]["active"])
    doc = dict(generator="tools/pytorch/moe_meta_params.py", torch=torch.__version__, transformers=T.__version__, models=out)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    if "--gpt-oss" in sys.argv:
        return write(OUT_GPT_OSS, GPT_OSS_CONFIGS)
    out = {}
    for name, kw in CONFIGS.items():
        kw = dict(kw)
        cfg = T.AutoConfig.for_model(kw.pop("model_type"), **kw)
        out[name] = dict(config=CONFIGS[name], **counts(cfg))
        print(name, out[name]["total"], out[name]["active"])
    doc = dict(generator="tools/pytorch/moe_meta_params.py", torch=torch.__version__, transformers=T.__version__, models=out)
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
