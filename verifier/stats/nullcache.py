"""On-disk cache of Monte Carlo null streams across runs (:mod:`verifier.stats.montecarlo`).

A null stream is the deterministic sequence of simulated statistics of one ``(statistic, law,
n, scores)``: its generator is seeded by a hash of exactly those, and it grows in a fixed chunk
schedule, so it never depends on how many draws B a caller asks for (a larger B extends a
smaller one).  At the small per-cell levels of a gate (alpha ~ 1e-5, B ~ 1e6) the statistic of a
biased cell lies beyond every draw, so all B draws are simulated -- seconds per law, and the
same seconds again in every run of the same suite.  This module keeps those streams on disk.

Entry = one file ``<root>/null-streams/<key>.bin``: a magic line, a JSON header (key, statistic,
n, categories, draws held, the generator's state after the last draw, BLAKE2b digest of the
payload) and the draws as little-endian float64.  The key is a hash of the stream's own key
(statistic, law bytes, n, scores bytes -- the seed derives from them) and of the code that
makes the draws (:func:`code_version`: the source of the statistic and the stream class, numpy
and scipy versions, :data:`FORMAT_VERSION`).  A cached stream is bit-identical to a recomputed
one: the draws are stored bytes, and a stream that needs more draws continues from the stored
generator state exactly where the run that wrote it stopped.

Safety.  Writes go to a temporary file in the same folder and are renamed into place
(``os.replace``, atomic), so a reader sees a whole entry or none; concurrent runs may both
write an entry (the same bytes; a shorter stream never replaces a longer one).  Every read
checks the magic, the header, the key, the length and the digest, and that the generator state
is accepted by numpy: a corrupt or truncated entry is deleted and recomputed, never trusted.
Size: at most ``SPECVERIFY_CACHE_MAX_BYTES`` (default :data:`DEFAULT_MAX_BYTES`); the least
recently used entries (file mtime, refreshed on every hit) are removed beyond it.  A cache that
cannot be written (read-only folder, full disk) is skipped with one note on stderr: it never
fails a run and never changes a p-value.

Environment: ``SPECVERIFY_CACHE_DIR`` (root; default ``$XDG_CACHE_HOME/specverify`` or
``~/.cache/specverify``), ``SPECVERIFY_NO_CACHE=1`` (neither read nor write; ``specverify run
--no-cache`` sets it), ``SPECVERIFY_CACHE_MAX_BYTES``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from verifier.errors import ConfigError

__all__ = ["CACHE_DIR_ENV", "NO_CACHE_ENV", "MAX_BYTES_ENV", "DEFAULT_MAX_BYTES", "FORMAT_VERSION", "MIN_STORE_WORK",
           "enabled", "cache_root", "max_bytes", "code_version", "entry_path", "load", "store", "evict", "discard"]

CACHE_DIR_ENV = "SPECVERIFY_CACHE_DIR"
NO_CACHE_ENV = "SPECVERIFY_NO_CACHE"
MAX_BYTES_ENV = "SPECVERIFY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 512 * 2**20  # ~65 streams of 1M draws (8 MB each); the ci suite stores ~30 MB
FORMAT_VERSION = 1  # bump when the file layout changes
MIN_STORE_WORK = 2_000_000  # draws x categories below which a stream is recomputed (< ~0.1 s), not stored
SUBDIR = "null-streams"
MAGIC = b"specverify-null-stream\n"
_HEADER_MAX = 1 << 16  # bytes; a longer header length field means a corrupt entry
_TMP_MAX_AGE_S = 3600.0  # temporary files older than this were left by a killed run: removed on eviction
_warned = False


def enabled() -> bool:
    """False when ``SPECVERIFY_NO_CACHE`` is set to anything but ``""``, ``0``, ``false`` or ``no``."""
    return os.environ.get(NO_CACHE_ENV, "").strip().lower() in ("", "0", "false", "no")


def cache_root() -> Path:
    """``$SPECVERIFY_CACHE_DIR``, else ``$XDG_CACHE_HOME/specverify``, else ``~/.cache/specverify``."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "specverify"


def max_bytes() -> int:
    """The size bound (``SPECVERIFY_CACHE_MAX_BYTES``, default :data:`DEFAULT_MAX_BYTES`).

    Raises
    ------
    ConfigError
        The variable is set to something other than a non-negative integer.
    """
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{MAX_BYTES_ENV}={raw!r} is invalid; allowed: a number of bytes >= 0 (0 stores nothing)")
    return value


def code_version(*objects: Any) -> bytes:
    """Digest of what makes the draws: the source of ``objects`` (the statistic, the stream class),
    numpy's and scipy's versions (generator and multinomial algorithms) and :data:`FORMAT_VERSION`."""
    import scipy

    h = hashlib.blake2b(digest_size=16)
    for part in (str(FORMAT_VERSION), np.__version__, scipy.__version__, *(_source(o) for o in objects)):
        h.update(part.encode() + b"\0")
    return h.digest()


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):  # no source shipped (frozen/zipped install): the qualified name only
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


def entry_path(stream_key: bytes, version: bytes, root: Path | None = None) -> Path | None:
    """The file of one stream: ``<root>/null-streams/<hash of (stream key, code version)>.bin``
    (None when no root can be found: no ``SPECVERIFY_CACHE_DIR`` and no home folder)."""
    name = hashlib.blake2b(stream_key + version, digest_size=20).hexdigest()
    try:
        root = root or cache_root()
    except (RuntimeError, KeyError):  # Path.home() without HOME / passwd entry: run uncached
        return None
    return root / SUBDIR / f"{name}.bin"


def _digest(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=20).hexdigest()


def _read_header(fh) -> dict | None:
    if fh.read(len(MAGIC)) != MAGIC:
        return None
    size = int.from_bytes(fh.read(4), "little")
    if not 0 < size <= _HEADER_MAX:
        return None
    try:
        header = json.loads(fh.read(size).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def load(path: Path, *, kind: str, n: int, categories: int) -> tuple[np.ndarray, dict] | None:
    """The stored draws and generator state of one stream, or None (missing, disabled, or corrupt:
    then the file is removed).

    Returns
    -------
    (values, state) : (np.ndarray, shape (draws,), float64; dict)
        ``state`` is a ``numpy.random.PCG64`` state that numpy accepted.
    """
    if not enabled():
        return None
    try:
        with open(path, "rb") as fh:
            header = _read_header(fh)
            payload = fh.read() if header is not None else b""
    except OSError:
        return None
    try:
        ok = (header is not None and header.get("format") == FORMAT_VERSION and header.get("key") == path.stem
              and header.get("kind") == kind and header.get("n") == n and header.get("categories") == categories
              and isinstance(header.get("draws"), int) and len(payload) == 8 * header["draws"] > 0
              and header.get("digest") == _digest(payload))
        state = header.get("rng_state") if ok else None
        if ok:
            np.random.PCG64().state = state  # raises on a malformed state
    except (TypeError, ValueError, KeyError, OverflowError, AttributeError):
        ok = False
    if not ok:
        _unlink(path)  # corrupt or truncated: recomputed by the caller, never trusted
        return None
    try:
        os.utime(path)  # LRU: a hit is a use
    except OSError:
        pass
    return np.frombuffer(payload, dtype="<f8").astype(np.float64, copy=False), state


def _stored_draws(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            header = _read_header(fh)
        return int(header["draws"]) if header else 0
    except (OSError, KeyError, TypeError, ValueError):
        return 0


def store(path: Path, *, kind: str, n: int, categories: int, values: np.ndarray, state: dict) -> bool:
    """Write one stream (atomically: temporary file + rename); True when the entry now holds it.

    Skipped (False) when the cache is disabled, when the entry already holds at least as many
    draws, or when the folder cannot be written (one note on stderr per process).  Evicts least
    recently used entries beyond :func:`max_bytes` afterwards.
    """
    if not enabled():
        return False
    values = np.ascontiguousarray(values, dtype="<f8")
    if _stored_draws(path) >= values.size:
        return True
    payload = values.tobytes()
    limit = max_bytes()
    if len(payload) > limit:
        return False
    header = json.dumps({"format": FORMAT_VERSION, "key": path.stem, "kind": kind, "n": int(n), "categories": int(categories),
                         "draws": int(values.size), "rng_state": state, "digest": _digest(payload),
                         "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode("utf-8")
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + len(header).to_bytes(4, "little") + header + payload)
        os.replace(tmp, path)
    except OSError as exc:
        _unlink(tmp)
        _note(f"specverify: null-stream cache not written ({exc}); continuing without it "
              f"(set {CACHE_DIR_ENV} to a writable folder, or {NO_CACHE_ENV}=1)")
        return False
    evict(path.parent, limit, keep=path)
    return True


def evict(folder: Path, limit: int, keep: Path | None = None) -> int:
    """Remove least recently used entries of ``folder`` until they total <= ``limit`` bytes (and
    temporary files older than an hour); returns the bytes removed.  ``keep`` is removed last."""
    entries, removed, now = [], 0, time.time()
    try:
        with os.scandir(folder) as it:
            for e in it:
                try:
                    st = e.stat()
                except OSError:
                    continue
                if e.name.endswith(".tmp"):
                    if now - st.st_mtime > _TMP_MAX_AGE_S:
                        _unlink(Path(e.path))
                elif e.name.endswith(".bin"):
                    entries.append((Path(e.path) == keep, st.st_mtime, st.st_size, Path(e.path)))
    except OSError:
        return 0
    total = sum(e[2] for e in entries)
    for _, _, size, p in sorted(entries):  # others before `keep`, oldest first
        if total <= limit:
            break
        if _unlink(p):
            total -= size
            removed += size
    return removed


def discard(path: Path) -> None:
    """Remove one entry (a caller found it unusable); missing is fine."""
    _unlink(path)


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False


def _note(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(message, file=sys.stderr)
