"""Type stubs of the compiled extension (src/python.rs)."""
from os import PathLike
from typing import List, Union

__version__: str

def main(argv: List[str]) -> int:
    """Run the command line in-process; returns the exit code."""

def run_command(argv: List[str]) -> None:
    """Run a subcommand; a flag's error raises ValueError, any other RuntimeError."""

def profile(words: List[str]) -> Profile:
    """`vramscope profile` with these flags, nothing printed or written."""

class Profile:
    def summary_json(self) -> str: ...
    def notes(self) -> List[str]: ...
    def save_snapshot(self, i: int, path: Union[str, PathLike[str]]) -> None: ...
    def save_report(self, i: int, path: Union[str, PathLike[str]]) -> None: ...
    def report_html(self, i: int, name: str) -> str: ...
