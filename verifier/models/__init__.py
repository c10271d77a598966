"""Shipped tiny models, checkpoint loading and tabular models as torch causal LMs.

See docs/ARCHITECTURE.md.  ``python -m verifier.models.train`` rebuilds the shipped checkpoints.
The names below load on first use (PEP 562): importing :mod:`verifier.models.shipped_paths` for a
checkpoint's folder does not import torch.
"""

from __future__ import annotations

from verifier._lazy import lazy_names

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

_HOME = {name: f"verifier.models.{module}" for name, module in (
    ("SHIPPED_NAMES", "shipped_paths"), ("shipped_checkpoint", "shipped_paths"), ("load_model", "loading"),
    ("load_tokenizer", "loading"), ("resolve_dtype", "loading"), ("processed_tabular", "tabular"),
    ("TabularCache", "tabular"), ("TabularCausalLM", "tabular"))}

__getattr__, __dir__ = lazy_names("verifier.models", _HOME, globals())
