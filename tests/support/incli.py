"""`burnin ...` run in the test's own process: what the command prints and returns, without
the fresh interpreter (about 0.25 s of CPU) a `python -m burnin` subprocess costs.

For a test whose claim is the command's verdict (its exit status, its output), not its entry
point: where the entry point or the process boundary is the claim, the test runs the real
subprocess (one such per command is kept: tests/test_admit.py, ...)."""

from __future__ import annotations

import contextlib
import io
import subprocess

from burnin import cli


def burnin(*argv: str) -> subprocess.CompletedProcess:
    """burnin.cli.main(argv) with its stdout and stderr captured, as
    subprocess.run([... "-m", "burnin", *argv], capture_output=True, text=True) gives
    them. An exception raised out of main is not caught: where a process would print a
    traceback, the test fails with it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:  # argparse's usage errors, as the process would exit
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=err)
                code = 1
    return subprocess.CompletedProcess(["burnin", *argv], code, out.getvalue(),
                                       err.getvalue())
