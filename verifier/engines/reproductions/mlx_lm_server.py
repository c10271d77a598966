"""MLX-LM's server with a draft model: the law of tokens 1-2 its prompt-cache defect predicts.

reports/audits/mlx-lm-server-0.32.2/FINDINGS.md: with a draft model, ``speculative_generate_step`` leaves the target's
KV cache one token short of the key ``_serve_single`` stores it under, and ``LRUPromptCache.fetch_nearest_cache``
trims by the key, so a prompt served from the prompt cache runs the target on the prompt **without its second-to-last
token** (the last one is processed at the position before it) -- or, when the stored cache is shorter still, on
fewer prompt tokens: each trimmed context is a law of its own (:data:`CONTEXTS`), ranked by the diagnosis (the
published audits' rows fit "the last prompt token alone").  Speculative sampling itself stays lossless with
respect to the target it runs, and the draft's context error costs acceptance only, so such a request's emitted law is
the target's processed law on that shortened prompt, whatever the draft.  Requests served without the defect (the
first one, or a cache stored with its full offset) have the target's law: the diagnosis's contamination share
(:mod:`verifier.diagnose.robust`) fits them.

:func:`engine_laws` needs the target only, so it is scored also when the draft is unknown (a URL audit).
"""

from __future__ import annotations

import numpy as np
import torch

from verifier.sampling import processed_probs

__all__ = ["LAW_TOKENS", "NEEDS_DRAFT", "LAW_SOURCE", "LAW_POINTER", "CONTEXTS", "DROPPED", "LAST_ONLY", "LAST_TWO", "CASCADE", "MIXTURES",
           "law_unsupported", "engine_laws", "shortened_prompt"]

LAW_TOKENS = 2
NEEDS_DRAFT = False  # the defect's law is the target's on another prompt: scored also when the draft is unknown
DROPPED = "prompt cache drops the second-to-last prompt token"
LAST_ONLY = "prompt cache keeps only the last prompt token"
LAST_TWO = "prompt cache drops the first prompt token"
# how many entries the trim leaves depends on the cache's offset against its key (FINDINGS: one short, sometimes
# more under speculation): each context is a law of its own, fixed before the data; the ranking says which one fits
CONTEXTS = {
    DROPPED: lambda prompt: prompt[:-2] + prompt[-1:],
    LAST_ONLY: lambda prompt: prompt[-1:],
    LAST_TWO: lambda prompt: prompt[-2:],
}
CASCADE = "prompt cache serves trimmed contexts"
# requests served from a broken cache store caches shorter still: later requests see less of the prompt than earlier
# ones, so one audit's rows mix several contexts (and the target's, for requests served without the cache)
MIXTURES = {CASCADE: (DROPPED, LAST_TWO, LAST_ONLY)}
LAW_POINTER = ("mlx_lm/generate.py::speculative_generate_step (cache one token short), server.py::_serve_single "
               "(cache stored under prompt + emitted), models/cache.py::LRUPromptCache.fetch_nearest_cache (trims by key)")
_WHY = ("MLX-LM's server with a draft model stores the target's KV cache shorter than its key, and fetch_nearest_cache "
        "trims by the key, so a prompt served from the prompt cache runs the target on a context missing prompt tokens "
        "(fix: reports/audits/mlx-lm-server-0.32.2/prompt-cache.patch)")
LAW_SOURCE = {
    DROPPED: f"{_WHY}: here without its second-to-last token",
    LAST_ONLY: f"{_WHY}: here the trim leaves nothing and the target sees the last prompt token alone",
    LAST_TWO: f"{_WHY}: here the target sees the last two prompt tokens only",
    CASCADE: (f"{_WHY}; a request served from such a cache stores one shorter still, so the rows mix contexts missing "
              "one or more prompt tokens (and the full prompt, for requests served without the cache)"),
}
BATCH = 4096


def shortened_prompt(prompt, law: str = DROPPED) -> list[int]:
    """The prompt the target runs on under ``law`` (one of :data:`CONTEXTS`)."""
    return CONTEXTS[law](list(prompt))


def law_unsupported(sampling, num_draft_tokens: int, options=None) -> str | None:
    """Why the law cannot be predicted (None: it can)."""
    return None


def _two_token_law(model, prompt, sampling) -> np.ndarray:
    with torch.no_grad():
        p1 = processed_probs(model(torch.tensor([list(prompt)])).logits[0, -1], sampling).double().numpy()
        V = len(p1)
        law = np.zeros((V, V))
        support = [int(t) for t in np.nonzero(p1)[0]]
        for i in range(0, len(support), BATCH):
            ids = support[i:i + BATCH]
            ctx = torch.tensor([list(prompt) + [t] for t in ids])
            p2 = processed_probs(model(ctx).logits[:, -1], sampling).double().numpy()
            law[ids] = p1[ids, None] * p2
    return law


def engine_laws(prompt, sampling, target, draft=None, options=None) -> dict[str, np.ndarray]:
    """Joint laws of tokens 1-2, shape (vocab, vocab): ``"target"`` and each of :data:`CONTEXTS` whose context differs
    from the prompt and from the others' (a prompt of 1 token has none)."""
    laws = {"target": _two_token_law(target, prompt, sampling)}
    seen = {tuple(prompt)}
    for name, cut in CONTEXTS.items():
        ctx = tuple(cut(list(prompt)))
        if ctx and ctx not in seen:
            seen.add(ctx)
            laws[name] = _two_token_law(target, list(ctx), sampling)
    return laws
