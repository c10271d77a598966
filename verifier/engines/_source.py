"""Import single files of an engine's unpacked wheel without running the engine's package ``__init__``.

Engines such as LMDeploy and SGLang import CUDA-only packages in their top-level ``__init__``; the
verification code itself is one plain file.  :func:`load_engine_file` imports that file, unmodified,
under a private package name (``_specverify_engine.<tag>.<dotted path>``) whose parent packages are
empty namespace modules pointing at the wheel's folders, so the file's own relative imports
(``from ..rejection_sampling import ...``) resolve to the real sibling files.  ``stubs`` replaces
named sibling modules (e.g. a one-class ``base`` module) where the real one pulls in the engine's
runtime; each adapter says which stub it uses and why.
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

from verifier._import_file import import_file

__all__ = ["load_engine_file", "file_sha256"]

PRIVATE_ROOT = "_specverify_engine"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, for the report (which exact source was audited)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _package(name: str, folder: Path) -> types.ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]  # a package whose __init__ is never executed
    module.__package__ = name
    sys.modules[name] = module
    return module


def load_engine_file(tag: str, src_root: Path, dotted: str, stubs: dict[str, types.ModuleType] | None = None) -> types.ModuleType:
    """Import ``src_root/<dotted as path>.py`` as ``_specverify_engine.<tag>.<dotted>``.

    Parameters
    ----------
    tag : str
        Identifies the install (e.g. ``"lmdeploy_0_18_0"``); two versions never share modules.
    src_root : Path
        Folder that holds the engine's top-level package (the unpacked wheel).
    dotted : str
        Module path inside ``src_root``, e.g. ``"lmdeploy.pytorch.backends.default.rejection_sampling"``.
    stubs : dict of str to module, optional
        Dotted module paths (same convention) to register instead of the real file.

    Returns
    -------
    module
        The imported module (cached in ``sys.modules``).
    """
    root = f"{PRIVATE_ROOT}.{tag}"
    full = f"{root}.{dotted}"
    if full in sys.modules:
        return sys.modules[full]
    _package(PRIVATE_ROOT, src_root)
    _package(root, src_root)
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        _package(f"{root}.{'.'.join(parts[:i])}", src_root.joinpath(*parts[:i]))
    for stub_name, stub in (stubs or {}).items():
        stub.__name__ = f"{root}.{stub_name}"
        sys.modules.setdefault(stub.__name__, stub)
    return import_file(full, src_root.joinpath(*parts).with_suffix(".py"))
