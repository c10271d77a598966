"""The command that continues a run folder, for the messages that tell a user how to resume one.

An audit's run folder (``specverify audit``, ``--url`` included) holds its plan, :data:`AUDIT_PLAN_FILE`;
``specverify audit --resume RUN_DIR`` continues it with that plan (the numeric floor, the sequential
stop, the URL audit's server options).  ``specverify run --resume`` would sample the stored suite
without the plan, so it is named only for suite runs, and refuses an audit's folder
(:func:`refuse_run_resume`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["AUDIT_PLAN_FILE", "resume_command", "refuse_run_resume"]

AUDIT_PLAN_FILE = "audit.json"  # the plan of an audit run (verifier.audit.sequential.PLAN_FILE)


def resume_command(run_dir: str | Path) -> str:
    """``specverify audit --resume RUN_DIR`` for an audit's run folder, else ``specverify run --resume RUN_DIR``.

    >>> resume_command("/nonexistent/run")
    'specverify run --resume /nonexistent/run'
    """
    command = "audit" if (Path(run_dir) / AUDIT_PLAN_FILE).is_file() else "run"
    return f"specverify {command} --resume {run_dir}"


# the arms of a two-sample URL audit's folder (verifier.cli._audit_url.bind_blackbox_journals): journals, no run.json
_TWO_SAMPLE_JOURNALS = ("speculative/server/responses.jsonl", "reference/server/responses.jsonl")


def refuse_run_resume(run_dir: str | Path) -> None:
    """``specverify run --resume RUN_DIR`` on an audit's folder: refused before anything in it is read or written.

    Parameters
    ----------
    run_dir : path
        The folder given to ``--resume``.

    Raises
    ------
    ConfigError
        (exit 2) ``run_dir`` holds an audit's plan (:data:`AUDIT_PLAN_FILE`: ``specverify audit --resume`` continues
        it with the plan -- the URL audit's server options, the numeric floor, the sequential stop -- which ``run
        --resume`` would drop), or is a self-reported / two-sample URL audit's folder (no run.json: rerun the audit
        command with the same ``--run-dir``; its journal answers every request already sent).
    """
    from verifier.errors import ConfigError

    folder = Path(run_dir)
    if (folder / AUDIT_PLAN_FILE).is_file():
        raise ConfigError(f"--resume={str(run_dir)!r} is an audit's run folder (its plan, {AUDIT_PLAN_FILE}: the server "
                          "options of a URL audit, the numeric floor, the sequential stop), which `specverify run "
                          f"--resume` would resume without; allowed: `specverify audit --resume {run_dir}`")
    from verifier.server.folder import not_for_self_reported, self_reported_report

    if self_reported_report(folder) is not None:
        raise not_for_self_reported("run --resume", run_dir)
    if not (folder / "run.json").exists() and any((folder / j).is_file() for j in _TWO_SAMPLE_JOURNALS):
        raise ConfigError(f"--resume={str(run_dir)!r} is a two-sample URL audit's folder (the response journals of its "
                          "two arms, no run.json); allowed: rerun its `specverify audit --url URL --reference-url ... "
                          f"--run-dir {run_dir}` command: the journals answer every request already sent, so nothing "
                          "is resampled")
