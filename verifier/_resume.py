"""The command that continues a run folder, for the messages that tell a user how to resume one.

An audit's run folder (``specverify audit``, ``--url`` included) holds its plan, :data:`AUDIT_PLAN_FILE`;
``specverify audit --resume RUN_DIR`` continues it with that plan (the numeric floor, the sequential
stop, the URL audit's server options).  ``specverify run --resume`` would sample the stored suite
without the plan, so it is named only for suite runs, and refuses an audit's folder
(``verifier.cli.cmd_run``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["AUDIT_PLAN_FILE", "resume_command"]

AUDIT_PLAN_FILE = "audit.json"  # the plan of an audit run (verifier.audit.sequential.PLAN_FILE)


def resume_command(run_dir: str | Path) -> str:
    """``specverify audit --resume RUN_DIR`` for an audit's run folder, else ``specverify run --resume RUN_DIR``.

    >>> resume_command("/nonexistent/run")
    'specverify run --resume /nonexistent/run'
    """
    command = "audit" if (Path(run_dir) / AUDIT_PLAN_FILE).is_file() else "run"
    return f"specverify {command} --resume {run_dir}"

