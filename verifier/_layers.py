"""The package's layers, top to bottom: the one declaration of which part may import which.

Each top-level package or module of ``verifier/`` (a *unit*) sits on one layer.  A module may import
modules of its own layer or of a lower one, never of a higher one, and the imports between units of
one layer form no circle.  ``tests/foundations/test_layering.py`` reads this table, parses every
module's imports (lazy ones inside functions too) and fails on an import circle between modules, an
import that runs upward, a unit missing here, or a folder without its one-line job in the layer
table of ``docs/ARCHITECTURE.md`` ("Layers"), which draws the same order.

Data only: this module imports nothing.
"""

from __future__ import annotations

__all__ = ["LAYERS", "COMPAT_SHIMS", "layer_of"]

# (layer name, units on it); the first layer is the top.  A unit is a package (folder name) or a
# top-level module (file name without .py) of verifier/; "verifier" is the package root itself
# (``verifier/__init__.py``, the lazy public API).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("front ends", ("verifier", "cli", "pytest_plugin", "api", "_preservation", "_preservation_run", "bench")),
    ("pipeline", ("pipeline",)),
    ("services", ("server", "audit", "reports", "diagnose", "runner")),
    ("engines", ("engines",)),
    ("decoders and models", ("plugins", "decoders", "models")),
    ("exact", ("exact",)),
    ("stats", ("stats",)),
    ("contracts", ("protocols", "suite", "sampling", "validation", "progress", "_call_timeout", "_run_lock",
                   "_tracebacks", "_import_file", "_verdict_file", "_threads", "_resume", "_diagnose_mode",
                   "_lazy", "_beside")),
    ("errors", ("errors", "_layers")),
)


# Modules kept at an old path only so that an old command line keeps working by running its new home (a higher
# layer) as ``__main__``: the one kind of upward call this table would allow.  None now (the old
# ``-m verifier.runner.torchrun`` prints the new command and exits 2 instead of importing upward).
COMPAT_SHIMS: dict[str, str] = {}


def layer_of(unit: str) -> int:
    """Index of ``unit``'s layer in :data:`LAYERS` (0 = top); ``KeyError`` for a unit not placed."""
    for index, (_name, units) in enumerate(LAYERS):
        if unit in units:
            return index
    raise KeyError(unit)
