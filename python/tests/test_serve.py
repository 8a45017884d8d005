"""vramscope.serve(): vLLM 0.33.0's start-up plan as a dict, the same figures and log lines as
`vramscope serve` prints, its --find answers, and bad keywords as ValueError."""
import shutil
import subprocess

import pytest

import vramscope

CLI = shutil.which("vramscope") or pytest.fail("the package's vramscope command is not on PATH")


def cli(*words):
    return subprocess.run([CLI, "serve", *words], capture_output=True, text=True)


def test_plan_matches_the_cli():
    r = vramscope.serve("Llama-3.1-8B", gpu="H100-80GB", enforce_eager=True)
    assert r["vllm_version"] == "0.33.0" and r["fits"] and r["error"] is None
    p = r["plan"]
    # The figures tests/serve.rs derives by hand.
    assert p["weights"] == 8_030_261_248 * 2
    assert p["activation_peak"] == 1_922_564_096
    assert p["bytes_per_block"] == 2_097_152
    assert p["num_blocks"] == 28_726
    assert p["kv_cache_tokens"] == 459_616
    assert r["config"]["max_num_batched_tokens"] == 8192 and r["config"]["max_num_seqs"] == 1024
    out = cli("--preset", "Llama-3.1-8B", "--gpu", "H100-80GB", "--enforce-eager")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == r["log"]


def test_tensor_parallel_halves_the_shards():
    one = vramscope.serve("Llama-3.1-8B", enforce_eager=True)["plan"]
    two = vramscope.serve("Llama-3.1-8B", enforce_eager=True, tensor_parallel_size=2)
    p = two["plan"]
    assert two["config"]["tensor_parallel_size"] == 2
    assert p["num_kv_heads_per_rank"] == 4 and p["bytes_per_block"] * 2 == one["bytes_per_block"]
    # Every sharded matrix halves; the norms stay whole on each rank.
    assert one["weights"] // 2 < p["weights"] < one["weights"] // 2 + 2 * 65 * 4096 * 2


def test_find_max_model_len_is_vllms_estimate():
    r = vramscope.serve("Llama-3.1-8B", gpu="RTX4090-24GB", enforce_eager=True)
    assert not r["fits"] and "estimated maximum model length is" in r["error"]
    longest = int(r["error"].split("estimated maximum model length is ")[1].split(".")[0])
    f = vramscope.serve("Llama-3.1-8B", gpu="RTX4090-24GB", enforce_eager=True, find="max-model-len")
    assert f["find"]["question"] == "max-model-len" and f["find"]["answer"] == longest
    assert f["fits"] and f["config"]["max_model_len"] == longest
    assert f["log"][1].startswith(f"Auto-fit max_model_len: reduced from 131072 to {longest}")


def test_find_max_num_seqs():
    f = vramscope.serve("Llama-3.1-8B", enforce_eager=True, max_model_len=32768, find="max-num-seqs")
    n = f["find"]["answer"]
    p = f["plan"]
    assert n >= 1 and f["config"]["max_num_seqs"] == n
    assert n * p["blocks_per_request"] < p["num_blocks"]
    more = vramscope.serve("Llama-3.1-8B", enforce_eager=True, max_model_len=32768, max_num_seqs=n + 1)["plan"]
    assert (n + 1) * more["blocks_per_request"] >= more["num_blocks"]


@pytest.mark.parametrize(
    "flags, name",
    [
        (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
        (dict(block_size=24), "block_size"),
        (dict(tensor_parallel_size=3), "tensor_parallel_size"),
        (dict(enforce_eager=False), "enforce_eager"),
    ],
)
def test_bad_keywords_are_value_errors(flags, name):
    kw = dict(enforce_eager=True)
    kw.update(flags)
    with pytest.raises(ValueError, match=name):
        vramscope.serve("Llama-3.1-8B", **kw)
