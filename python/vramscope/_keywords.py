"""The keyword arguments of the package's functions, read off the command line's own clap
definitions (``_vramscope.keywords()``, src/options/keywords.rs): the signatures ``help()`` and
``inspect.signature`` show, the docstrings, the keyword checks with their suggestions, the
translation of the command line's messages into Python spelling, and the type stubs
(``__init__.pyi``), all from that one table.

Regenerate the stubs after changing a flag:
``python -c "from vramscope import _keywords; _keywords.write_stub()"``.
"""
from __future__ import annotations

import difflib
import inspect
import json
import re
import textwrap
from os import PathLike
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union

from . import _vramscope

# What each function is, in Python terms: its introduction and what it returns. Everything about
# its keywords comes from the clap table.
INTRO: Dict[str, Tuple[str, str]] = {
    "profile": (
        "Profile one model (a preset name, or ``config=``) at each ``context_length`` and "
        "``profile_type``: peaks, per-phase and per-category tables, the OOM if any. Nothing is "
        "written until ``save_snapshot`` / ``save_report``.",
        "ProfileResult",
    ),
    "compare": (
        "``vramscope profile --compare``: the baseline and each memory option (or each layout "
        "with ``world_size=``) side by side; compare.json's rows, its tables as "
        "``data['markdown']``. ``out_dir=`` writes each variant's snapshot and report there "
        "(default: nothing is written).",
        "JobResult",
    ),
    "sweep": (
        "Profiles over the grid of comma lists given as keywords (``batch_size=[1, 2, 4]``); "
        "sweep.json with its points and scaling fits. ``out_dir=`` writes its JSON, CSV, "
        "Markdown and plots there, and with ``snapshots=True`` each point's files (default: "
        "nothing is written).",
        "JobResult",
    ),
    "fit": (
        "The largest batch size or context (``find=``), or the fewest GPUs "
        "(``find='world-size'``), that fits ``gpu=``; fit's ``--json`` object.",
        "JobResult",
    ),
    "estimate": ("The closed-form memory with its terms, beside a meta run; estimate's ``--json`` object.", "JobResult"),
    "analyze": (
        "A snapshot pickle's peak, live set and largest allocations (PyTorch's own "
        "``torch.cuda.memory._dump_snapshot`` files included); ``df`` is what is live at the "
        "peak per allocation site.",
        "AnalyzeResult",
    ),
    "serve": (
        "vLLM 0.33.0's start-up memory plan (``enforce_eager=True`` required), or with "
        "``find='max-model-len'|'max-num-seqs'`` the inverse question's answer: a dict with "
        "``plan`` (every term in bytes), ``log`` (vLLM's log lines), ``fits`` and vLLM's "
        "``error`` when it would not start.",
        "Dict[str, Any]",
    ),
}

# Python's own meaning of a keyword where it differs from the command line's: (default, help).
PYTHON_ONLY: Dict[Tuple[str, str], Tuple[Any, str]] = {
    ("compare", "out_dir"): (None, "Folder each variant's snapshot and HTML report are written to (created if missing); default: nothing is written"),
    ("sweep", "out_dir"): (None, "Folder sweep.json, .csv, .md and the plots are written to (created if missing); default: nothing is written"),
}

CONFIG_HELP = " Also a dict (a config.json's content) or a transformers ``PretrainedConfig`` (anything with ``to_dict()``)."

TABLE: List[Dict[str, Any]] = json.loads(_vramscope.keywords())
FUNCTIONS: Dict[str, Dict[str, Any]] = {f["name"]: f for f in TABLE}

Scalar = Union[str, int, float]
_NAMESPACE: Dict[str, Any] = dict(
    Any=Any, Optional=Optional, Union=Union, Sequence=Sequence, Literal=Literal, Mapping=Mapping, PathLike=PathLike
)


def _param_name(f: Dict[str, Any], k: Dict[str, Any]) -> str:
    """``model`` for the model flag (sweep's ``--preset`` has ``--model`` as its visible alias);
    ``path`` for analyze's file; else the flag's Python name."""
    if k["positional"]:
        return "path"
    if "model" in k["aliases"]:
        return "model"
    return k["name"]


def annotation(f: Dict[str, Any], k: Dict[str, Any]) -> str:
    """The keyword's type annotation, as text (for the stubs and, evaluated, the signature)."""
    name = _param_name(f, k)
    if name == "config":
        return "Any"
    if k["positional"]:
        return "Union[str, PathLike[str]]"
    if k["kind"] == "flag":
        return "bool"
    ty = k["type"]
    if ty == "choice":
        one = "Literal[" + ", ".join(repr(c) for c in k["choices"]) + "]"
        base = f"Union[{one}, Sequence[{one}]]" if k["kind"] == "list" else one
    elif ty == "int":
        base = "Union[int, Sequence[int]]" if k["kind"] == "list" else "int"
    elif ty == "float":
        base = "Union[float, Sequence[float]]" if k["kind"] == "list" else "float"
    elif ty == "path":
        base = "Union[str, PathLike[str]]"
    elif _takes_list(f, k):
        base = "Union[str, int, float, Sequence[Any]]"
    else:
        base = "str"
    return base if default(f, k) is not None else f"Optional[{base}]"


def _takes_list(f: Dict[str, Any], k: Dict[str, Any]) -> bool:
    """A text flag that takes a comma list: the help says so, or it is one of sweep's axes
    (every text flag of sweep but its device)."""
    h = k["help"].lower()
    return re.search(r"\bcomma(?![a-z])", h) is not None or (f["name"] == "sweep" and k["name"] != "device")


def default(f: Dict[str, Any], k: Dict[str, Any]) -> Any:
    """The default shown in the signature: clap's, in Python's type (None: left out)."""
    if (f["name"], k["name"]) in PYTHON_ONLY:
        return PYTHON_ONLY[(f["name"], k["name"])][0]
    if k["kind"] == "flag":
        return False
    d = k["default"]
    if d is None:
        return None
    try:
        if k["type"] == "int" and k["kind"] != "list":
            return int(d)
        if k["type"] == "float" and k["kind"] != "list":
            return float(d)
    except ValueError:
        pass
    return d


def help_text(f: Dict[str, Any], k: Dict[str, Any]) -> str:
    if (f["name"], k["name"]) in PYTHON_ONLY:
        return PYTHON_ONLY[(f["name"], k["name"])][1]
    h = k["help"].rstrip(".")
    if _param_name(f, k) == "config":
        h = h.rstrip(".") + "." + CONFIG_HELP
    if k["choices"] and "one of" not in h.lower():
        h += (". One of: " if h else "One of: ") + ", ".join(k["choices"])
        if k["kind"] == "list":
            h += " (a list runs each)"
    return h


def parameters(name: str) -> List[inspect.Parameter]:
    """The function's parameters: ``model`` (or analyze's ``path``) first, positional or
    keyword; every other flag keyword-only, in the order of ``vramscope <command> --help``."""
    f = FUNCTIONS[name]
    P = inspect.Parameter
    first = [k for k in f["keywords"] if _param_name(f, k) in ("model", "path")]
    rest = [k for k in f["keywords"] if k not in first]
    # config right after model, as before: profile(model, *, config=..., ...)
    rest.sort(key=lambda k: _param_name(f, k) != "config")
    params = []
    for k in first:
        d = P.empty if k["positional"] else default(f, k)
        params.append(P(_param_name(f, k), P.POSITIONAL_OR_KEYWORD, default=d, annotation=annotation(f, k)))
    for k in rest:
        params.append(P(_param_name(f, k), P.KEYWORD_ONLY, default=default(f, k), annotation=annotation(f, k)))
    return params


def signature(name: str) -> inspect.Signature:
    params = [p.replace(annotation=eval(p.annotation, dict(_NAMESPACE))) for p in parameters(name)]
    from . import _results

    return inspect.Signature(params, return_annotation=getattr(_results, INTRO[name][1], INTRO[name][1]))


def _wrap(text: str, indent: str) -> str:
    return textwrap.fill(text, width=96, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def docstring(name: str) -> str:
    """The function's docstring: what it does, then each keyword with its type, default, help
    and command-line spelling (numpydoc's Parameters section)."""
    f = FUNCTIONS[name]
    intro, returns = INTRO[name]
    command = f"vramscope {f['command']}" + (" --compare" if name == "compare" else "")
    lines = [_wrap(f"``{command}``: {f['about'].rstrip('.')}.", ""), "", _wrap(intro, ""), ""]
    lines += [
        _wrap(
            "Keywords are the command's flags in Python spelling (``context_length=512`` is "
            "``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); "
            "defaults and checks are the command line's. An unknown keyword raises TypeError, a "
            "bad value ValueError.",
            "",
        ),
        "",
        "Parameters",
        "----------",
    ]
    by_name = {_param_name(f, k): k for k in f["keywords"]}
    for p in parameters(name):
        k = by_name[p.name]
        d = p.default
        shown = "" if d is inspect.Parameter.empty else f", default {d!r}"
        lines.append(f"{p.name} : {p.annotation}{shown}")
        spelled = k["flag"] if not k["positional"] else k["flag"] + " (positional)"
        aliases = [a for a in k["aliases"] if a != p.name]
        if p.name != k["name"] and not k["positional"]:
            aliases.append(k["name"])
        also = "; also " + ", ".join(f"{a}=" for a in sorted(set(aliases))) if aliases else ""
        lines.append(_wrap(f"{help_text(f, k).rstrip('.')}. [{spelled}{also}]", "    "))
    lines += ["", "Returns", "-------", returns]
    return "\n".join(lines)


# --- calls ---------------------------------------------------------------------------------


def _names(f: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Every Python name a function accepts (parameters and the command line's aliases)."""
    out: Dict[str, Dict[str, Any]] = {}
    for k in f["keywords"]:
        out[_param_name(f, k)] = k
        out.setdefault(k["name"], k)
        for a in k["aliases"]:
            out.setdefault(a, k)
    return out


def unexpected(name: str, key: str) -> TypeError:
    """Python's own message for an unknown keyword, with the closest names, or why a flag of
    the command line is not a keyword here."""
    f = FUNCTIONS[name]
    msg = f"{name}() got an unexpected keyword argument '{key}'"
    for flag, why in f["excluded"]:
        if key == flag:
            return TypeError(f"{msg}: {why}")
    public = [p.name for p in parameters(name)]
    close = difflib.get_close_matches(key, public, n=3, cutoff=0.6) or difflib.get_close_matches(key, list(_names(f)), n=3, cutoff=0.6)
    if close:
        msg += "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    return TypeError(msg)


def _word(value: Any, sep: str = ",") -> str:
    if isinstance(value, (list, tuple)):
        return sep.join(_word(v) for v in value)
    if isinstance(value, PathLike):
        return str(value.__fspath__())
    return str(value)


def words(name: str, given: Mapping[str, Any]) -> List[str]:
    """Keyword arguments as the command's words: None and False leave a flag out; an unknown
    keyword is a TypeError with suggestions, as Python's own."""
    f = FUNCTIONS[name]
    names = _names(f)
    out: List[str] = []
    seen: Dict[str, str] = {}
    for key, value in given.items():
        k = names.get(key)
        if k is None:
            raise unexpected(name, key)
        if k["name"] in seen:
            raise TypeError(f"{name}() got multiple values for keyword argument '{_param_name(f, k)}' (as '{seen[k['name']]}' and '{key}')")
        seen[k["name"]] = key
        if value is None or value is False:
            continue
        if k["positional"]:
            out.insert(0, _word(value))
            continue
        # The spelling the user chose: an alias goes to clap as that alias.
        if key == _param_name(f, k):
            flag = "--model" if key == "model" else k["flag"]
        else:
            flag = "--" + key.replace("_", "-")
        if k["kind"] == "flag":
            if value is not True:
                raise TypeError(f"{name}() keyword argument '{key}' takes True or False, not {value!r}")
            out.append(flag)
        else:
            # One word, so that a value starting with '-' (batch_size=-1) is a value to clap.
            out.append(f"{flag}={_word(value)}")
    return out


_STOP = {
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "cannot", "for", "from", "given", "if", "in", "instead",
    "is", "must", "need", "needs", "not", "of", "on", "only", "or", "per", "require", "requires", "set", "takes", "than",
    "the", "to", "was", "when", "with", "without", "also", "alone", "together", "both", "each", "too",
}


def pythonic(name: str, message: str, given: Optional[Mapping[str, Any]] = None) -> str:
    """The command line's message in Python spelling: ``'--profile-type <PROFILE_TYPE>'`` is
    ``'profile_type='``, ``invalid --batch-size:`` is ``invalid batch_size=0:`` (the value
    given), ``--flops`` is ``flops=True``, ``--device meta`` is ``device=meta``."""
    f = FUNCTIONS[name]
    by_flag: Dict[str, Tuple[str, Dict[str, Any]]] = {}
    for k in f["keywords"]:
        if k["positional"]:
            continue
        py = _param_name(f, k)
        by_flag[k["flag"][2:]] = (py, k)
        for a in k["aliases"]:
            by_flag.setdefault(a.replace("_", "-"), (py, k))
    given = given or {}

    def repl(m: "re.Match[str]") -> str:
        flag, placeholder, colon, token = m.group(1), m.group(2), m.group(3), m.group(4)
        if flag not in by_flag:
            return m.group(0)
        py, k = by_flag[flag]
        if k["kind"] == "flag":
            return f"{py}=True" + (colon or "") + (f" {token}" if token else "")
        if placeholder:
            return f"{py}="
        if colon:
            value = given.get(py, given.get(k["name"]))
            return (f"{py}={value!r}" if value is not None else f"{py}=") + colon
        if token and token.lower() not in _STOP:
            return f"{py}={token}"
        return f"{py}=" + (f" {token}" if token else "")

    pattern = re.compile(r"--([a-z0-9][a-z0-9-]*)(?: (<[^>]+>))?(?:(:)|(?: ([A-Za-z0-9_.:/<>+-]+)))?")
    return pattern.sub(repl, message)


# --- stubs ---------------------------------------------------------------------------------

STUB_BEGIN = "# BEGIN generated from the clap flags by `python -c 'from vramscope import _keywords; _keywords.write_stub()'`: do not edit"
STUB_END = "# END generated"


def render_stub() -> str:
    """The functions' part of ``__init__.pyi``: every keyword with its type and default, and
    the docstring, so an IDE completes and documents them."""
    out = [STUB_BEGIN]
    for name in FUNCTIONS:
        out.append("")
        out.append(f"def {name}(")
        kw_only = False
        for p in parameters(name):
            if p.kind == inspect.Parameter.KEYWORD_ONLY and not kw_only:
                out.append("    *,")
                kw_only = True
            d = "" if p.default is inspect.Parameter.empty else f" = {p.default!r}"
            out.append(f"    {p.name}: {p.annotation}{d},")
        out.append(f") -> {INTRO[name][1]}:")
        doc = docstring(name).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        out.append('    """' + "\n".join(("    " + line) if line else "" for line in doc.split("\n")).lstrip())
        out.append('    """')
    out.append("")
    out.append(STUB_END)
    return "\n".join(out) + "\n"


def stub_path() -> str:
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "__init__.pyi")


def write_stub(path: Optional[str] = None) -> str:
    """Replace the generated part of ``__init__.pyi`` with :func:`render_stub`."""
    path = path or stub_path()
    with open(path) as fh:
        text = fh.read()
    start, end = text.index(STUB_BEGIN), text.index(STUB_END) + len(STUB_END) + 1
    with open(path, "w") as fh:
        fh.write(text[:start] + render_stub() + text[end:])
    return path


def install(fn: Callable[..., Any], name: str) -> None:
    """Give a public function its real signature and docstring."""
    fn.__signature__ = signature(name)  # type: ignore[attr-defined]
    fn.__doc__ = docstring(name)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        print("wrote", write_stub())
    else:
        sys.stdout.write(render_stub())
