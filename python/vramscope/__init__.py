"""vramscope from Python: where accelerator memory goes when a Transformer language model runs
a forward pass or a training step, predicted by running the model in Rust (on ``meta`` any
size profiles on a laptop).

Every function mirrors a ``vramscope`` subcommand: keyword arguments are its flags
(``context_length=512`` is ``--context-length 512``, ``flops=True`` is ``--flops``, a list is
a comma list), so defaults, checks and messages are the command line's; ``help(vramscope.profile)``
lists every keyword. An unknown keyword raises ``TypeError`` (with the closest names), a bad
value ``ValueError`` (naming the keyword); anything else ``RuntimeError``.

    >>> import vramscope
    >>> r = vramscope.profile(model="2.7B", device="meta", context_length=512, gpu="H100-80GB")
    >>> r.peak_allocated_gib
"""
from __future__ import annotations

import collections.abc as _abc
import contextlib as _contextlib
import json as _json
import os as _os
import tempfile as _tempfile
import typing as _t

from . import _keywords, _vramscope
from ._results import AnalyzeResult, JobResult, ProfileResult, Report, Run

__version__: str = _vramscope.__version__

__all__ = [
    "profile", "compare", "sweep", "fit", "estimate", "analyze", "serve",
    "ProfileResult", "Run", "JobResult", "AnalyzeResult", "Report", "__version__",
]


def __dir__() -> _t.List[str]:
    return sorted(__all__)


@_contextlib.contextmanager
def _config_words(config: _t.Any) -> _t.Iterator[_t.List[str]]:
    """``--config`` for a path, a dict (a config.json's content) or a transformers
    ``PretrainedConfig`` (anything with ``to_dict()``; transformers is not needed)."""
    if config is None:
        yield []
        return
    if isinstance(config, (str, _os.PathLike)):
        yield ["--config", _os.fspath(config)]
        return
    if isinstance(config, _abc.Mapping):
        content = dict(config)
    elif callable(getattr(config, "to_dict", None)):
        content = config.to_dict()
    else:
        raise ValueError(f"invalid config=: expected a path, a dict or an object with to_dict() (a transformers PretrainedConfig), not {type(config).__name__}")
    with _tempfile.TemporaryDirectory(prefix="vramscope-config-") as tmp:
        path = _os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            _json.dump(content, f, default=str)
        yield ["--config", path]


@_contextlib.contextmanager
def _python_spelling(name: str, given: _t.Mapping[str, _t.Any]) -> _t.Iterator[None]:
    """The command line's messages in keyword spelling (``--batch-size`` is ``batch_size=``)."""
    try:
        yield
    except ValueError as e:
        raise ValueError(_keywords.pythonic(name, str(e), given)) from None


def _call(name: str, native: _t.Any, model: _t.Any, config: _t.Any, flags: _t.Dict[str, _t.Any], *extra: _t.Any) -> _t.Any:
    given = dict(flags)
    if model is not None:
        given = dict(model=model, **given)
    words = _keywords.words(name, given)
    with _python_spelling(name, dict(given, config=config)), _config_words(config) as cw:
        return native(cw + words, *extra)


def profile(model: _t.Optional[str] = None, *, config: _t.Any = None, **flags: _t.Any) -> ProfileResult:
    # Signature and docstring: _keywords.install below, from the clap flags.
    return ProfileResult(_call("profile", _vramscope.profile, model, config, flags))


def _without_files(rows: _t.List[_t.Dict[str, _t.Any]]) -> None:
    for row in rows:
        row.pop("snapshot", None)
        row.pop("report", None)


def _out(flags: _t.Dict[str, _t.Any]) -> _t.Optional[str]:
    out = flags.pop("out_dir", None)
    return None if out is None else _os.fspath(out)


def compare(model: _t.Optional[str] = None, *, config: _t.Any = None, **flags: _t.Any) -> JobResult:
    out = _out(flags)
    data = _json.loads(_call("compare", _vramscope.compare, model, config, flags, out))
    if out is None:
        _without_files(data.get("runs") or [])
    return JobResult(data, "runs")


def sweep(model: _t.Optional[str] = None, *, config: _t.Any = None, **flags: _t.Any) -> JobResult:
    out = _out(flags)
    data = _json.loads(_call("sweep", _vramscope.sweep, model, config, flags, out))
    if out is None:
        _without_files(data.get("points") or [])
    return JobResult(data, "points")


def fit(model: _t.Optional[str] = None, *, config: _t.Any = None, **flags: _t.Any) -> JobResult:
    return JobResult(_json.loads(_call("fit", _vramscope.fit, model, config, flags)), None)


def estimate(model: _t.Optional[str] = None, *, config: _t.Any = None, **flags: _t.Any) -> JobResult:
    return JobResult(_json.loads(_call("estimate", _vramscope.estimate, model, config, flags)), None)


def analyze(path: _t.Any, **flags: _t.Any) -> AnalyzeResult:
    words = _keywords.words("analyze", dict(path=path, **flags))
    with _python_spelling("analyze", flags):
        return AnalyzeResult(_json.loads(_vramscope.analyze(words)))


def serve(model: _t.Optional[str] = None, *, config: _t.Any = None, **flags: _t.Any) -> _t.Dict[str, _t.Any]:
    return _json.loads(_call("serve", _vramscope.serve, model, config, flags))


for _fn in (profile, compare, sweep, fit, estimate, analyze, serve):
    _keywords.install(_fn, _fn.__name__)
del _fn
