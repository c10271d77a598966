"""The verdict file of a job child process: where its exit code is written as its very last act.

The job-process machinery (:mod:`verifier.cli._isolate`) names the file in :data:`VERDICT_ENV`; the
child writes ``{"exit_code": N}`` there (:func:`write_verdict`).  It lives below the CLI because a
call that never returns to Python (:mod:`verifier._call_timeout`) ends the child with a verdict too.
Standard library only.
"""

from __future__ import annotations

import json
import os

__all__ = ["VERDICT_ENV", "write_verdict"]

VERDICT_ENV = "SPECVERIFY_VERDICT_FILE"  # set in the child: where main() writes its exit code last


def write_verdict(exit_code: int) -> None:
    """In the child: record ``exit_code`` in the verdict file (atomic), if the parent asked for one."""
    path = os.environ.get(VERDICT_ENV)
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"exit_code": int(exit_code), "pid": os.getpid()}, fh)
    os.replace(tmp, path)
