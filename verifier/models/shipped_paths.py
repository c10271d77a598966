"""Where the shipped checkpoints live: paths only, no torch (the engine prestart reads them before any heavy import).

:func:`shipped_checkpoint` is re-exported by :mod:`verifier.models.loading` and :mod:`verifier.models`.
"""

from __future__ import annotations

from pathlib import Path

from verifier.errors import ModelLoadError, invalid_argument

__all__ = ["SHIPPED_NAMES", "shipped_checkpoint"]

SHIPPED_NAMES = ("target", "draft")
_SHIPPED_ROOT = Path(__file__).resolve().parent / "shipped"


def shipped_checkpoint(name: str) -> Path:
    """Folder of a shipped checkpoint (package data under ``verifier/models/shipped/``).

    Parameters
    ----------
    name : {"target", "draft"}

    Returns
    -------
    pathlib.Path
        Folder holding ``config.json``, ``model.safetensors`` and the tokenizer files.

    Raises
    ------
    InvalidArgumentError
        If ``name`` is not ``"target"`` or ``"draft"``.
    ModelLoadError
        If the folder is missing from the installation.
    """
    if name not in SHIPPED_NAMES:
        raise invalid_argument("name", name, " or ".join(repr(n) for n in SHIPPED_NAMES))
    path = _SHIPPED_ROOT / name
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"shipped checkpoint {name!r} is missing at {path}; "
                             "reinstall the package or run `python -m verifier.models.train`")
    return path
