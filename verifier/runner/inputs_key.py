"""The inputs key of a run folder: a SHA-256 over everything its statistics depend on.

The stored samples (``samples/`` chunk files by name, size and modification time), ``stopped.json``,
the suite (``run.json``), the target/draft model files, ``--allow-partial`` and the code that computes
them (every ``verifier/**/*.py`` outside ``verifier/reports/`` and ``verifier/cli/``, which only render
and dispatch).  The runner stores it in report.json (``run.inputs_sha256``); a re-render
(:mod:`verifier.reports.cache`) and a stored diagnosis (:func:`verifier.diagnose.run_dir.stored_diagnosis`)
are reused only under the same key.  Standard library only: ``specverify report`` checks it before
importing torch or the runner's statistics.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["KEY_FIELD", "inputs_key", "run_inputs_key"]

KEY_FIELD = "inputs_sha256"  # report.json run.<KEY_FIELD>
_PACKAGE = Path(__file__).resolve().parents[1]  # verifier/
_RENDER_ONLY = ("reports", "cli")  # verifier/ subpackages that cannot change a statistic


def _code_digest() -> str:
    root = _PACKAGE
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in _RENDER_ONLY:
            continue
        h.update(str(rel).encode())
        h.update(path.read_bytes())
    return h.hexdigest()

def inputs_key(run_dir: str | Path, suite_dict: dict[str, Any], allow_partial: bool) -> str | None:
    """SHA-256 over everything a run's statistics depend on (module docstring); None when they
    depend on code outside the package (a ``module:attr`` model): never reused."""
    run_dir = Path(run_dir)
    h = hashlib.sha256()
    h.update(json.dumps(suite_dict, sort_keys=True, default=str).encode())
    h.update(b"partial" if allow_partial else b"complete")
    h.update(_code_digest().encode())
    samples = run_dir / "samples"
    if samples.is_dir():
        for path in sorted(samples.rglob("*")):
            if path.is_file():
                st = path.stat()
                h.update(f"{path.relative_to(samples)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    stopped = run_dir / "stopped.json"
    h.update(stopped.read_bytes() if stopped.is_file() else b"-")
    models = _models_digest(suite_dict)
    if models is None:  # a model defined by code outside the package: no reuse
        return None
    h.update(models.encode())
    return h.hexdigest()

def _files_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*") if root.is_dir() else [root]):
        if path.is_file():
            st = path.stat()
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()

def _models_digest(suite_dict: dict[str, Any]) -> str | None:
    """The target/draft models the expected laws come from: tabular pairs are code (in the code
    digest), shipped and checkpoint folders by their files' names, sizes and times; a
    ``module:attr`` model is code outside the package, so None (never reused)."""
    raw = suite_dict.get("raw", suite_dict)
    models = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(models, dict):
        return None
    base = Path(str(suite_dict.get("base_dir") or "."))
    h = hashlib.sha256()
    for name, table in sorted(models.items()):
        if not isinstance(table, dict):
            return None
        for role in ("target", "draft"):
            spec = str(table.get(role, ""))
            if not spec or spec.startswith("tabular:"):
                continue
            if spec.startswith("shipped:"):  # package data, verifier/models/shipped/NAME (torch-free: no loader import)
                h.update(_files_digest(_PACKAGE / "models" / "shipped"
                                       / spec.split(":", 1)[1]).encode())
                continue
            path = Path(spec) if Path(spec).is_absolute() else base / spec
            if not path.exists():
                return None
            h.update(_files_digest(path).encode())
    return h.hexdigest()

def run_inputs_key(run_dir: str | Path, allow_partial: bool) -> str | None:
    """:func:`inputs_key` with the suite as stored in the run folder's run.json (None: no run.json)."""
    try:
        suite = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))["suite"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(suite, dict):  # a malformed run.json: the runner's own checks name the problem
        return None
    return inputs_key(run_dir, suite, allow_partial)
