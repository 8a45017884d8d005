#!/usr/bin/env python3
"""moe_meta_params.py -- parameter counts of transformers 5.23's mixture-of-experts models as its
own classes build them on the meta device (total, and active per token: the router's top-k
experts of each sparse layer instead of all of them), for the published configs vramscope names
(Mixtral-8x7B, Qwen3-30B-A3B, Qwen1.5-MoE-A2.7B) and small ones; written to tests/fixtures/moe_grid/meta_params.json.

    python3 moe_meta_params.py
"""
import json
import os

import torch
import transformers as T

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "../../tests/fixtures/moe_grid/meta_params.json")

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


def main():
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
