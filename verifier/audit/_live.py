"""In-memory objects handed to the suite runner by name, for :func:`verifier.api.check_preserves_target`.

The runner builds decoders and models from strings (``module:attr``).  A Python caller has
objects instead; :func:`lending` lends them for the duration of one run under fixed names, so the
suite is ``decoder = "verifier.audit._live:decoder"``, ``target = "verifier.audit._live:target"``.
The names are constants (not ids) because the chunk seeds derive from the suite's decoder and
model specs: the same call with the same seed draws the same samples.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

MODULE = "verifier.audit._live"
_LOCK = threading.RLock()
_OBJECTS: dict[str, Any] = {}


@contextlib.contextmanager
def lending(**objects: Any) -> Iterator[dict[str, str]]:
    """Make ``objects`` importable as ``verifier.audit._live:NAME`` while the block runs.

    Yields ``{name: "verifier.audit._live:NAME"}``.  One lender at a time (a lock), so two
    threads never see each other's decoder.
    """
    with _LOCK:
        previous = dict(_OBJECTS)
        _OBJECTS.update(objects)
        try:
            yield {name: f"{MODULE}:{name}" for name in objects}
        finally:
            _OBJECTS.clear()
            _OBJECTS.update(previous)


def __getattr__(name: str) -> Any:  # module attribute lookup (PEP 562): what `module:attr` specs resolve
    try:
        return _OBJECTS[name]
    except KeyError:
        raise AttributeError(f"{MODULE} lends no object named {name!r} right now (only inside verifier.api calls)") from None
