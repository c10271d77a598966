"""Drafts the harness cannot score: declared unknown, and the analyses that need the draft's probs skipped, stated.

The bias verdict never needs the draft: it compares the emitted tokens with the *target's* processed law.
A few analyses beside it do need the draft's processed probs ``q`` (see :data:`DRAFT_ANALYSES`).  They
can only be computed when the harness can load the decoder's draft as a causal LM on the target's
vocabulary.  That is not so for

* a draft with its own tokenizer and vocabulary (transformers' ``assistant_tokenizer=`` path,
  universal assisted generation): its ``q`` lives on another vocabulary;
* an assistant that is no standalone causal LM (``Gemma4AssistantForCausalLM`` drafts from the
  target's hidden states and KV cache; its config has no ``vocab_size``);
* a draft that is no model at all (prompt-lookup decoding copies n-grams of the prompt);
* a plugin that loads its own draft, whatever the suite's ``[models]`` say.

Such a draft is declared unknown, in one of three ways:

``--draft unknown`` (``specverify audit``) or ``draft = "unknown"`` (a suite's ``[models.NAME]``)
    the pair has no draft: nothing is loaded, ``draft``/``draft_model`` are not offered to factories;
``draft_known = False``
    an attribute of the decoder (or of its factory or class, so the CLI knows before building it):
    the decoder loads its own draft; the suite's draft may exist, but it is not the decoder's;
an outside engine's :meth:`verifier.engines.base.Engine.draft_known` (per its options)
    ``--engine NAME`` then declares ``--draft unknown`` itself.

Every analysis of :data:`DRAFT_ANALYSES` is then skipped with a stated reason (:func:`skipped`),
never computed on a draft the decoder does not use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["UNKNOWN_DRAFT", "DRAFT_ANALYSES", "is_unknown", "declared_draft_known", "skipped", "unknown_hint"]

UNKNOWN_DRAFT = "unknown"  # model spec of a draft the harness cannot load or score

DRAFT_ANALYSES = {  # analysis -> what it needs the draft's processed probs q for
    "blind_cells": "blind-cell notes (which defects a prompt's first position cannot reveal: the exact step law of "
                   "each rule needs q)",
    "canonical_acceptance": "acceptance vs canonical (the canonical rule's accepted-count law min(1, p/q) and the "
                            "coupling bound sum min(p, q) need q)",
    "acceptance_conformance": "acceptance rule conformance (acceptance = \"canonical\": the observed accepted-count "
                              "law is tested against the canonical one, which needs q)",
}


def is_unknown(spec: Any) -> bool:
    """True for the model spec ``"unknown"`` (case-insensitive)."""
    return isinstance(spec, str) and spec.strip().lower() == UNKNOWN_DRAFT


def declared_draft_known(obj: Any) -> bool:
    """The ``draft_known`` a decoder (or its factory/class) declares; True when it declares nothing.

    Wrappers (``.inner``, as :class:`verifier.plugins.PluginDecoder`) are looked through.
    """
    seen = 0
    while obj is not None and seen < 8:
        value = getattr(obj, "draft_known", None)
        if value is not None:
            return bool(value)
        obj, seen = getattr(obj, "inner", None), seen + 1
    return True


def skipped(analysis: str, why: str) -> str:
    """One line: ``analysis`` skipped because the draft is unknown (``why`` names who declared it)."""
    return f"{DRAFT_ANALYSES[analysis]}: skipped, the draft is unknown ({why})"


def unknown_hint(argument: str = "--draft") -> str:
    """The sentence every refusal of an unscorable draft ends with."""
    return (f"if the decoder uses a draft the harness cannot score (its own tokenizer/vocabulary, an assistant "
            f"class that is no standalone causal LM, or a draft it loads itself), declare {argument} unknown "
            f"(suite: draft = \"unknown\"): the bias verdict never needs the draft; the analyses that do "
            f"({', '.join(DRAFT_ANALYSES)}) are then skipped, stated")
