"""The message format between the harness and an engine worker process (stdlib + numpy only).

This file is imported by *both* sides: by the harness (:mod:`verifier.engines.bridge`) and, by
path, inside an engine's own virtual environment (:mod:`verifier.engines._worker_main`), where
neither ``verifier`` nor its dependencies are installed.  It must import nothing but the standard
library and numpy.

A message is a 4-byte big-endian header length, a UTF-8 JSON header, then each array the header
names as an 8-byte length and the array in ``.npy`` format (version-stable across numpy 1 and 2,
unlike pickle).  Arrays may appear at the top level of the message dict only.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any, BinaryIO

import numpy as np

ARRAYS_KEY = "__arrays__"
ERROR_KEY = "__error__"


def write_message(stream: BinaryIO, message: dict[str, Any]) -> None:
    """Write ``message`` (JSON-able values and top-level numpy arrays) to ``stream`` and flush it."""
    header = {k: v for k, v in message.items() if not isinstance(v, np.ndarray)}
    arrays = [(k, v) for k, v in message.items() if isinstance(v, np.ndarray)]
    header[ARRAYS_KEY] = [k for k, _ in arrays]
    raw = json.dumps(header, default=_json_default).encode("utf-8")
    stream.write(struct.pack(">I", len(raw)))
    stream.write(raw)
    for _, array in arrays:
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
        data = buf.getvalue()
        stream.write(struct.pack(">Q", len(data)))
        stream.write(data)
    stream.flush()


def read_message(stream: BinaryIO) -> dict[str, Any] | None:
    """Read one message; None at a clean end of stream (the other side closed the pipe)."""
    size = _read_exact(stream, 4, allow_eof=True)
    if size is None:
        return None
    header = json.loads(_read_exact(stream, struct.unpack(">I", size)[0]).decode("utf-8"))
    for key in header.pop(ARRAYS_KEY, []):
        length = struct.unpack(">Q", _read_exact(stream, 8))[0]
        header[key] = np.load(io.BytesIO(_read_exact(stream, length)), allow_pickle=False)
    return header


def _read_exact(stream: BinaryIO, n: int, allow_eof: bool = False) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            if allow_eof and got == 0:
                return None
            raise EOFError(f"stream ended after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")
