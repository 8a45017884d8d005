"""The Python API against the command line it mirrors: the same figures as summary.json, the
same error messages, files that open where the CLI's do."""
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

import vramscope

CLI = shutil.which("vramscope") or pytest.fail("the package's vramscope command is not on PATH")

TINY = dict(
    model_type="llama", hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256, tie_word_embeddings=False,
)


def cli_summary(tmp_path, *words):
    out = tmp_path / "cli"
    r = subprocess.run([CLI, "profile", *words, "--out-dir", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text())


def comparable(summary):
    """summary.json less what only a written run has (its output set and file names)."""
    s = dict(summary)
    s.pop("run_id", None)
    s["runs"] = [{k: v for k, v in r.items() if k not in ("snapshot", "report")} for r in s["runs"]]
    return s


def test_profile_matches_the_cli_summary(tmp_path):
    r = vramscope.profile(model="2.7B", device="meta", context_length=512)
    want = cli_summary(tmp_path, "--model", "2.7B", "--device", "meta", "--context-length", "512")
    assert r.peak_allocated_gib == want["runs"][0]["peak_allocated_gib"]
    assert r.peak_reserved_bytes == want["runs"][0]["peak_reserved_bytes"]
    assert comparable(r.summary) == comparable(want)


def test_qlora_keywords_are_peft_and_bitsandbytes_names(tmp_path):
    flags = dict(model="Llama-3.1-8B", device="meta", num_layers=2, context_length=256, load_in_4bit=True, bnb_4bit_quant_type="nf4",
                 bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype="bfloat16", lora_r=16, lora_alpha=32, target_modules="all-linear",
                 optimizer="paged_adamw_8bit")
    r = vramscope.profile(**flags)
    want = cli_summary(tmp_path, "--model", "Llama-3.1-8B", "--device", "meta", "--num-layers", "2", "--context-length", "256", "--load-in-4bit",
                       "--bnb-4bit-quant-type", "nf4", "--bnb-4bit-use-double-quant", "--bnb-4bit-compute-dtype", "bfloat16", "--lora-r", "16",
                       "--lora-alpha", "32", "--target-modules", "all-linear", "--optimizer", "paged_adamw_8bit")
    assert comparable(r.summary) == comparable(want)
    assert r.summary["parameters"]["trainable"] == 2 * 16 * (4096 * 2 + 4096 + 1024 + 4096 + 1024 + 4096 * 2 + (4096 + 14336) * 3)
    assert r.summary["model"]["hf"]["bnb"]["quant_type"] == "nf4"


def test_several_runs_and_their_tables(tmp_path):
    r = vramscope.profile(model="2.7B", device="meta", context_length=[128, 256], profile_type=["forward", "training"], gpu="H100-80GB")
    want = cli_summary(tmp_path, "--model", "2.7B", "--device", "meta", "--context-length", "128,256", "--profile-type", "forward,training", "--gpu", "H100-80GB")
    assert comparable(r.summary) == comparable(want)
    assert [(x.context_length, x.profile_type) for x in r.runs] == [(128, "forward"), (128, "training"), (256, "forward"), (256, "training")]
    assert r.peak_allocated_bytes == max(x["peak_allocated_bytes"] for x in want["runs"])
    phases = {(p["context_length"], p["profile_type"], p["phase"]): p["peak_allocated_bytes"] for p in r.phases}
    assert phases[(256, "training", "backward")] == want["runs"][3]["peak"]["phase_peaks"]["backward"]
    cats = [c for c in r.categories if c["context_length"] == 128 and c["profile_type"] == "training"]
    assert {c["category"] for c in cats} >= {"parameter", "gradient", "optimizer_state"}
    assert sum(c["allocated_bytes"] for c in cats) <= r.runs[1].peak_allocated_bytes
    assert r.oom is None


def test_dataframes_when_pandas_is_installed():
    pd = pytest.importorskip("pandas")
    r = vramscope.profile(model="2.7B", device="meta", context_length=128)
    assert isinstance(r.phases_df, pd.DataFrame) and len(r.phases_df) == len(r.phases)
    assert list(r.categories_df["category"]) == [c["category"] for c in r.categories]


def test_bad_configuration_is_a_value_error_with_the_cli_message(tmp_path):
    with pytest.raises(ValueError) as e:
        vramscope.profile(model="2.7B", device="meta", batch_size=0)
    cli = subprocess.run([CLI, "profile", "--model", "2.7B", "--device", "meta", "--batch-size", "0", "--out-dir", str(tmp_path)], capture_output=True, text=True)
    assert cli.returncode == 2
    # The CLI's message, in keyword spelling: `invalid --batch-size:` is `invalid batch_size=0:`.
    assert "--batch-size" in cli.stderr and "--" not in str(e.value)
    assert str(e.value) == vramscope._keywords.pythonic("profile", cli.stderr.strip()[len("error: "):], {"batch_size": 0})
    assert "batch_size=0" in str(e.value)
    with pytest.raises(ValueError, match="device='cuda'") as e:
        vramscope.profile(model="2.7B", device="cuda")
    assert "device=meta" in str(e.value) and "gpu=NAME" in str(e.value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_flag'"):
        vramscope.profile(model="2.7B", no_such_flag=3)


def test_config_as_dict_path_or_pretrained_config_object(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))

    class PretrainedConfigLike:  # duck-typed: transformers is not a dependency
        def to_dict(self):
            return dict(TINY)

    runs = [vramscope.profile(config=c, device="meta", context_length=64, batch_size=2) for c in (TINY, str(path), path, PretrainedConfigLike())]
    assert len({r.peak_allocated_bytes for r in runs}) == 1
    want = cli_summary(tmp_path, "--config", str(path), "--device", "meta", "--context-length", "64", "--batch-size", "2")
    assert runs[0].peak_allocated_bytes == want["runs"][0]["peak_allocated_bytes"]
    with pytest.raises(ValueError, match="config"):
        vramscope.profile(config=42, device="meta")


def test_snapshot_and_report_files(tmp_path):
    r = vramscope.profile(model="2.7B", device="meta", context_length=128, gpu="H100-80GB")
    snap = r.save_snapshot(tmp_path / "s.pickle")
    with open(snap, "rb") as f:
        data = pickle.load(f)
    assert {"segments", "device_traces"} <= set(data)
    seen = vramscope.analyze(snap)
    # analyze reads what memory_viz draws: requested bytes.
    assert seen["peak_active_bytes"] == r.runs[0]["allocator_stats"]["requested_bytes"]["peak"]
    page = r.save_report(tmp_path / "r.html")
    assert open(page).read().lstrip().lower().startswith("<!doctype html")
    html = r._repr_html_()
    assert "<iframe" not in html and "2.7B" in html and 'href="' in html and "r.html" in html
    report = r.report(0)
    assert "<iframe srcdoc=" in report._repr_html_() and report.html == r.report_html(0)
    assert report.save(tmp_path / "again.html") and open(tmp_path / "again.html").read() == report.html
    with pytest.raises(IndexError):
        r.save_snapshot(tmp_path / "x.pickle", run=5)


def test_out_of_memory_is_reported_not_raised():
    r = vramscope.profile(model="2.7B", device="meta", context_length=512, batch_size=8, gpu="RTX4090-24GB")
    assert r.oom and "out of memory" in r.oom.lower() or "OutOfMemory" in r.oom
    assert r.runs[0].peak_allocated_bytes <= 24 * 1024**3
    assert not r.fits and not r.runs[0].fits and r.runs[0].oom_phase in ("forward", "loss", "backward", "optimizer", "setup")
    assert "reached before the OOM" in repr(r.runs[0])


def cli(tmp_path, *words):
    r = subprocess.run([CLI, *words], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_compare_matches_the_cli(tmp_path):
    c = vramscope.compare(model="small", device="meta", context_length=128, precision="bf16")
    cli(tmp_path, "profile", "--compare", "--model", "small", "--device", "meta", "--context-length", "128", "--precision", "bf16", "--out-dir", "c")
    ours = json.loads((tmp_path / "c" / "compare.json").read_text())
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("snapshot", "step_seconds")} for r in rows]
    assert strip(c.rows) == strip(ours["runs"]) and [r["variant"] for r in c.rows] == ["baseline", "bf16 precision"]
    assert c["markdown"].strip() == (tmp_path / "c" / "compare.md").read_text().strip()
    assert all("snapshot" not in r for r in c.rows)


def test_sweep_matches_the_cli_and_writes_where_asked(tmp_path):
    s = vramscope.sweep(model="small", device="meta", context_length=128, batch_size=[1, 2], out_dir=tmp_path / "py")
    cli(tmp_path, "sweep", "--model", "small", "--context-length", "128", "--batch-size", "1,2", "--out-dir", "c")
    ours = json.loads((tmp_path / "c" / "sweep.json").read_text())
    assert [r["peak_allocated_bytes"] for r in s.rows] == [r["peak_allocated_bytes"] for r in ours["points"]]
    assert s["fits"] == ours["fits"] and len(s.rows) == 2
    assert (tmp_path / "py" / "sweep.csv").read_text() == (tmp_path / "c" / "sweep.csv").read_text()


def test_fit_and_estimate_match_the_cli(tmp_path):
    f = vramscope.fit(model="small", gpu="RTX4090-24GB", find="batch", context_length=512)
    assert f.data == json.loads(cli(tmp_path, "fit", "--model", "small", "--gpu", "RTX4090-24GB", "--context-length", "512", "--json"))
    w = vramscope.fit(model="2.7B", gpu="RTX4090-24GB", find="world-size", context_length=128)
    assert w.data == json.loads(cli(tmp_path, "fit", "--model", "2.7B", "--gpu", "RTX4090-24GB", "--find", "world-size", "--context-length", "128", "--json"))
    e = vramscope.estimate(model="small", context_length=128)
    assert e.data == json.loads(cli(tmp_path, "estimate", "--model", "small", "--context-length", "128", "--json"))
    assert e["estimate"] and e["simulated"]


def test_fit_and_estimate_for_generate_match_the_cli(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    flags = dict(memory_limit="3MiB", profile_type="generate", find="max-new-tokens", batch_size=4, context_length=24, reserve="0", warmup_steps=0)
    f = vramscope.fit(config=str(path), **flags)
    words = ["--memory-limit", "3MiB", "--profile-type", "generate", "--find", "max-new-tokens", "--batch-size", "4", "--context-length", "24", "--reserve", "0", "--warmup-steps", "0"]
    assert f.data == json.loads(cli(tmp_path, "fit", "--config", str(path), *words, "--json"))
    assert f["find"] == "max-new-tokens" and f["first_not_fitting"] == f["answer"] + 1
    # 2 layers x keys and values x B 4 x 2 kv heads x (24 + answer - 1) positions x 16 x fp32.
    assert f["generate_at_answer"]["kv_cache_bytes"] == 2 * 2 * 4 * 2 * (24 + f["answer"] - 1) * 16 * 4
    b = vramscope.fit(config=str(path), memory_limit="3MiB", profile_type="generate", find="batch", context_length=24, max_new_tokens=4, reserve="0", warmup_steps=0)
    assert b["answer"] >= 1 and b["fixed"] == {"context_length": 24, "max_new_tokens": 4}
    with pytest.raises(ValueError, match="max_new_tokens"):
        vramscope.fit(config=str(path), memory_limit="3MiB", profile_type="generate", find="batch", context_length=24)
    e = vramscope.estimate(config=str(path), profile_type="generate", max_new_tokens=8, batch_size=2, context_length=16)
    assert e.data == json.loads(cli(tmp_path, "estimate", "--config", str(path), "--profile-type", "generate", "--max-new-tokens", "8", "--batch-size", "2", "--context-length", "16", "--json"))
    assert e["estimate"]["kv_cache_bytes"] == e["simulated"]["kv_cache_bytes"] == 2 * 2 * 2 * 2 * (16 + 8 - 1) * 16 * 4


def test_analyze_matches_the_cli(tmp_path):
    path = vramscope.profile(model="walkthrough", device="meta").save_snapshot(tmp_path / "s.pickle")
    a = vramscope.analyze(path, top=3)
    assert a.data == json.loads(cli(tmp_path, "analyze", str(path), "--json", "--top", "3"))
    with pytest.raises(ValueError, match="detail=0") as e:
        vramscope.analyze(path, detail=0)
    assert "--" not in str(e.value)


def test_profile_text_is_the_cli_printout(tmp_path):
    r = vramscope.profile(model="walkthrough", device="meta", context_length=64)
    out = cli(tmp_path, "profile", "--model", "walkthrough", "--device", "meta", "--context-length", "64", "--out-dir", "p")
    # The CLI's printout adds the files it wrote; the rest is the same text.
    keep = lambda t: "\n".join(l for l in t.splitlines() if not l.startswith(("snapshot:", "report:", "wrote "))).strip()
    assert keep(r.text()) == keep(out) and "peak allocated" in keep(out)


def test_the_console_script():
    r = subprocess.run([CLI, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"vramscope {vramscope.__version__}"
    bad = subprocess.run([CLI, "profile", "--batch-size", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--batch-size" in bad.stderr


def test_the_example_notebook_runs():
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "..", "..", "examples", "notebook.py")
    r = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "peak allocated" in r.stdout


def test_negative_numbers_and_huge_sizes_are_value_errors_naming_the_keyword():
    with pytest.raises(ValueError, match="batch_size") as e:
        vramscope.profile(model="2.7B", device="meta", batch_size=-1)
    assert "-0" not in str(e.value)
    with pytest.raises(ValueError, match="world_size"):
        vramscope.profile(model="2.7B", device="meta", parallel="fsdp", world_size=2**40, rank=0)


def test_ctrl_c_interrupts_a_long_run_with_keyboard_interrupt():
    # A long sweep in a child interpreter, SIGINT after it has started: KeyboardInterrupt
    # arrives within seconds, raised inside the run (the GIL is held throughout).
    code = (
        "import vramscope, sys\n"
        "print('started', flush=True)\n"
        "try:\n"
        "    vramscope.profile(model='2.7B', device='meta', context_length=256, measure_steps=400)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True); sys.exit(7)\n"
    )
    import signal
    import time

    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    time.sleep(1.5)
    t = time.time()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 7, (out, err)
    assert "interrupted" in out and time.time() - t < 30
