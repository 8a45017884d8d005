"""What the package's functions return: a profile's runs (``ProfileResult``, ``Run``), the JSON
of the other jobs (``JobResult``, ``AnalyzeResult``) and a run's full HTML report (``Report``).

In a notebook every result shows a small table of all its runs (a few KB); the full offline
report of a run (its own scripts and styles, hundreds of KB) is shown only when asked for, with
``result.report(i)``, or written with ``result.save_report(path, run=i)``.
"""
from __future__ import annotations

import html as _html
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

GiB = 1024**3
MiB = 1024**2
PathLikeStr = Union[str, "os.PathLike[str]"]


def frame(rows: List[Dict[str, Any]], columns: Optional[Sequence[str]] = None) -> Any:
    """Rows as a pandas DataFrame (pandas is optional)."""
    try:
        import pandas as pd
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("DataFrames need pandas (pip install pandas); the same rows are available as lists of dicts") from e
    return pd.DataFrame(rows, columns=list(columns) if columns is not None else None)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return _html.escape(str(v))


def html_table(rows: List[Dict[str, Any]], columns: Sequence[str], headers: Optional[Sequence[str]] = None) -> str:
    head = "".join(f"<th>{_html.escape(h)}</th>" for h in (headers or columns))
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Report:
    """A run's offline HTML report (timeline, breakdown at the peak, largest allocations): the
    page as ``html``, ``save(path)`` writes it; in a notebook it shows inline (in an iframe)."""

    def __init__(self, page: str, title: str):
        self.html = page
        self.title = title

    def save(self, path: PathLikeStr) -> str:
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.html)
        return path

    def _repr_html_(self) -> str:
        page = _html.escape(self.html, quote=True)
        return f'<iframe srcdoc="{page}" style="width:100%;height:720px;border:1px solid #ccc"></iframe>'

    def __repr__(self) -> str:
        return f"<Report {self.title}: {len(self.html.encode()) // 1024} KB of HTML; .save(path) writes it>"


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

    def label(self) -> str:
        rank = "" if self.rank is None else f", rank {self.rank}"
        return f"{self.profile_type} context {self.context_length}{rank}"

    def __repr__(self) -> str:
        oom = f", OOM in {self.oom_phase or 'setup'}: {self.oom}" if self.oom else ""
        reached = "reached before the OOM: " if self.oom else ""
        return f"<Run {self.label()}: {reached}peak {self.peak_allocated_gib:.3f} GiB allocated, {self.peak_reserved_gib:.3f} GiB reserved{oom}>"


class ProfileResult:
    """What ``profile`` measured: summary.json's object (``summary``), one ``Run`` per
    (context length, profile type, rank), the snapshot and report of each on demand."""

    def __init__(self, native: Any):
        self._native = native
        self.summary: Dict[str, Any] = json.loads(native.summary_json())
        self.notes: List[str] = native.notes()
        self.runs: List[Run] = [Run(r) for r in self.summary["runs"]]
        self._saved_reports: Dict[int, str] = {}

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
        return frame(self.phases)

    @property
    def categories_df(self) -> Any:
        """``categories`` as a pandas DataFrame (needs pandas)."""
        return frame(self.categories)

    def save_snapshot(self, path: PathLikeStr, run: int = 0) -> str:
        """Write run ``run``'s memory_viz snapshot pickle (open it at pytorch.org/memory_viz)."""
        path = os.fspath(path)
        self._native.save_snapshot(run, path)
        return path

    def save_report(self, path: PathLikeStr, run: int = 0) -> str:
        """Write run ``run``'s offline HTML report (timeline, breakdown at the peak, largest
        allocations); the notebook table links to it from then on."""
        path = os.fspath(path)
        self._native.save_report(run, path)
        self._saved_reports[run] = path
        return path

    def text(self, run: Optional[int] = None) -> str:
        """What ``vramscope profile`` prints for run ``run`` (every run when None): peaks,
        phases, what is live at the peak, the largest allocations."""
        runs = range(len(self.runs)) if run is None else [run]
        return "".join(self._native.text(i) for i in runs)

    def _title(self, run: int) -> str:
        return f"{self.summary['preset']} {self.runs[run].label()}"

    def report_html(self, run: int = 0) -> str:
        """Run ``run``'s offline HTML report as text."""
        return self._native.report_html(run, self._title(run))

    def report(self, run: int = 0) -> Report:
        """Run ``run``'s full offline HTML report: shown inline when it is a cell's value,
        ``.save(path)`` writes it."""
        return Report(self.report_html(run), self._title(run))

    def _repr_html_(self) -> str:
        rows = []
        for i, r in enumerate(self.runs):
            saved = self._saved_reports.get(i)
            link = f'<a href="{_html.escape(_relative(saved), quote=True)}" target="_blank">{_html.escape(os.path.basename(saved))}</a>' if saved else f"<code>.report({i})</code>"
            rows.append(
                f"<tr><td>{i}</td><td>{r.context_length}</td><td>{_html.escape(r.profile_type)}</td><td>{'' if r.rank is None else r.rank}</td>"
                f"<td>{r.peak_allocated_gib:.3f}</td><td>{r.peak_reserved_gib:.3f}</td>"
                f"<td>{'yes' if r.fits else 'OOM in ' + _html.escape(r.oom_phase or 'setup')}</td><td>{link}</td></tr>"
            )
        gpu = self.summary.get("gpu")
        head = (
            f"<p><b>vramscope</b> {_html.escape(str(self.summary['preset']))}, batch {self.summary['batch_size']} on "
            f"{_html.escape(str(self.summary['device']))}{', ' + _html.escape(str(gpu)) if gpu else ''}: {len(self.runs)} run(s) (GiB = 1024³ B)</p>"
        )
        runs = (
            "<table><thead><tr><th>run</th><th>context</th><th>profile type</th><th>rank</th><th>peak allocated (GiB)</th>"
            "<th>peak reserved (GiB)</th><th>fits</th><th>full report</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
        # What is live at each run's peak, by category: one column per run.
        cats: List[str] = []
        for r in self.runs:
            for c in r.categories:
                if c["category"] not in cats:
                    cats.append(c["category"])
        per_run = [{c["category"]: c["allocated_gib"] for c in r.categories} for r in self.runs]
        cat_rows = "".join(
            f"<tr><td>{_html.escape(c)}</td>" + "".join(f"<td>{m[c]:.3f}</td>" if c in m else "<td></td>" for m in per_run) + "</tr>" for c in cats
        )
        breakdown = (
            "<p>Live at the peak by category (GiB allocated):</p><table><thead><tr><th>category</th>"
            + "".join(f"<th>run {i}</th>" for i in range(len(self.runs)))
            + "</tr></thead><tbody>"
            + cat_rows
            + "</tbody></table>"
        )
        hint = "<p>The full report of run <i>i</i> (timeline, largest allocations): <code>r.report(i)</code> shows it, <code>r.save_report(path, run=i)</code> writes it.</p>"
        return head + runs + breakdown + hint

    def __repr__(self) -> str:
        return f"<ProfileResult {self.summary['preset']}: " + "; ".join(repr(r) for r in self.runs) + ">"


def _relative(path: str) -> str:
    """A saved file as a link from the notebook's folder (its working directory) when below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


class JobResult:
    """The JSON a subcommand writes (compare.json, sweep.json, fit's or estimate's --json), as
    ``data``; ``rows`` and ``df`` give its main table (one row per variant of a comparison, per
    point of a sweep). Its notebook view and repr show every row."""

    #: Rows a notebook table shows before it says how many more there are.
    MAX_HTML_ROWS = 500

    def __init__(self, data: Any, rows_key: Optional[str], kind: str = "JobResult"):
        self.data = data
        self._rows_key = rows_key
        self._kind = kind

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @property
    def rows(self) -> List[Dict[str, Any]]:
        if self._rows_key is None:
            return [self.data] if isinstance(self.data, dict) else list(self.data)
        return list(self.data.get(self._rows_key) or [])

    @property
    def df(self) -> Any:
        """``rows`` as a pandas DataFrame (needs pandas); nested values stay as objects."""
        return frame(self.rows)

    def _columns(self) -> List[str]:
        cols: List[str] = []
        for r in self.rows:
            for k, v in r.items():
                if k not in cols and _scalar(v):
                    cols.append(k)
        return cols

    def _row_label(self, r: Dict[str, Any]) -> str:
        parts = []
        for k in ("variant", "preset", "model", "context_length", "batch_size", "profile_type", "precision"):
            if k in r and _scalar(r[k]) and r[k] is not None:
                parts.append(f"{k}={r[k]}")
        peak = r.get("peak_allocated_bytes")
        if isinstance(peak, (int, float)):
            parts.append(f"peak {peak / GiB:.3f} GiB")
        if r.get("oom"):
            parts.append("OOM")
        return ", ".join(parts) or ", ".join(f"{k}={v}" for k, v in r.items() if _scalar(v))[:120]

    def __repr__(self) -> str:
        rows = self.rows
        if self._rows_key is None:
            keys = ", ".join(sorted(self.data)) if isinstance(self.data, dict) else ""
            return f"<{self._kind}: {keys}>"
        lines = [f"<{self._kind} {len(rows)} {self._rows_key}:"] + [f"  {i}: {self._row_label(r)}" for i, r in enumerate(rows)]
        return "\n".join(lines) + ">"

    def _repr_html_(self) -> str:
        rows = self.rows
        cols = self._columns()
        shown = rows[: self.MAX_HTML_ROWS]
        more = f"<p>… and {len(rows) - len(shown)} more rows (<code>.rows</code>, <code>.df</code>)</p>" if len(rows) > len(shown) else ""
        title = f"<p><b>vramscope</b> {self._kind}: {len(rows)} {self._rows_key or 'row(s)'}</p>"
        return title + html_table(shown, cols) + more


class AnalyzeResult(JobResult):
    """``analyze``'s JSON (``data``): the peak, what is live at it per allocation site
    (``rows``, ``df``) and per category (``categories``, ``categories_df``), the largest
    allocations (``largest``, ``largest_df``)."""

    def __init__(self, data: Dict[str, Any]):
        super().__init__(data, None, "AnalyzeResult")

    def _share(self, b: int) -> Optional[float]:
        peak = self.data.get("peak_active_bytes") or 0
        return 100.0 * b / peak if peak else None

    @property
    def rows(self) -> List[Dict[str, Any]]:
        """What is live at the peak per allocation site (top frame), largest first: ``frame``,
        ``live_bytes``, ``live_mib`` (MiB = 1024² B), ``percent_of_peak``."""
        return [dict(frame=f, live_bytes=b, live_mib=b / MiB, percent_of_peak=self._share(b)) for f, b in self.data["live_at_peak_by_frame"]]

    @property
    def categories(self) -> List[Dict[str, Any]]:
        """What is live at the peak per category: ``category``, ``live_bytes``, ``live_mib``, ``percent_of_peak``."""
        return [dict(category=c, live_bytes=b, live_mib=b / MiB, percent_of_peak=self._share(b)) for c, b in self.data["live_at_peak_by_category"]]

    @property
    def largest(self) -> List[Dict[str, Any]]:
        """The largest allocations: ``size_bytes``, ``size_mib``, ``category``, ``alloc_at`` and
        ``free_at`` (trace indices; None: before the trace / live at the end), ``frame`` (the
        innermost) and ``frames``."""
        out = []
        for a in self.data["largest"]:
            frames = a.get("frames") or []
            if isinstance(frames, dict):
                frames = frames.get("frames") or []
            out.append(
                dict(
                    size_bytes=a["size"], size_mib=a["size"] / MiB, category=a.get("category"), alloc_at=a.get("alloc_at"),
                    free_at=a.get("free_at"), frame=frames[0] if frames else None, frames=list(frames), addr=a.get("addr"),
                )
            )
        return out

    @property
    def df(self) -> Any:
        """``rows`` as a pandas DataFrame: one row per allocation site, sizes in bytes and MiB."""
        return frame(self.rows, ["frame", "live_bytes", "live_mib", "percent_of_peak"])

    @property
    def categories_df(self) -> Any:
        return frame(self.categories, ["category", "live_bytes", "live_mib", "percent_of_peak"])

    @property
    def largest_df(self) -> Any:
        return frame(self.largest, ["size_bytes", "size_mib", "category", "alloc_at", "free_at", "frame", "frames", "addr"])

    def __repr__(self) -> str:
        d = self.data
        top = "; ".join(f"{r['frame']} {r['live_mib']:.1f} MiB" for r in self.rows[:3])
        return f"<AnalyzeResult peak {d['peak_active_bytes'] / MiB:.1f} MiB active, {len(self.rows)} allocation sites live at the peak: {top}>"

    def _repr_html_(self) -> str:
        d = self.data
        head = f"<p><b>vramscope analyze</b>: peak {d['peak_active_bytes'] / MiB:.2f} MiB active (MiB = 1024² B), {d['allocations']} allocations</p>"
        return (
            head
            + "<p>Live at the peak by category:</p>"
            + html_table(self.categories, ["category", "live_mib", "percent_of_peak"], ["category", "MiB", "% of peak"])
            + "<p>Live at the peak by allocation site:</p>"
            + html_table(self.rows[: self.MAX_HTML_ROWS], ["frame", "live_mib", "percent_of_peak"], ["frame", "MiB", "% of peak"])
        )
