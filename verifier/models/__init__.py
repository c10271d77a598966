"""Shipped tiny models, checkpoint loading and tabular models as torch causal LMs.

See docs/ARCHITECTURE.md.  ``python -m verifier.models.train`` rebuilds the shipped checkpoints.
"""

from verifier.models.loading import SHIPPED_NAMES, load_model, load_tokenizer, resolve_dtype, shipped_checkpoint
from verifier.models.tabular import TabularCache, TabularCausalLM, processed_tabular

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
