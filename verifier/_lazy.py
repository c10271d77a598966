"""The one PEP 562 loader of a package's public names: each is imported from its module on first use.

``verifier``, ``verifier.audit`` and ``verifier.models`` use it, so that importing a light submodule (the audit spec,
the shipped checkpoint paths) does not import torch, transformers or scipy through its package.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, MutableMapping

__all__ = ["lazy_names"]


def lazy_names(package: str, home: Mapping[str, str],
               namespace: MutableMapping[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: public name -> the module ``home[name]`` that defines it.

    Parameters
    ----------
    package : str
        The package's dotted name (for the AttributeError's message).
    home : mapping
        Public name -> dotted module name.
    namespace : mutable mapping
        The package's ``globals()``: a name loaded once is kept there, so the next access skips ``__getattr__``.

    Raises
    ------
    AttributeError
        (from the returned ``__getattr__``) a name not in ``home``.
    """
    def getattr_(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(home))

    return getattr_, dir_
