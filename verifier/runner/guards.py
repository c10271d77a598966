"""Checks a run must pass before its first sample: nothing overwritten, nothing mixed, nothing too big.

* :func:`check_fresh_run_dir` -- ``run SUITE --run-dir DIR`` on a folder that already holds a run
  would replace its samples (another seed rewrites every chunk): refused, naming ``--resume``.
* :func:`plugin_hashes` / :func:`check_plugins_unchanged` -- the SHA-256 of every plugin decoder's
  source file is recorded in ``run.json``; a resume (or another shard into the same folder) whose
  plugin file changed would mix samples of two programs in one sample set: refused.
* :func:`check_sizes` -- the emitted tokens of a sample set are held in memory for the statistics
  (and a chunk's while sampling): sizes beyond the machine's available memory are a
  :class:`~verifier.errors.ConfigError` naming the key and the limit, not a machine that swaps
  until it dies, nor a ``MemoryError`` blamed on the decoder.
* :func:`check_missing` -- (after sampling, in ``report``/``merge``) missing or unreadable chunk
  files of a decoder that did not stop are an error unless ``--allow-partial``.
* :func:`check_device` -- a model device that does not exist here (``cuda`` on a CPU-only
  machine) is refused before anything runs, instead of being ignored while the report says cuda.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from verifier._resume import resume_command
from verifier.errors import ConfigError

__all__ = ["check_fresh_run_dir", "plugin_hashes", "check_plugins_unchanged", "record_plugins", "check_missing",
           "check_sizes", "check_device", "available_memory", "TOKEN_BYTES", "CHUNK_COPIES", "SET_COPIES", "MEMORY_SHARE"]

TOKEN_BYTES = 8  # emitted tokens are int64
CHUNK_COPIES = 4  # a chunk lives as the decoder's buffers, its returned array, the validated copy and the shard
SET_COPIES = 3  # statistics hold every sample set of a decoder at once, plus the concatenated copy and counts
RUN_FILE = "run.json"  # a run folder's suite and settings (verifier.runner.run re-exports it)
REPORT_FILE = "report.json"  # a run's verdict (verifier.reports.write_reports), written after its samples
MEMORY_SHARE = 0.8  # of the memory available when the run starts (models, torch and the OS need the rest)


def check_fresh_run_dir(run_dir: str | Path, run_file: str) -> None:
    """Raise :class:`ConfigError` when ``run_dir`` already holds a run (its ``run_file``, samples or reports), or
    it (or a parent) is a file or a dangling symlink."""
    run_dir = Path(run_dir)
    blocked = next((p for p in (run_dir, *run_dir.parents) if p.is_symlink() and not p.exists()
                    or p.exists() and not p.is_dir()), None)
    if blocked is not None:  # else the run fails after the models load, blaming its lock file ("File exists")
        what = "a dangling symlink" if blocked.is_symlink() and not blocked.exists() else "a file"
        raise ConfigError(f"--run-dir={str(run_dir)!r}: {str(blocked)!r} is {what}, not a folder; allowed: a folder, "
                          "or a path that does not exist yet (it is made)")
    has_samples = (run_dir / "samples").is_dir() and any((run_dir / "samples").rglob("chunk-*.npz"))
    if (run_dir / run_file).is_file() or has_samples:
        raise ConfigError(
            f"--run-dir={str(run_dir)!r} already holds a run; a new run would overwrite its samples. "
            f"Allowed: `{resume_command(run_dir)}` to continue that run, `specverify report {run_dir}` to "
            "report on it again, or a --run-dir that does not exist yet")
    if (run_dir / "server" / "responses.jsonl").is_file():  # a self-reported URL audit keeps no run file
        raise ConfigError(
            f"--run-dir={str(run_dir)!r} already holds a URL audit's response journal (server/responses.jsonl) and no "
            f"{run_file}: a self-reported audit (`--design self-reported`); a new run would overwrite its reports. "
            "Allowed: that audit's own command with this --run-dir to continue it, or a --run-dir that does not exist yet")
    if (run_dir / REPORT_FILE).is_file():  # a run's reports without its run file or samples (a committed audit folder)
        raise ConfigError(
            f"--run-dir={str(run_dir)!r} already holds a run's reports ({REPORT_FILE}) and no {run_file} or samples to "
            "continue from; a new run would overwrite them. Allowed: a --run-dir that does not exist yet")


def plugin_hashes(suite: Any) -> dict[str, dict[str, Any]]:
    """``{decoder name: {"spec", "path", "sha256", "folder_sha256"}}`` for every plugin decoder of ``suite``.

    File plugins resolve against the suite's folder; module plugins are looked up on ``sys.path``
    (call after the suite's ``python_path`` is added).  ``path``/``sha256`` are None when the
    source cannot be found (the decoder build then reports why).
    """
    from verifier.plugins import file_sha256, plugin_source, resolve_plugin_spec

    out: dict[str, dict[str, Any]] = {}
    for d in suite.decoders:
        if ":" not in d.decoder:
            continue
        spec = resolve_plugin_spec(d.decoder, suite.base_dir)
        path = plugin_source(spec)
        out[d.name] = {"spec": d.decoder, "path": str(path) if path else None,
                       "sha256": file_sha256(path) if path else None,
                       "folder_sha256": folder_py_sha256(path) if path else None}
    return out


MAX_FOLDER_FILES = 200


def folder_py_sha256(path: str | Path) -> str | None:
    """One SHA-256 over the names and bytes of the ``.py`` files beside a plugin's entry file.

    A plugin usually imports helpers from its own folder (or package); a change there changes its
    samples as surely as a change in the entry file.  None when the folder holds more than
    ``MAX_FOLDER_FILES`` Python files (then only the entry file is guarded).
    """
    import hashlib

    files = sorted(Path(path).parent.glob("*.py"))
    if len(files) > MAX_FOLDER_FILES:
        return None
    digest = hashlib.sha256()
    for f in files:
        try:
            data = f.read_bytes()
        except OSError:
            data = b"<unreadable>"
        digest.update(f.name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def check_plugins_unchanged(stored: dict[str, dict[str, Any]] | None, current: dict[str, dict[str, Any]],
                            run_dir: str | Path) -> None:
    """Raise :class:`ConfigError` when a plugin file recorded in ``run.json`` has changed."""
    for name, was in (stored or {}).items():
        now = current.get(name)
        if not was.get("sha256") or now is None:
            continue
        if now.get("sha256") != was["sha256"]:
            raise ConfigError(
                f"decoders[{name}]: plugin file {was.get('path')!r} changed since {str(run_dir)!r} was started "
                f"(sha256 {was['sha256'][:12]}... then, {str(now.get('sha256'))[:12]}... now); its new samples would "
                "mix with the old ones in one sample set. Allowed: restore that file, or start a new run folder")
        if was.get("folder_sha256") and now.get("folder_sha256") and now["folder_sha256"] != was["folder_sha256"]:
            folder = str(Path(was.get("path") or ".").parent)
            raise ConfigError(
                f"decoders[{name}]: a Python file in the plugin's folder {folder!r} (beside {was.get('path')!r}) was "
                f"added, removed or changed since {str(run_dir)!r} was started; the plugin may import it, so new "
                "samples could mix with the old ones in one sample set. Allowed: restore that folder, or start a new run folder")


def record_plugins(store: Any, suite: Any, run_file: str, *, check: bool) -> None:
    """Record each plugin file's SHA-256 in ``run_file``; with ``check`` (resume, shards), first
    refuse a plugin file that changed since it was recorded.

    Raises
    ------
    ConfigError
        A plugin file recorded in ``run_file`` has changed (exit 2).
    """
    current = plugin_hashes(suite)
    info = store.read_json(run_file)
    if check or "plugins" in info:
        check_plugins_unchanged(info.get("plugins"), current, store.run_dir)
    if info.get("plugins") != current:
        store.write_json(run_file, {**info, "plugins": {**(info.get("plugins") or {}), **current}})


def check_missing(store: Any, plan: Any, on_disk: int, allow_partial: bool, valid: Callable[[int], bool]) -> None:
    """Raise :class:`ConfigError` naming the chunk files when a sample set has fewer than its planned
    samples on disk, unless ``allow_partial``; ``valid(i)`` says whether chunk ``i`` is usable."""
    if allow_partial or on_disk >= plan.samples:
        return
    files = [store.chunk_path(plan.set_id, i).name for i in range(plan.num_chunks) if not valid(i)]
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    raise ConfigError(
        f"{plan.samples - on_disk} of {plan.samples} samples of sample set {plan.label!r} are missing or unreadable "
        f"({shown} in {str(store.samples_dir / plan.set_id)!r}); allowed: `{resume_command(store.run_dir)}` "
        "to sample them again, or --allow-partial to report on the samples present (the report then says how "
        "many are missing)")


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def _count(n: float) -> str:
    """A count as digits up to 10**12, beyond that compactly (``6e+299``), not hundreds of digits."""
    return str(int(n)) if abs(n) < 10**12 else f"{float(n):.3g}"


def check_sizes(suite: Any, available: int | None = None) -> None:
    """Refuse sample budgets whose emitted tokens cannot fit in memory.

    Per decoder: ``sample sets x samples x max_new_tokens x 8 B x SET_COPIES`` (the statistics) and
    ``min(chunk_size, samples) x max_new_tokens x 8 B x CHUNK_COPIES`` (one chunk while sampling),
    each against ``MEMORY_SHARE`` of the available memory.

    Raises
    ------
    ConfigError
        Naming the decoder, the keys (``samples``, ``max_new_tokens``, ``chunk_size``), the memory
        needed and the limit.
    """
    available = available_memory() if available is None else available
    if available is None:
        return
    limit = MEMORY_SHARE * available
    for d in suite.decoders:
        sets = len(d.prompts) * len(d.sampling) * len(d.num_draft_tokens)
        row = d.max_new_tokens * TOKEN_BYTES
        need = sets * d.samples * row * SET_COPIES
        where = f"{suite.source}: decoders[{d.name}] (profile {suite.profile})"
        if need > limit:
            most = max(0, int(limit // (sets * row * SET_COPIES)))
            raise ConfigError(
                f"{where}: samples={_count(d.samples)} x max_new_tokens={_count(d.max_new_tokens)} over {sets} sample set(s) needs "
                f"about {_gib(need)} of memory for the statistics; the limit is {_gib(limit)} "
                f"({MEMORY_SHARE:.0%} of the {_gib(available)} available). Allowed: samples <= {most} at this "
                "max_new_tokens (or a smaller max_new_tokens, or shards on more machines: run --shard I/N)")
        chunk = min(d.chunk_size, d.samples) * row * CHUNK_COPIES
        if chunk > limit:
            most = max(0, int(limit // (row * CHUNK_COPIES)))
            raise ConfigError(
                f"{where}: chunk_size={_count(d.chunk_size)} x max_new_tokens={_count(d.max_new_tokens)} needs about {_gib(chunk)} "
                f"of memory per chunk; the limit is {_gib(limit)} ({MEMORY_SHARE:.0%} of the {_gib(available)} "
                f"available). Allowed: chunk_size <= {most} at this max_new_tokens")


def check_device(device: str, where: str) -> None:
    """Raise :class:`ConfigError` when torch ``device`` is malformed or absent on this machine."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}={device!r} is not a torch device ({exc}); allowed: cpu, cuda, cuda:N, mps") from None
    if dev.type == "meta":  # shapes without data: every model would sample nothing (tabular ones ignored it)
        raise ConfigError(f"{where}={device!r}: the meta device holds no data, so no model can sample on it; "
                          "allowed: cpu, cuda, cuda:N, mps")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{where}={device!r}: CUDA is not available on this machine "
                              "(torch.cuda.is_available() is False); allowed: 'cpu' here, or run on a GPU machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"{where}={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                              f"allowed: cuda:0..cuda:{torch.cuda.device_count() - 1}")
    elif dev.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ConfigError(f"{where}={device!r}: MPS is not available on this machine; allowed: 'cpu'")
