"""What a certificate still costs: the sampling rate, the rows still needed and the hours they take (issue 27).

While sampling, the runner appends one line per chunk to ``RUN_DIR/timing.jsonl`` (:func:`record_chunk`):
``{"set_id", "chunk", "rows", "seconds"}``, the wall seconds of that chunk's ``generate`` calls (the decoder's own
time: no statistics, no diagnosis, no start-up).  Timing is volatile, so it stays out of the chunk files (whose bytes
a rerun with the same seed reproduces) and out of everything in report.json but its ``run`` section.

At report time :func:`decoder_costs` gives, per decoder, the measured rate (timed rows / timed seconds over its sets)
and, where cells are UNDERPOWERED, the rows still needed to bring every set to the decoder's ``n_needed`` and the
hours that takes at that rate.  A run folder written before timing was recorded (or one whose chunks were imported)
says "rate not recorded" instead of guessing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["TIMING_FILE", "record_chunk", "record_chunks", "read_timing", "chunks_on_disk", "decoder_costs",
           "cost_sentence"]

TIMING_FILE = "timing.jsonl"
MIN_SECONDS = 1e-6  # lines hold seconds rounded to 6 decimals: a smaller positive value was not written by record_chunks


def record_chunk(run_dir: str | Path, set_id: str, chunk: int, rows: int, seconds: float) -> None:
    """Append one chunk's sampling time to ``RUN_DIR/timing.jsonl``; see :func:`record_chunks`."""
    record_chunks(run_dir, [(set_id, chunk, rows, seconds)])


def record_chunks(run_dir: str | Path, records: Iterable[tuple[str, int, int, float]]) -> None:
    """Append ``(set_id, chunk, rows, seconds)`` lines to ``RUN_DIR/timing.jsonl`` in one write.  Timing is advisory:
    no fsync on the sampling path (a crash may lose a line; the report then times fewer rows), and a failed write is
    ignored, never a reason to lose a chunk."""
    text = "".join(json.dumps({"set_id": s, "chunk": int(c), "rows": int(r), "seconds": round(float(sec), 6)}) + "\n"
                   for s, c, r, sec in records)
    if not text:
        return
    try:
        with open(Path(run_dir) / TIMING_FILE, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError:
        pass


def read_timing(run_dirs: Iterable[str | Path]) -> dict[tuple[str, int], tuple[int, float]]:
    """``{(set_id, chunk): (rows, seconds)}`` from the folders' ``timing.jsonl`` (the last line of a chunk wins: a
    chunk sampled again after a crash).

    Only lines as :func:`record_chunks` writes them count: a JSON object with a string ``set_id``, integers
    ``chunk >= 0`` and ``rows >= 1`` and a finite ``seconds >= MIN_SECONDS`` (the resolution the lines are written
    at).  Anything else -- garbage, ``1e400`` rows, negative, zero, tiny, NaN or infinite seconds, booleans -- is
    skipped: timing is advisory and a corrupt line must neither crash a report nor put a nonsense rate in it.
    """
    out: dict[tuple[str, int], tuple[int, float]] = {}
    for d in run_dirs:
        path = Path(d) / TIMING_FILE
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            set_id, chunk, rows, seconds = rec.get("set_id"), rec.get("chunk"), rec.get("rows"), rec.get("seconds")
            if (isinstance(set_id, str) and _is_int(chunk) and chunk >= 0 and _is_int(rows) and rows >= 1
                    and isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                    and math.isfinite(seconds) and seconds >= MIN_SECONDS):
                out[(set_id, int(chunk))] = (int(rows), float(seconds))
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def chunks_on_disk(timing: dict[tuple[str, int], tuple[int, float]], plans: Iterable[Any],
                   chunk_path: Callable[[str, int], Path]) -> dict[tuple[str, int], tuple[int, float]]:
    """The timing lines of chunks the run planned, holds on disk, and timed with the rows the plan gives them.

    A line of another run's set, of a chunk index past the plan, of a chunk file that is gone, or with another row
    count (a forged or stale line) would lend the report a rate its samples never had.

    Parameters
    ----------
    timing : dict
        :func:`read_timing` of the run folder.
    plans : iterable of SampleSetPlan
        The run's sample sets (``set_id``, ``num_chunks``, ``chunk_rows(i)``).
    chunk_path : callable
        ``(set_id, chunk) -> Path`` of the chunk file (``SampleStore.chunk_path``).
    """
    planned = {(p.set_id, i): p.chunk_rows(i) for p in plans for i in range(p.num_chunks)}
    return {key: (rows, sec) for key, (rows, sec) in timing.items()
            if planned.get(key) == rows and chunk_path(*key).is_file()}


def decoder_costs(report: dict[str, Any], timing: dict[tuple[str, int], tuple[int, float]],
                  previous: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per decoder of ``report``: the sampling rate of its chunks on disk, the rows still needed and the hours.

    Parameters
    ----------
    report : dict
        report.json without its ``run`` section's cost (``decoders[].n_needed``, ``sample_sets[]``).
    timing : dict
        :func:`read_timing` of the run folder (and its shards).
    previous : dict, optional
        The cost section of the folder's report before a recompute (``{decoder: entry}``): a decoder none of whose
        chunks has a timing line (a committed folder keeps no timing.jsonl) takes the run's timed rows and seconds
        from it, so the recomputed report keeps the rate the run measured.

    Returns
    -------
    dict
        ``{decoder: {"rate_samples_per_s": float | None, "timed_samples": int, "timed_seconds": float,
        "rows_still_needed": int, "hours_still_needed": float | None, "sentence": str}}``; ``rows_still_needed``
        sums ``n_needed - samples_on_disk`` over the decoder's sets (0 when no cell is underpowered or none can
        reach the target with more rows).
    """
    out: dict[str, dict[str, Any]] = {}
    sets = [s for s in report.get("sample_sets") or [] if isinstance(s, dict)]
    per_set: dict[str, list[float]] = {}
    for (set_id, _chunk), (r, sec) in timing.items():
        acc = per_set.setdefault(set_id, [0.0, 0.0])
        acc[0] += r
        acc[1] += sec
    for d in report.get("decoders") or []:
        name = d.get("decoder")
        mine = [s for s in sets if s.get("decoder") == name]
        rows = sum(per_set.get(str(s.get("set_id")), [0.0, 0.0])[0] for s in mine)
        seconds = sum(per_set.get(str(s.get("set_id")), [0.0, 0.0])[1] for s in mine)
        if not rows and isinstance((previous or {}).get(str(name)), dict):  # the run's own figures (no timing lines)
            rows, seconds = _timed_figures(previous[str(name)])
        rate = rows / seconds if rows and seconds > 0 else None
        need = d.get("n_needed")
        still = sum(max(0, int(need) - int(s.get("samples_on_disk") or 0)) for s in mine) if need else 0
        hours = still / rate / 3600 if rate and still else (0.0 if not still else None)
        entry = {"rate_samples_per_s": rate, "timed_samples": int(rows), "timed_seconds": seconds,
                 "rows_still_needed": int(still), "hours_still_needed": hours}
        entry["sentence"] = cost_sentence(entry, need, len(mine))
        out[str(name)] = entry
    return out


def _timed_figures(entry: dict[str, Any]) -> tuple[float, float]:
    """(timed rows, seconds) of a previous report's cost entry, (0, 0) unless both are finite and positive."""
    import math

    rows, seconds = entry.get("timed_samples"), entry.get("timed_seconds")
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in (rows, seconds))
    return (float(rows), float(seconds)) if ok else (0.0, 0.0)


def _rate(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def _duration(hours: float) -> str:
    return f"{hours * 60:.1f} min" if hours < 1 else f"{hours:.1f} h"


def cost_sentence(entry: dict[str, Any], n_needed: int | None, num_sets: int) -> str:
    """One line: "sampled at R samples/s (N rows timed); S more rows (n_needed per set over K sets) take H at that
    rate" -- or what is missing."""
    rate = entry.get("rate_samples_per_s")
    said = (f"sampled at {_rate(rate)} samples/s ({entry['timed_samples']:,} rows timed, "
            f"{entry['timed_seconds']:.3g} s of generate calls)" if rate else
            "sampling rate not recorded (no valid timing.jsonl line for these chunks)")
    still = entry.get("rows_still_needed") or 0
    if not still:
        return said
    where = f"{still:,} more rows (n >= {n_needed:,} in each of {num_sets} sample set(s))"
    hours = entry.get("hours_still_needed")
    return f"{said}; {where}" + (f" take about {_duration(hours)} at that rate" if hours is not None else
                                 ": the time cannot be estimated without a rate")
