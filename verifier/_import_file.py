"""Import one Python file as a module: the package's one implementation.

Used by the plugin loader (:mod:`verifier.plugins`: ``path/to/file.py:factory`` specs), by the engine
adapters (:mod:`verifier.engines._source`: single files of an unpacked wheel) and by the engine worker
(:mod:`verifier.engines._worker_main`, which runs in an engine's own Python without the ``verifier``
package and so loads this file with :func:`runpy.run_path`).  Standard library only, and it imports
nothing of ``verifier``.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

__all__ = ["import_file"]


def import_file(name: str, path: str | Path) -> types.ModuleType:
    """Execute the Python file ``path`` as the module ``name`` and return it.

    The module is in ``sys.modules[name]`` while it runs (its own imports, dataclasses and pickling
    find it there) and stays there; if it raises -- any ``BaseException`` -- the entry is removed and
    the exception propagates unchanged, so a later attempt runs the file again.

    Raises
    ------
    ImportError
        ``path`` cannot be loaded as Python source.
    """
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{str(path)!r} cannot be imported as a Python source file", path=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
