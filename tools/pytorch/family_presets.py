#!/usr/bin/env python3
"""family_presets.py -- the parameter counts transformers itself gives the presets of issue 30's
dense families: each committed config.json (tests/fixtures/hf_models/<folder>/config.json) read
by AutoConfig and built by AutoModelForCausalLM.from_config on the meta device (tied weights
counted once, as `model.parameters()` yields them), written to
tests/fixtures/hf_grid/family_presets.json for tests/families_presets.rs.

    python3 tools/pytorch/family_presets.py
"""
import json
import os

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# preset name -> fixture folder
PRESETS = {"Phi-3-mini": "Phi-3-mini-4k-instruct", "OLMo-2-7B": "OLMo-2-1124-7B", "Gemma-2-9B": "gemma-2-9b",
           # google/gemma-3-27b-it's text_config as a gemma3_text config.json (Gemma3ForCausalLM)
           "Gemma-3-27B": "gemma-3-27b-text"}


def main():
    rows = []
    for name, folder in PRESETS.items():
        cfg = AutoConfig.from_pretrained(os.path.join(ROOT, "tests/fixtures/hf_models", folder))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        shapes = {n: list(p.shape) for n, p in model.named_parameters()}
        rows.append(dict(preset=name, folder=folder, model_type=cfg.model_type,
                         parameters=sum(p.numel() for p in model.parameters()),
                         layer0=[[n, s] for n, s in shapes.items() if ".layers.0." in n]))
        print(name, rows[-1]["parameters"])
    out = os.path.join(ROOT, "tests/fixtures/hf_grid/family_presets.json")
    with open(out, "w") as f:
        json.dump(dict(generator="tools/pytorch/family_presets.py", torch=torch.__version__,
                       transformers=transformers.__version__, presets=rows), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
