"""The ``vramscope`` command of the Python package: the same command line, run in-process by
the compiled extension (no Rust toolchain needed)."""
import signal
import sys

from . import _vramscope


def main() -> None:
    # Die quietly on a closed pipe (`vramscope analyze … | head`), as the native binary does.
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(_vramscope.main(["vramscope", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
