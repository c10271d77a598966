"""transformers' Gemma4 assistant (``mode=gemma4_assistant``): the law of tokens 1-2 its source predicts.

reports/audits/transformers-5.24.0/FINDINGS.md section 2.  ``SinglePositionMultiTokenCandidateGenerator.get_candidates``
(transformers/generation/candidate_generator.py) returns no candidate on the first iteration, so token 1 is a plain
target sample of the prompt step (``_assisted_decoding``: ``new_logits`` through the logits processors, softmax,
multinomial).  From then on it drafts ``last_token_id = outputs.logits.argmax(dim=-1)`` -- the assistant's most probable
token, fed the target's embedding of the last token, the target's last hidden state of the prompt and the target's
shared KV states -- and hands the **raw** assistant logits over as ``candidate_logits``; ``_speculative_sampling``
then verifies with ``q = candidate_logits.softmax(-1)`` (no temperature, top-k or top-p) although the draft was the
argmax.  So, with ``p`` the target's processed probs after ``prompt + t1`` and ``x`` the draft after ``t1``:

    P(t1, t2) = p1(t1) [ a 1{t2 = x} + (1 - a) (p - q)+(t2) / sum (p - q)+ ],   a = min(1, p(x) / q(x)),

the bug zoo's greedy draft with q from the raw logits (lossless only if q were the point mass at ``x``: the control
``--engine-arg control_patch=gemma4_greedy_q``).  :func:`engine_laws` runs the installed transformers' own
``get_candidates`` (one draft) on the audit's local Gemma4 pair for every token 1 -- the assistant needs the target's
hidden states and KV cache, so the harness cannot score it row by row (the audit's draft is "unknown"), but this law
of the target, the assistant and the source it can compute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verifier.sampling import processed_probs

__all__ = ["LAW_TOKENS", "AS_SHIPPED", "LAW_SOURCE", "LAW_POINTER", "greedy_draft_step", "draft_after", "engine_laws"]

LAW_TOKENS = 2
AS_SHIPPED = "the Gemma4 assistant drafts its argmax token but verifies against softmax of its raw logits"
LAW_POINTER = ("transformers/generation/candidate_generator.py::SinglePositionMultiTokenCandidateGenerator.get_candidates "
               "(last_token_id = outputs.logits.argmax(dim=-1); candidate_logits = the raw assistant logits) and "
               "generation/utils.py::_speculative_sampling (q = candidate_logits.softmax(dim=-1))")
LAW_SOURCE = {
    AS_SHIPPED: (
        "transformers' SinglePositionMultiTokenCandidateGenerator (Gemma4 assistant) drafts the assistant's argmax token "
        "but returns the raw assistant logits as candidate_logits, so _speculative_sampling accepts the greedy draft x "
        "with min(1, p(x)/q(x)) and resamples (p - q)+ for q = softmax(raw logits), not the point mass the draft was "
        "drawn from; token 1 is the prompt step's plain target sample (FINDINGS.md section 2; control: --engine-arg "
        "control_patch=gemma4_greedy_q)"),
}


def greedy_draft_step(p: np.ndarray, q: np.ndarray, x: int) -> np.ndarray:
    """Law of the token emitted at a position whose draft is ``x`` (not sampled) and whose verification uses ``q``.

    Parameters
    ----------
    p : np.ndarray, shape (vocab,)
        The target's processed probs at the position.
    q : np.ndarray, shape (vocab,)
        The q handed to ``_speculative_sampling`` (softmax of the assistant's raw logits).
    x : int
        The draft token (the assistant's argmax).

    Returns
    -------
    np.ndarray, shape (vocab,)
        ``a 1{z = x} + (1 - a) (p - q)+ / sum (p - q)+`` with ``a = min(1, p(x) / q(x))`` (``r ~ U[0, 1)``,
        accepted iff ``r <= p(x) / q(x)``).

    >>> greedy_draft_step(np.array([0.5, 0.5]), np.array([0.75, 0.25]), 0).tolist()   # a = 2/3, residual at token 1
    [0.6666666666666666, 0.33333333333333337]
    """
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    a = min(1.0, p[x] / q[x]) if q[x] > 0 else 1.0
    law = np.zeros(len(p))
    law[x] = a
    residual = np.maximum(p - q, 0.0)
    if a < 1 and residual.sum() > 0:
        law += (1 - a) * residual / residual.sum()
    return law


def draft_after(target, assistant, prompt: list[int], prompt_outputs, token1: int) -> tuple[int, np.ndarray]:
    """The Gemma4 assistant's first draft after ``prompt + [token1]`` and its q, by the installed transformers' own
    ``SinglePositionMultiTokenCandidateGenerator.get_candidates`` (one draft, the prompt step's outputs).

    Returns
    -------
    (x, q) : the draft token and ``softmax`` of the raw assistant logits (float64), shape (vocab,)
    """
    from transformers import GenerationConfig
    from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

    ids = torch.tensor([list(prompt) + [int(token1)]])
    gen = SinglePositionMultiTokenCandidateGenerator(assistant, target.get_input_embeddings(),
                                                     GenerationConfig(max_length=ids.shape[1] + 2))
    gen.num_assistant_tokens = 1
    cand, logits = gen.get_candidates(ids, {"attention_mask": torch.ones_like(ids)}, prompt_outputs,
                                      is_first_iteration=False, n_last_matches=0)
    return int(cand[0, -1]), logits[0, -1].double().softmax(-1).numpy()


def engine_laws(prompt, sampling, target=None, draft=None, options: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Joint laws of tokens 1-2, shape (vocab, vocab): ``"target"`` and :data:`AS_SHIPPED`, on the audit's pair
    (``options``: ``target_model``, ``assistant_model`` / ``draft_model``; default: the local tiny Gemma4 pair)."""
    from verifier.engines.hf_transformers import TransformersEngine, assistant_checkpoint, MODE_DEFAULT_MODELS
    from verifier.engines.base import local_checkpoint
    from verifier.models import load_model

    opts = options or {}
    target_spec = opts.get("target_model") or str(TransformersEngine.local_models() / MODE_DEFAULT_MODELS["gemma4_assistant"][0])
    model = load_model(local_checkpoint(target_spec))
    assistant = load_model(local_checkpoint(assistant_checkpoint("gemma4_assistant", opts.get("draft_model", ""),
                                                                 opts.get("assistant_model", ""))))
    prompt = [int(t) for t in prompt]
    with torch.no_grad():
        out = model(torch.tensor([prompt]), output_hidden_states=True, return_shared_kv_states=True)
        p1 = processed_probs(out.logits[0, -1].float(), sampling).double().numpy()
        V = len(p1)
        laws = {"target": np.zeros((V, V)), AS_SHIPPED: np.zeros((V, V))}
        for t1 in np.nonzero(p1)[0]:
            logits2 = model(torch.tensor([prompt + [int(t1)]])).logits[0, -1].float()
            p2 = processed_probs(logits2, sampling).double().numpy()
            x, q = draft_after(model, assistant, prompt, out, int(t1))
            laws["target"][t1] = p1[t1] * p2
            laws[AS_SHIPPED][t1] = p1[t1] * greedy_draft_step(p2, q, x)
    return laws
