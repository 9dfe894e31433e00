"""The command line as a reader meets it in chapter 16: a command run as a shell would run it.

- `as_a_shell(main, *argv)` calls a command-line entry point (chapter 16's `main`) in this process
  and prints what a shell user sees of a failure: the exit status and standard error (standard
  output is left out).
- `python_m(*arguments)` runs `python -m annotated_transformer ARGUMENTS` in a fresh process, as a
  user would, and returns the finished process with its output as text.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import Callable

__all__ = ["as_a_shell", "python_m"]


def as_a_shell(main: Callable[[list[str]], int | None], *argv: str) -> None:
    """Run `main(argv)` as a shell would: print its exit status and its standard error."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(list(argv))
        except SystemExit as exit_:
            status = exit_.code
    print(f"exit status {status}: {stderr.getvalue().strip()}")


def python_m(*arguments: str) -> subprocess.CompletedProcess:
    """`python -m annotated_transformer ARGUMENTS` in a new process, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "annotated_transformer", *arguments], capture_output=True,
                          text=True)
