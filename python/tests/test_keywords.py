"""The package explains itself: real signatures and docstrings from the command line's flags,
Python-spelled errors with suggestions, a clean namespace, stubs that cannot drift, tidy frames
and notebook views that show every run and stay small."""
import ast
import inspect
import os
import pydoc
import re
import shutil
import subprocess

import pytest

import vramscope
from vramscope import _keywords

CLI = shutil.which("vramscope") or pytest.fail("the package's vramscope command is not on PATH")
HERE = os.path.dirname(os.path.abspath(__file__))
STUB = os.path.join(HERE, "..", "vramscope", "__init__.pyi")
FUNCTIONS = ["profile", "compare", "sweep", "fit", "estimate", "analyze"]
COMMAND = {"profile": "profile", "compare": "profile", "sweep": "sweep", "fit": "fit", "estimate": "estimate", "analyze": "analyze"}


def cli_flags(command):
    """The long flags `vramscope <command> --help` lists, in Python spelling."""
    out = subprocess.run([CLI, command, "--help"], capture_output=True, text=True).stdout
    return {m.replace("-", "_") for m in re.findall(r"^ {2,6}(?:-\w, )?--([a-z0-9][a-z0-9-]*)", out, re.M)} - {"help"}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_flag_of_the_cli_is_a_documented_keyword(name):
    fn = getattr(vramscope, name)
    sig = inspect.signature(fn)
    params = set(sig.parameters)
    assert not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()), "no **flags left"
    excluded = {e for e, _ in _keywords.FUNCTIONS[name]["excluded"]}
    flags = cli_flags(COMMAND[name])
    assert flags, "the CLI's --help lists flags"
    renamed = {"preset": "model"}  # sweep's --preset has --model as its visible alias
    want = {renamed.get(f, f) for f in flags - excluded}
    assert want <= params, f"keywords missing from {name}(): {sorted(want - params)}"
    assert not excluded & params
    doc = fn.__doc__
    for p in sig.parameters:
        assert re.search(rf"^{p} : ", doc, re.M), f"{name}.__doc__ documents {p}"


def test_help_shows_the_keywords_with_types_defaults_and_help():
    text = pydoc.render_doc(vramscope.profile, renderer=pydoc.plaintext)
    assert "**flags" not in text
    assert "context_length" in text and "Sequence length(s), comma separated" in text
    sig = inspect.signature(vramscope.profile)
    assert sig.parameters["model"].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert sig.parameters["profile_type"].default == "training"
    assert sig.parameters["warmup_steps"].default == 1 and sig.parameters["warmup_steps"].annotation is int
    assert sig.parameters["flops"].default is False and sig.parameters["flops"].annotation is bool
    assert "Literal['forward', 'forward-loss', 'inference', 'training', 'generate']" in vramscope.profile.__doc__
    a = inspect.signature(vramscope.analyze)
    assert list(a.parameters)[0] == "path" and a.parameters["path"].default is inspect.Parameter.empty
    assert a.parameters["top"].default == 10
    # Python's own meaning where it differs: nothing is written unless out_dir= is given.
    assert inspect.signature(vramscope.sweep).parameters["out_dir"].default is None


def test_stubs_are_generated_from_the_flags():
    text = open(STUB).read()
    start, end = text.index(_keywords.STUB_BEGIN), text.index(_keywords.STUB_END) + len(_keywords.STUB_END) + 1
    assert text[start:end] == _keywords.render_stub(), "run `python -c 'from vramscope import _keywords; _keywords.write_stub()'` after changing a flag"
    tree = ast.parse(text)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in FUNCTIONS:
        args = defs[name].args
        stub = [a.arg for a in args.args + args.kwonlyargs]
        assert stub == list(inspect.signature(getattr(vramscope, name)).parameters)


def test_stub_check_fails_on_drift(tmp_path):
    """The check above can fail: a stub one flag behind differs from the rendering."""
    stale = _keywords.render_stub().replace("    context_length:", "    contxt_length:", 1)
    assert stale != _keywords.render_stub()
    path = tmp_path / "__init__.pyi"
    path.write_text("header\n" + stale + "footer\n")
    _keywords.write_stub(str(path))
    assert path.read_text() == "header\n" + _keywords.render_stub() + "footer\n"


def test_unknown_keywords_are_type_errors_with_suggestions():
    with pytest.raises(TypeError) as e:
        vramscope.profile(contxt_length=512)
    assert str(e.value) == "profile() got an unexpected keyword argument 'contxt_length'; did you mean 'context_length'?"
    with pytest.raises(TypeError, match=r"^sweep\(\) got an unexpected keyword argument 'batchsize'; did you mean 'batch_size'"):
        vramscope.sweep(model="small", batchsize=[1, 2])
    with pytest.raises(TypeError, match=r"^analyze\(\) got an unexpected keyword argument 'tpo'; did you mean 'top'\?"):
        vramscope.analyze("x.pickle", tpo=3)
    with pytest.raises(TypeError, match=r"^fit\(\) got an unexpected keyword argument 'xyzzy'$"):
        vramscope.fit(xyzzy=1)
    # A flag of the command line that is not a keyword here says why.
    with pytest.raises(TypeError, match="out_dir.*save_snapshot"):
        vramscope.profile(model="small", out_dir="x")
    with pytest.raises(TypeError, match="compare"):
        vramscope.profile(model="small", compare=True)
    with pytest.raises(TypeError, match="takes True or False"):
        vramscope.profile(model="small", flops="yes")
    with pytest.raises(TypeError, match="multiple values"):
        vramscope.fit(context_length=128, seq_len=256)


def test_the_command_lines_aliases_still_work():
    a = vramscope.estimate(model="small", context_length=128, no_simulate=True)
    b = vramscope.estimate(model="small", seq_len=128, no_simulate=True)
    assert a.data == b.data


def test_bad_values_name_the_keyword_not_the_flag():
    with pytest.raises(ValueError) as e:
        vramscope.profile(model="walkthrough", device="meta", profile_type="fwd")
    msg = str(e.value)
    assert "profile_type=" in msg and "'fwd'" in msg and "--" not in msg
    assert "forward" in msg  # clap's possible values / tip come along
    with pytest.raises(ValueError) as e:
        vramscope.profile(model="walkthrough", device="meta", batch_size="many")
    assert "batch_size=" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(ValueError) as e:
        vramscope.profile(model="walkthrough", device="meta", flops_depth=2)
    assert "flops=True" in str(e.value) and "--" not in str(e.value)


def test_pythonic_spelling_of_messages():
    p = lambda m, **given: _keywords.pythonic("profile", m, given)
    assert p("invalid --batch-size: must be positive", batch_size=0) == "invalid batch_size=0: must be positive"
    assert p("invalid value 'x' for '--context-length <CONTEXT_LENGTH>'") == "invalid value 'x' for 'context_length='"
    assert p("needs --gpu or --memory-limit") == "needs gpu= or memory_limit="
    assert p("use --device meta with --gpu NAME") == "use device=meta with gpu=NAME"
    assert p("--flops-depth needs --flops") == "flops_depth= needs flops=True"
    assert p("--no-such-flag stays") == "--no-such-flag stays"


def test_the_namespace_is_the_public_api():
    assert sorted(dir(vramscope)) == sorted(vramscope.__all__)
    for private in ("os", "json", "tempfile", "contextlib", "html", "Any", "Dict", "List", "Optional", "Union"):
        assert not hasattr(vramscope, private), private
    ns = {}
    exec("from vramscope import *", ns)
    assert set(ns) - {"__builtins__"} == set(vramscope.__all__)
    for name in vramscope.__all__:
        assert getattr(vramscope, name) is not None


def test_analyze_df_is_a_tidy_table(tmp_path):
    pd = pytest.importorskip("pandas")
    path = vramscope.profile(model="walkthrough", device="meta").save_snapshot(tmp_path / "s.pickle")
    a = vramscope.analyze(path)
    df = a.df
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == ["frame", "live_bytes", "live_mib", "percent_of_peak"]
    assert len(df) == len(a.data["live_at_peak_by_frame"]) > 1
    assert df["live_bytes"].dtype.kind in "iu" and df["live_mib"].dtype.kind == "f"
    assert df["live_bytes"].iloc[0] == a.data["live_at_peak_by_frame"][0][1]
    assert df["live_bytes"].sum() <= a.data["peak_active_bytes"] and (df["percent_of_peak"] <= 100).all()
    cats = a.categories_df
    assert list(cats.columns) == ["category", "live_bytes", "live_mib", "percent_of_peak"] and len(cats) == len(a.data["live_at_peak_by_category"])
    big = a.largest_df
    assert len(big) == len(a.data["largest"]) and big["size_bytes"].is_monotonic_decreasing


def test_analyze_rows_without_pandas(tmp_path):
    path = vramscope.profile(model="walkthrough", device="meta").save_snapshot(tmp_path / "s.pickle")
    a = vramscope.analyze(path)
    assert a.rows[0]["frame"] == a.data["live_at_peak_by_frame"][0][0]
    assert all(set(r) == {"frame", "live_bytes", "live_mib", "percent_of_peak"} for r in a.rows)
    assert "allocation sites" in repr(a) and len(a._repr_html_()) < 50_000


def test_a_multi_run_result_shows_every_run_and_stays_light():
    r = vramscope.profile(model="walkthrough", device="meta", context_length=[64, 128], profile_type=["forward", "training"])
    assert len(r.runs) == 4
    page = r._repr_html_()
    assert len(page.encode()) < 50_000, len(page)
    assert "<iframe" not in page and "<script" not in page
    for i, run in enumerate(r.runs):
        assert re.search(rf"<tr><td>{i}</td><td>{run.context_length}</td><td>{run.profile_type}</td>", page)
        assert f"{run.peak_allocated_gib:.3f}" in page
        assert f"run {i}" in page  # its column of the breakdown at the peak
    text = repr(r)
    assert all(f"{run.profile_type} context {run.context_length}" in text for run in r.runs)
    full = r.report(3)
    assert len(full.html) > len(page) and "<script" in full.html  # what used to be inline
    assert "training context 128" in repr(full)


def test_compare_and_sweep_show_every_row():
    s = vramscope.sweep(model="walkthrough", context_length=64, batch_size=[1, 2, 4])
    page = s._repr_html_()
    assert len(page.encode()) < 50_000 and page.count("<tr>") == 1 + 3
    assert all(f"{p['peak_allocated_bytes']}" in page for p in s.rows)
    assert all(f"{i}: " in repr(s) for i in range(3)) and "batch_size=4" in repr(s)
    c = vramscope.compare(model="walkthrough", device="meta", context_length=64, precision="bf16", checkpoint="blocks")
    assert len(c.rows) >= 3
    page = c._repr_html_()
    assert all(row["variant"] in page for row in c.rows) and len(page.encode()) < 50_000
    assert all(row["variant"] in repr(c) for row in c.rows)
