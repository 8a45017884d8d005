"""Type stubs of the compiled extension (src/python.rs)."""
from os import PathLike
from typing import List, Optional, Union

__version__: str

def main(argv: List[str]) -> int:
    """Run the command line in-process; returns the exit code."""

def keywords() -> str:
    """Each function's keywords, read off the clap flags (options/keywords.rs), as JSON."""

def profile(words: List[str]) -> Profile:
    """`vramscope profile` with these flags, nothing printed or written."""

def compare(words: List[str], out_dir: Optional[str] = None) -> str:
    """`profile --compare` with these flags: compare.json's object (+ markdown, notes) as JSON."""

def sweep(words: List[str], out_dir: Optional[str] = None) -> str:
    """`sweep` with these flags: sweep.json's object as JSON; out_dir writes its files."""

def fit(words: List[str]) -> str:
    """`fit` with these flags: its JSON object as text."""

def estimate(words: List[str]) -> str:
    """`estimate` with these flags: its JSON object as text."""

def analyze(words: List[str]) -> str:
    """`analyze FILE` with these flags: the report's JSON."""

def serve(words: List[str]) -> str:
    """`vramscope serve` with these flags: the plan (or --find's answer) as JSON text."""

class Profile:
    def summary_json(self) -> str: ...
    def notes(self) -> List[str]: ...
    def text(self, i: int) -> str: ...
    def save_snapshot(self, i: int, path: Union[str, PathLike[str]]) -> None: ...
    def save_report(self, i: int, path: Union[str, PathLike[str]]) -> None: ...
    def report_html(self, i: int, name: str) -> str: ...
