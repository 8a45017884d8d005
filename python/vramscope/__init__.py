"""vramscope from Python: where accelerator memory goes when a Transformer language model runs
a forward pass or a training step, predicted by running the model in Rust (on ``meta`` any
size profiles on a laptop).

Every function mirrors a ``vramscope`` subcommand: keyword arguments are its flags
(``context_length=512`` is ``--context-length 512``, ``flops=True`` is ``--flops``, a list is
a comma list), so defaults, checks and error messages are the command line's. A flag's
problem raises ``ValueError``; anything else ``RuntimeError``.

    >>> import vramscope
    >>> r = vramscope.profile(model="2.7B", device="meta", context_length=512, gpu="H100-80GB")
    >>> r.peak_allocated_gib
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

from . import _vramscope

__version__: str = _vramscope.__version__

__all__ = ["profile", "compare", "sweep", "fit", "estimate", "analyze", "ProfileResult", "Run", "JobResult", "__version__"]

GiB = 1024**3
ConfigLike = Union[Mapping[str, Any], str, "os.PathLike[str]", Any]


def _words(flags: Mapping[str, Any]) -> List[str]:
    """Keyword arguments as command-line words: None and False leave a flag out."""
    words: List[str] = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            words += [flag, ",".join(str(v) for v in value)]
        else:
            words += [flag, str(value)]
    return words


@contextlib.contextmanager
def _config_words(config: Optional[ConfigLike]) -> Iterator[List[str]]:
    """``--config`` for a path, a dict (a config.json's content) or a transformers
    ``PretrainedConfig`` (anything with ``to_dict()``; transformers is not needed)."""
    if config is None:
        yield []
        return
    if isinstance(config, (str, os.PathLike)):
        yield ["--config", os.fspath(config)]
        return
    if isinstance(config, Mapping):
        content = dict(config)
    elif callable(getattr(config, "to_dict", None)):
        content = config.to_dict()
    else:
        raise ValueError(f"invalid config: expected a path, a dict or an object with to_dict() (a transformers PretrainedConfig), not {type(config).__name__}")
    with tempfile.TemporaryDirectory(prefix="vramscope-config-") as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(content, f, default=str)
        yield ["--config", path]


def _frame(rows: List[Dict[str, Any]]) -> Any:
    try:
        import pandas as pd
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("DataFrames need pandas (pip install pandas); the same rows are available as lists of dicts") from e
    return pd.DataFrame(rows)


class Run:
    """One profiled (context length, profile type, rank): summary.json's ``runs`` entry."""

    def __init__(self, data: Dict[str, Any]):
        self.data = data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @property
    def context_length(self) -> int:
        return self.data["context_length"]

    @property
    def profile_type(self) -> str:
        return self.data["profile_type"]

    @property
    def rank(self) -> Optional[int]:
        return self.data["rank"]

    @property
    def peak_allocated_bytes(self) -> int:
        return self.data["peak_allocated_bytes"]

    @property
    def peak_allocated_gib(self) -> float:
        return self.data["peak_allocated_gib"]

    @property
    def peak_reserved_bytes(self) -> int:
        return self.data["peak_reserved_bytes"]

    @property
    def peak_reserved_gib(self) -> float:
        return self.data["peak_reserved_gib"]

    @property
    def oom(self) -> Optional[str]:
        return self.data["oom"]

    @property
    def fits(self) -> bool:
        """False when the run ran out of device memory: its peaks are what it reached before."""
        return self.data["fits"]

    @property
    def oom_phase(self) -> Optional[str]:
        """The phase whose allocation was refused, if the run ran out of memory."""
        return self.data["oom_phase"]

    def _key(self) -> Dict[str, Any]:
        return {"context_length": self.context_length, "profile_type": self.profile_type, "rank": self.rank}

    @property
    def phases(self) -> List[Dict[str, Any]]:
        """Peak allocated bytes within each phase."""
        return [dict(self._key(), phase=p, peak_allocated_bytes=b, peak_allocated_gib=b / GiB) for p, b in self.data["peak"]["phase_peaks"].items()]

    @property
    def categories(self) -> List[Dict[str, Any]]:
        """Live bytes at the peak per category (allocated blocks and requested tensor bytes)."""
        requested = dict((c, b) for c, b in self.data["peak"]["by_category_requested"])
        return [
            dict(self._key(), category=c, allocated_bytes=b, allocated_gib=b / GiB, requested_bytes=requested.get(c))
            for c, b in self.data["peak"]["by_category"]
        ]

    @property
    def modules(self) -> List[Dict[str, Any]]:
        """Live bytes at the peak per module path, largest first."""
        return [dict(self._key(), module=m, allocated_bytes=b) for m, b in self.data["peak"]["by_module"]]

    def __repr__(self) -> str:
        rank = "" if self.rank is None else f", rank {self.rank}"
        oom = f", OOM in {self.oom_phase or 'setup'}: {self.oom}" if self.oom else ""
        reached = "reached before the OOM: " if self.oom else ""
        return f"<Run {self.profile_type} context {self.context_length}{rank}: {reached}peak {self.peak_allocated_gib:.3f} GiB allocated, {self.peak_reserved_gib:.3f} GiB reserved{oom}>"


class ProfileResult:
    """What ``profile`` measured: summary.json's object (``summary``), one ``Run`` per
    (context length, profile type, rank), the snapshot and report of each on demand."""

    def __init__(self, native: Any):
        self._native = native
        self.summary: Dict[str, Any] = json.loads(native.summary_json())
        self.notes: List[str] = native.notes()
        self.runs: List[Run] = [Run(r) for r in self.summary["runs"]]

    def _max(self, key: str) -> Any:
        return max(r[key] for r in self.runs)

    @property
    def peak_allocated_bytes(self) -> int:
        """The highest peak allocated (allocator blocks, torch.cuda.max_memory_allocated) over the runs."""
        return self._max("peak_allocated_bytes")

    @property
    def peak_allocated_gib(self) -> float:
        return self._max("peak_allocated_gib")

    @property
    def peak_reserved_bytes(self) -> int:
        """The highest peak reserved (torch.cuda.max_memory_reserved) over the runs."""
        return self._max("peak_reserved_bytes")

    @property
    def peak_reserved_gib(self) -> float:
        return self._max("peak_reserved_gib")

    @property
    def oom(self) -> Optional[str]:
        """The first run's out-of-memory message, if one ran out."""
        return next((r.oom for r in self.runs if r.oom), None)

    @property
    def fits(self) -> bool:
        """False when any run ran out of device memory (its peaks are what it reached before)."""
        return all(r.fits for r in self.runs)

    @property
    def phases(self) -> List[Dict[str, Any]]:
        return [row for r in self.runs for row in r.phases]

    @property
    def categories(self) -> List[Dict[str, Any]]:
        return [row for r in self.runs for row in r.categories]

    @property
    def phases_df(self) -> Any:
        """``phases`` as a pandas DataFrame (needs pandas)."""
        return _frame(self.phases)

    @property
    def categories_df(self) -> Any:
        """``categories`` as a pandas DataFrame (needs pandas)."""
        return _frame(self.categories)

    def save_snapshot(self, path: Union[str, "os.PathLike[str]"], run: int = 0) -> str:
        """Write run ``run``'s memory_viz snapshot pickle (open it at pytorch.org/memory_viz)."""
        path = os.fspath(path)
        self._native.save_snapshot(run, path)
        return path

    def save_report(self, path: Union[str, "os.PathLike[str]"], run: int = 0) -> str:
        """Write run ``run``'s offline HTML report (timeline, breakdown at the peak, largest allocations)."""
        path = os.fspath(path)
        self._native.save_report(run, path)
        return path

    def text(self, run: Optional[int] = None) -> str:
        """What ``vramscope profile`` prints for run ``run`` (every run when None): peaks,
        phases, what is live at the peak, the largest allocations."""
        runs = range(len(self.runs)) if run is None else [run]
        return "".join(self._native.text(i) for i in runs)

    def report_html(self, run: int = 0) -> str:
        """Run ``run``'s offline HTML report as text."""
        return self._native.report_html(run, f"{self.summary['preset']} context {self.runs[run].context_length} {self.runs[run].profile_type}")

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{r.context_length}</td><td>{r.profile_type}</td><td>{'' if r.rank is None else r.rank}</td>"
            f"<td>{r.peak_allocated_gib:.3f}</td><td>{r.peak_reserved_gib:.3f}</td><td>{html.escape(r.oom or '')}</td></tr>"
            for r in self.runs
        )
        table = (
            f"<p><b>vramscope</b> {html.escape(str(self.summary['preset']))}, batch {self.summary['batch_size']} on {self.summary['device']}"
            f"{', ' + html.escape(self.summary['gpu']) if self.summary.get('gpu') else ''} (GiB = 1024³ B)</p>"
            "<table><tr><th>context</th><th>profile type</th><th>rank</th><th>peak allocated (GiB)</th><th>peak reserved (GiB)</th><th>OOM</th></tr>"
            f"{rows}</table>"
        )
        # The report is a whole offline page (its own scripts and styles): an iframe keeps it
        # apart from the notebook's page.
        page = html.escape(self.report_html(0), quote=True)
        return table + f'<iframe srcdoc="{page}" style="width:100%;height:720px;border:1px solid #ccc"></iframe>'

    def __repr__(self) -> str:
        return f"<ProfileResult {self.summary['preset']}: " + "; ".join(repr(r) for r in self.runs) + ">"


class JobResult:
    """The JSON a subcommand writes (compare.json, sweep.json, fit's or estimate's --json, or
    analyze --json), as ``data``; ``rows`` and ``df`` give its main table."""

    def __init__(self, data: Any, rows_key: Optional[str]):
        self.data = data
        self._rows_key = rows_key

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @property
    def rows(self) -> List[Dict[str, Any]]:
        if self._rows_key is None:
            return [self.data] if isinstance(self.data, dict) else list(self.data)
        return list(self.data.get(self._rows_key) or [])

    @property
    def df(self) -> Any:
        """``rows`` as a pandas DataFrame (needs pandas)."""
        return _frame(self.rows)

    def __repr__(self) -> str:
        return f"<JobResult {len(self.rows)} rows: {', '.join(sorted(self.data)) if isinstance(self.data, dict) else ''}>"


def _model_words(model: Optional[str]) -> List[str]:
    return ["--model", model] if model else []


def profile(model: Optional[str] = None, *, config: Optional[ConfigLike] = None, **flags: Any) -> ProfileResult:
    """``vramscope profile``: profile one model (a preset name, or ``config=``) at each
    ``context_length`` and ``profile_type``; returns the peaks, the per-phase and per-category
    tables and the OOM if any. Nothing is written until ``save_snapshot`` / ``save_report``."""
    if flags.get("compare"):
        raise ValueError("invalid compare: use vramscope.compare(...)")
    with _config_words(config) as cw:
        return ProfileResult(_vramscope.profile(_model_words(model) + cw + _words(flags)))


def _without_files(rows: List[Dict[str, Any]]) -> None:
    for row in rows:
        row.pop("snapshot", None)
        row.pop("report", None)


def _out(flags: Dict[str, Any]) -> Optional[str]:
    out = flags.pop("out_dir", None)
    return None if out is None else os.fspath(out)


def compare(model: Optional[str] = None, *, config: Optional[ConfigLike] = None, **flags: Any) -> JobResult:
    """``vramscope profile --compare``: the baseline and each memory option (or each layout with
    ``world_size=``) side by side; compare.json's rows, its tables as ``data["markdown"]``
    (``out_dir=`` writes each variant's snapshot and report there)."""
    out = _out(flags)
    with _config_words(config) as cw:
        data = json.loads(_vramscope.compare(_model_words(model) + cw + _words(flags), out))
    if out is None:
        _without_files(data.get("runs") or [])
    return JobResult(data, "runs")


def sweep(model: Optional[str] = None, *, config: Optional[ConfigLike] = None, **flags: Any) -> JobResult:
    """``vramscope sweep``: profiles over the grid of comma lists given as flags
    (``batch_size=[1, 2, 4]``); sweep.json with its points and scaling fits (``out_dir=`` writes
    its JSON, CSV, Markdown and plots there, and with ``snapshots=True`` each point's files)."""
    out = _out(flags)
    with _config_words(config) as cw:
        data = json.loads(_vramscope.sweep(_model_words(model) + cw + _words(flags), out))
    if out is None:
        _without_files(data.get("points") or [])
    return JobResult(data, "points")


def fit(model: Optional[str] = None, *, config: Optional[ConfigLike] = None, **flags: Any) -> JobResult:
    """``vramscope fit``: the largest batch size or context (``find=``), or the fewest GPUs
    (``find="world-size"``), that fits ``gpu=``; fit's JSON."""
    with _config_words(config) as cw:
        return JobResult(json.loads(_vramscope.fit(_model_words(model) + cw + _words(flags))), None)


def estimate(model: Optional[str] = None, *, config: Optional[ConfigLike] = None, **flags: Any) -> JobResult:
    """``vramscope estimate``: the closed-form memory with its terms, beside a meta run."""
    with _config_words(config) as cw:
        return JobResult(json.loads(_vramscope.estimate(_model_words(model) + cw + _words(flags))), None)


def analyze(path: Union[str, "os.PathLike[str]"], **flags: Any) -> JobResult:
    """``vramscope analyze``: a snapshot pickle's peak, live set and largest allocations
    (PyTorch's own ``torch.cuda.memory._dump_snapshot`` files included)."""
    return JobResult(json.loads(_vramscope.analyze([os.fspath(path), *_words(flags)])), None)
