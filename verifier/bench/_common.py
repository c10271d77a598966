"""Shared helpers of the benchmarks: machine facts, markdown tables, number formatting."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from typing import Any, Collection, Sequence

__all__ = ["row_json", "machine_facts", "md_table", "fmt_n", "fmt_ratio", "load_average", "Stopwatch", "peak_rss_mib", "names_from",
           "check_seeds", "check_detect_args"]


def row_json(row: Any, **derived: Any) -> dict[str, Any]:
    """A bench row dataclass as JSON: its fields plus ``derived`` values (ratios), non-finite floats as None."""
    from dataclasses import asdict

    d = asdict(row)
    d.update(derived)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def load_average() -> tuple[float, float, float] | None:
    """1/5/15-minute load averages (None where the OS has none)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts() -> dict[str, Any]:
    """What a benchmark figure depends on: CPU, cores, memory, versions, load, GPU (if any)."""
    import importlib.metadata as md

    facts: dict[str, Any] = {
        "cpu": _cpu_model(), "logical_cores": os.cpu_count(), "python": platform.python_version(),
        "platform": platform.platform(), "load_average": load_average(),
    }
    try:
        affinity = len(os.sched_getaffinity(0))
        facts["usable_cores"] = affinity
    except AttributeError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            facts["memory_gib"] = round(int(fh.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    for pkg in ("spec-verifier", "numpy", "scipy", "torch", "transformers"):
        try:
            facts[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            facts[pkg] = None
    try:
        import torch

        facts["torch_threads"] = torch.get_num_threads()
        facts["cuda"] = torch.cuda.is_available()
        if facts["cuda"]:
            facts["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        facts["cuda"] = False
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        facts["git_commit"] = rev.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        facts["git_commit"] = None
    return facts


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table (cells are str()-ed; ``|`` escaped)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def fmt_n(value: float | int | None, censor_at: int | None = None) -> str:
    """A sample size; ``inf`` shows as ``>max`` (censored) or ``never``."""
    if value is None:
        return "n/a"
    if not math.isfinite(value):
        return f">{censor_at}" if censor_at else "never"
    return str(int(value))


def fmt_ratio(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if not math.isfinite(value):
        return "inf"
    return f"{value:.2f}x"


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (``resource.getrusage``)."""
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024.0 if platform.system() != "Darwin" else kib / 2**20


class Stopwatch:
    """``with Stopwatch() as sw: ...``; then ``sw.seconds`` (wall, ``time.perf_counter``)."""

    def __enter__(self) -> "Stopwatch":
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.start


def names_from(argument: str, names: Sequence[str] | None, registry: Collection[str]) -> list[str]:
    """``names`` (None: every name of ``registry``, in its order), each checked to be in ``registry``.

    Raises
    ------
    InvalidArgumentError
        Naming ``argument``, the unknown name and the sorted registry.
    """
    from verifier.errors import invalid_argument

    out = list(registry) if names is None else list(names)
    for name in out:
        if name not in registry:
            raise invalid_argument(argument, name, sorted(registry))
    return out


def check_detect_args(*, seeds: Any, alpha: float, power: float, max_factor: float) -> None:
    """The arguments every samples-to-detect benchmark takes (``bench detect``, ``bench trees``): ``seeds``
    an integer >= 1, ``alpha`` and ``power`` in (0, 1), ``max_factor`` >= 1; else InvalidArgumentError."""
    from verifier.errors import invalid_argument

    check_seeds(seeds)
    for name, v in (("alpha", alpha), ("power", power)):
        if not 0 < v < 1:
            raise invalid_argument(name, v, "a number in (0, 1)")
    if not max_factor >= 1:
        raise invalid_argument("max_factor", max_factor, "a number >= 1")


def check_seeds(seeds: Any) -> int:
    """``seeds`` if it is an integer >= 1 (simulated streams or sample sets), else InvalidArgumentError."""
    from verifier.errors import invalid_argument

    if not (isinstance(seeds, int) and seeds >= 1):
        raise invalid_argument("seeds", seeds, "an integer >= 1")
    return seeds


def write_out(path: str, text: str, flag: str = "--out", *, make_folder: bool = False) -> None:
    """Write a benchmark's ``--out`` (or ``--json``) file, whole or not at all.

    Parameters
    ----------
    path : str
        The file.
    text : str
        Its content (UTF-8).
    flag : str, default "--out"
        The option that named ``path``, for the error.
    make_folder : bool, default False
        Create the missing folders first (``bench all``).

    Raises
    ------
    ReportWriteError
        (exit 2, the figures already printed) the file cannot be written: its folder went away or became read-only
        after the up-front check of ``specverify bench``.  Never a traceback; a write cut short (a full disk, a kill)
        leaves the previous file as it was (the text goes to a temporary file beside it, then replaces it).
    """
    import os
    from pathlib import Path

    from verifier.errors import ReportWriteError

    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        if make_folder:
            target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # its folder is gone too
            pass
        raise ReportWriteError(f"{flag}={path!r} cannot be written: {exc.strerror or exc}") from None
