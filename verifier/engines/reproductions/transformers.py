"""transformers' universal assisted generation: the first-token law its q column order predicts.

reports/audits/transformers-5.24.0/FINDINGS.md section 1: with ``assistant_tokenizer=`` and ``do_sample=True``,
``AssistantToTargetTranslator`` prunes the assistant's LM head to the tokens both vocabularies share, in the order
``assistant_tokenizer.get_vocab()`` iterates.  ``get_target_ids`` maps a sampled pruned column ``j`` to target id
``a2t[overlap[j]]`` (right) but ``get_target_logits`` writes column ``j`` to the ``j``-th shared token in assistant-id
order, so ``_speculative_sampling`` divides ``p`` by a permutation of the law the draft token was drawn from.

The first emitted token is decided by the verification of the first draft alone (drafting starts at the prompt, for
any k): with ``q_s`` the law the draft sampled (placed by ``get_target_ids``) and ``q_v`` the q handed to
``_speculative_sampling`` (placed by ``get_target_logits``), its law is

    P(t) = q_s(t) min(1, p(t) / q_v(t)) + P(reject) (p - q_v)+(t) / sum (p - q_v)+,

with ``min(1, p/q_v) = 1`` where ``q_v = 0 < p`` (``_speculative_sampling`` accepts an infinite ratio) and 0 where
``q_v = p = 0`` (the ratio is NaN and ``r <= NaN`` is False: rejected).  :func:`engine_laws`
rebuilds both placements with the real translator of the installed transformers, from the audit's own vocabulary
order (``--engine-arg vocab_order_seed``, :mod:`verifier.engines.hf_vocab_order`) and the assistant's processed probs
on the prompt as the assistant sees it (the target prompt decoded and re-encoded, as
``UniversalSpeculativeDecodingGenerator._prepare_assistant_input_ids`` does), processed **twice**: the candidate
generator hands the assistant's ``generate`` the target's prepared logits processors (warpers included) as a custom
list, and ``GenerationMixin._get_logits_processor`` merges that list *before* it appends the warpers of the
generation config, so temperature, top-k and top-p all run twice on the assistant's logits (temperature T acts as
T^2).  That alone is lossless -- the assistant samples from the q it reports -- and costs acceptance only; it
matters here because the permuted q is that doubly processed law.  At T = 1 without top-k/top-p both are the same.  Laws of the target alone plus the
assistant it loads itself (``NEEDS_DRAFT = False``): the harness cannot score this draft row by row, but this law it
can.

``mode=gemma4_assistant`` (the Gemma4 assistant's greedy draft verified against its raw softmax) has its own law of
tokens 1-2, :mod:`verifier.engines.reproductions.transformers_gemma4`; :func:`law_tokens`, :func:`law_unsupported`
and :func:`engine_laws` dispatch on the decoder's ``mode``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verifier.engines.reproductions import transformers_gemma4 as gemma4
from verifier.sampling import processed_probs

__all__ = ["LAW_TOKENS", "NEEDS_DRAFT", "LAW_SOURCE", "LAW_POINTER", "LAW_POINTERS", "AS_SHIPPED", "law_tokens",
           "law_unsupported", "engine_laws", "first_token_law", "column_placements", "pruned_translator"]

LAW_TOKENS = 1  # assistant_tokenizer; mode=gemma4_assistant: tokens 1-2 (law_tokens, verifier.engines.reproductions.transformers_gemma4)
NEEDS_DRAFT = False  # the assistant is loaded here (its own tokenizer and vocabulary): the harness's draft is unknown
AS_SHIPPED = "universal assisted generation verifies against q in another column order"
LAW_POINTER = ("transformers/generation/candidate_generator.py::AssistantToTargetTranslator.get_target_logits (pruned "
               "column j written to the j-th shared token in assistant-id order) vs get_target_ids (column j is "
               "assistant id assistant_overlap_token_ids[j], in get_vocab() order); the assistant's q processed twice: "
               "generation/utils.py::GenerationMixin._get_logits_processor merges the custom processors before "
               "appending the sampling warpers")
LAW_SOURCE = {
    AS_SHIPPED: (
        "transformers' universal assisted generation (assistant_tokenizer=, do_sample=True) prunes the assistant's LM "
        "head in get_vocab() order but writes the pruned logits into the target vocabulary in assistant-id order, so "
        "_speculative_sampling divides p by a permutation of the q the draft token was sampled from (FINDINGS.md "
        "section 1; control: --engine-arg control_patch=usd_logit_order)"),
    gemma4.AS_SHIPPED: gemma4.LAW_SOURCE[gemma4.AS_SHIPPED],
}
LAW_POINTERS = {gemma4.AS_SHIPPED: gemma4.LAW_POINTER}  # law -> source pointer where it is not LAW_POINTER's


def law_tokens(options: dict[str, Any] | None = None) -> int:
    """How many first tokens the laws of this audit's mode cover: 2 for ``gemma4_assistant``, else :data:`LAW_TOKENS`."""
    return gemma4.LAW_TOKENS if (options or {}).get("mode") == "gemma4_assistant" else LAW_TOKENS


def law_unsupported(sampling, num_draft_tokens: int, options: dict[str, Any] | None = None) -> str | None:
    """Why this audit's first-token law cannot be predicted (None: it can).

    Parameters
    ----------
    sampling : SamplingConfig
    num_draft_tokens : int
    options : dict or None
        The decoder's options (the engine arguments: ``mode``, ``control_patch``, ``vocab_order_seed``, ...).
    """
    from verifier.engines.hf_vocab_order import NATIVE_ORDER

    opts = options or {}
    mode = opts.get("mode", "assisted")
    if mode not in ("assistant_tokenizer", "gemma4_assistant"):
        return (f"mode={mode}: no defect law is registered for it (only assistant_tokenizer's column order and the "
                "Gemma4 assistant's greedy draft)")
    if opts.get("control_patch"):
        fixed = "column order" if mode == "assistant_tokenizer" else "q of the greedy draft"
        return (f"control_patch={opts['control_patch']}: the control restores the {fixed} this law models (its "
                "law is the target's)")
    if mode == "gemma4_assistant":
        return None
    if opts.get("vocab_order_seed", 0) == NATIVE_ORDER:
        return ("vocab_order_seed=-1: each worker process iterated the assistant vocabulary in its own hash order, "
                "which is not recorded, so the permuted q cannot be rebuilt")
    return None


def pruned_translator(target_tokenizer, assistant_tokenizer, vocab_size: int):
    """The installed transformers' ``AssistantToTargetTranslator`` on its pruned-LM-head path, as ``generate()`` builds
    it (``assistant_overlap_token_ids``: the pruned columns' assistant ids in ``get_vocab()`` order), without a model."""
    from transformers.generation.candidate_generator import AssistantToTargetTranslator

    tr = AssistantToTargetTranslator(target_tokenizer, assistant_tokenizer, vocab_size, assistant_model=None,
                                     assistant_prune_lm_head=False)
    tr.assistant_prune_lm_head = True
    tr.assistant_overlap_token_ids = torch.tensor(list(tr.target_to_assistant_input_ids.values()), dtype=torch.long)
    return tr


def column_placements(translator, assistant_probs_pruned: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Where the assistant's pruned-column probs land in the target vocabulary: ``(q_s, q_v)``, each shape (vocab,).

    ``q_s`` follows ``get_target_ids`` (the id a sampled column is emitted as), ``q_v`` follows ``get_target_logits``
    (the q ``_speculative_sampling`` divides by); both from ``translator`` (:func:`pruned_translator`).
    """
    q = torch.as_tensor(assistant_probs_pruned, dtype=torch.float64)
    q_s = np.zeros(vocab_size)
    q_s[translator._assistant_to_target_input_ids[translator.assistant_overlap_token_ids].numpy()] = q.numpy()
    # the processed logits generate() hands over, as log q (float32, like the assistant's scores), placed by the translator
    q_v = translator.get_target_logits(torch.log(q).float()[None, None, :])[0, 0].double().softmax(-1).numpy()
    return q_s, q_v


def first_token_law(p: np.ndarray, q_s: np.ndarray, q_v: np.ndarray) -> np.ndarray:
    """Law of the first emitted token when the draft samples from ``q_s`` and verification uses ``q_v``, shape (vocab,)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        # p/q_v as _speculative_sampling computes it: p/0 = inf (accepted), 0/0 = nan (r <= nan is False: rejected)
        ratio = np.where(q_v > 0, np.minimum(1.0, p / np.where(q_v > 0, q_v, 1.0)), np.where(p > 0, 1.0, 0.0))
    accepted = q_s * ratio
    residual = np.maximum(p - q_v, 0.0)
    rest = 1.0 - accepted.sum()
    return accepted + (rest * residual / residual.sum() if residual.sum() > 0 else 0.0)


def engine_laws(prompt, sampling, target, draft=None, options: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """First-token laws, shape (vocab,): ``"target"`` and :data:`AS_SHIPPED` under the audit's vocabulary order
    (``mode=gemma4_assistant``: the laws of tokens 1-2 of :func:`verifier.engines.reproductions.transformers_gemma4.engine_laws`)."""
    from verifier.engines.hf_transformers import assistant_checkpoint
    from verifier.engines.hf_vocab_order import fix_vocab_order
    from verifier.engines.base import local_checkpoint
    from verifier.models import load_model, load_tokenizer

    opts = options or {}
    if opts.get("mode") == "gemma4_assistant":
        return gemma4.engine_laws(prompt, sampling, target, draft, options=opts)
    tt = load_tokenizer(local_checkpoint(opts.get("target_model", "shipped:target")))
    spec = local_checkpoint(assistant_checkpoint("assistant_tokenizer", opts.get("draft_model", "shipped:draft"),
                                                 opts.get("assistant_model", "")))
    at = load_tokenizer(str(spec))
    fix_vocab_order(at, int(opts.get("vocab_order_seed", 0)))
    assistant = load_model(str(spec))
    with torch.no_grad():
        p = processed_probs(target(torch.tensor([list(prompt)])).logits[0, -1].double(), sampling).numpy()
        text = tt.decode(list(prompt), skip_special_tokens=True, clean_up_tokenization_spaces=True)
        ids = at(text, add_special_tokens=False)["input_ids"]
        tr = pruned_translator(tt, at, len(p))
        pruned = assistant(torch.tensor([ids])).logits[0, -1, tr.assistant_overlap_token_ids].double()
        # the assistant's logits go through the sampling processors twice (module docstring): q = processed(processed)
        q = processed_probs(torch.log(processed_probs(pruned, sampling)), sampling).numpy()
    q_s, q_v = column_placements(tr, q, len(p))
    return {"target": p, AS_SHIPPED: first_token_law(p, q_s, q_v)}
