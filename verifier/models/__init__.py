"""Shipped tiny models, checkpoint loading and tabular models as torch causal LMs.

See docs/ARCHITECTURE.md.  ``python -m verifier.models.train`` rebuilds the shipped checkpoints.
The names below load on first use (PEP 562): importing :mod:`verifier.models.shipped_paths` for a
checkpoint's folder does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "processed_tabular",
    "SHIPPED_NAMES",
    "TabularCache",
    "TabularCausalLM",
    "load_model",
    "load_tokenizer",
    "resolve_dtype",
    "shipped_checkpoint",
]

_HOME = {"SHIPPED_NAMES": "shipped_paths", "shipped_checkpoint": "shipped_paths", "load_model": "loading",
         "load_tokenizer": "loading", "resolve_dtype": "loading", "processed_tabular": "tabular",
         "TabularCache": "tabular", "TabularCausalLM": "tabular"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'verifier.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"verifier.models.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
