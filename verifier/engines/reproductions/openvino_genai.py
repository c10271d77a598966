"""OpenVINO GenAI's law of tokens 1-2 predicted from its source, scored against an audit's samples.

Run: ``python -m verifier.diagnose.reproduce openvino-genai RUN_DIR ...`` (reports/audits/openvino-genai-2026.4.1.0).

Token 1 is the target's prompt step alone (a plain target sample).  Token 2 is the first drafted position:
its law given token 1 is :func:`verifier.engines.openvino_repro.validation_step_law_np` on the shipped
target/draft processed probs after ``prompt + token 1`` (and the target's probs after each candidate,
for the replacement drawn at the next position).  Laws compared (float64):

- ``target``: the target's own first-two-token law (what a lossless engine samples);
- ``as shipped, independent``: validate_candidate with independent draft / target / threshold draws;
- ``as shipped, shared seed``: the same, with candidate 1 drawn from the uniform that drew token 1 (both
  samplers are ``std::mt19937(rng_seed)``; the draft samples nothing at the prompt step): given token 1,
  the candidate's law is :func:`~verifier.engines.openvino_repro.inverse_cdf_law` of ``q`` on token 1's
  interval.  CDFs walked in id order (no top-k / top-p) or by decreasing prob (top-p); top-k alone walks
  a heap order that is not modelled.

:func:`score_set` prints per sample set: TV of each predicted law from the target's (token 2 and tokens
1-2), the chi-square p-value of the observed token-2 counts and of the observed (token 1, token 2) counts
against each law (tails pooled to expected counts >= 10 without looking at the data), and the predicted
vs observed acceptance of the first drafted token.  A law the samples do not reject (p above alpha) while
they reject the target's is the law the engine samples.
"""

from __future__ import annotations

import json
from typing import Callable

import numpy as np
import torch

from verifier.engines.openvino_repro import cdf_interval, inverse_cdf_law, validation_step_law_np, walk_order
from verifier.engines.reproductions._common import chi2_p
from verifier.sampling import processed_probs

__all__ = ["COUPLINGS", "predict", "score_set", "observed_acceptance", "LAW_TOKENS", "LAW_SOURCE", "LAW_POINTER",
           "engine_laws", "law_unsupported"]

COUPLINGS = ("independent", "shared seed")
BATCH = 4096  # target contexts per forward pass
MIN_PROB = 1e-15  # a law's categories at or below this count as impossible in the chi-square


def _probs(model, contexts, sampling):
    out = []
    with torch.no_grad():
        for i in range(0, len(contexts), BATCH):
            out.append(processed_probs(model(torch.tensor(contexts[i:i + BATCH])).logits[:, -1], sampling).numpy())
    return np.concatenate(out)


def predict(prompt, sampling, target, draft):
    """Laws of (token 1, token 2): dict name -> ndarray (vocab, vocab), plus predicted acceptances."""
    p1 = _probs(target, [list(prompt)], sampling)[0]
    V = len(p1)
    support = [int(t) for t in np.nonzero(p1)[0]]
    ctx1 = [list(prompt) + [t] for t in support]
    p2, q2 = _probs(target, ctx1, sampling), _probs(draft, ctx1, sampling)
    laws = {"target": np.zeros((V, V))}
    laws.update({f"as shipped, {c}": np.zeros((V, V)) for c in COUPLINGS})
    acc = {name: 0.0 for name in laws}
    sorted_walk = sampling.top_p is not None and sampling.top_p < 1
    order1 = walk_order(p1, sorted_walk)
    for i, t1 in enumerate(support):
        xs = [int(x) for x in np.nonzero(q2[i])[0]]
        nxt = np.zeros((V, V))
        nxt[xs] = _probs(target, [ctx1[i] + [x] for x in xs], sampling)
        laws["target"][t1] = p1[t1] * p2[i]
        acc["target"] += p1[t1] * np.minimum(p2[i], q2[i]).sum()  # canonical acceptance
        lo, hi = cdf_interval(p1, order1, t1)
        proposals = {"independent": None, "shared seed": inverse_cdf_law(q2[i], walk_order(q2[i], sorted_walk), lo, hi)}
        for c in COUPLINGS:
            law, a = validation_step_law_np(p2[i], q2[i], nxt, proposal=proposals[c])
            laws[f"as shipped, {c}"][t1] = p1[t1] * law
            acc[f"as shipped, {c}"] += p1[t1] * a
    return laws, acc


# the diagnosis's engine laws (verifier.diagnose.engine_laws): tokens 1-2 under each coupling
LAW_TOKENS = 2
LAW_POINTER = "src/cpp/src/sampling/sampler.cpp::Sampler::validate_candidate; sampler.hpp RequestSamplerContext rng_engine"
LAW_SOURCE = {
    "as shipped, independent": (
        "OpenVINO GenAI's Sampler::validate_candidate accepts a candidate x iff uniform_int(0, 100)/100 <= q(x)/p(y) for "
        "a fresh target sample y (not p(x)/q(x)), and on a rejection emits a plain target sample one position later, "
        "conditioned on the rejected x; draft and target draws independent"),
    "as shipped, shared seed": (
        "OpenVINO GenAI's Sampler::validate_candidate accepts a candidate x iff uniform_int(0, 100)/100 <= q(x)/p(y) for "
        "a fresh target sample y, emits a target sample one position later on a rejection, and the draft's sampler "
        "is a copy of the target's std::mt19937(rng_seed), so candidate 1 is drawn with the uniform that drew token 1 "
        "(FINDINGS.md section 2; control not buildable here)"),
}


def _heap_walk(sampling) -> bool:
    """Top-k without top-p: the shared-seed coupling walks q's CDF in a heap order (std::partial_sort), not modelled."""
    return sampling.top_k is not None and sampling.top_k > 0 and not (sampling.top_p is not None and sampling.top_p < 1)


def law_unsupported(sampling, num_draft_tokens: int, options=None) -> str | None:
    """Why no law of tokens 1-2 can be predicted under ``sampling`` (None: at least one can)."""
    return None


def engine_laws(prompt, sampling, target, draft, options=None) -> dict[str, np.ndarray]:
    """Joint laws of tokens 1-2, shape (vocab, vocab): ``"target"`` and each coupling of :data:`COUPLINGS` that is
    modelled under ``sampling`` (the shared seed is not with top-k alone: :func:`_heap_walk`)."""
    laws, _ = predict(prompt, sampling, target, draft)
    if _heap_walk(sampling):
        laws.pop("as shipped, shared seed")
    return laws


def score_set(run_dir: str, set_name: str, prompt, sampling, shards, target, draft, *, report_dir: str | None = None,
              report: dict | None = None, out: Callable[[str], None] = print) -> None:
    """Print one sample set's scores against every law of :func:`predict` (``report``: the run's report.json)."""
    tokens = np.concatenate([s.tokens for s in shards])
    tokens = tokens[(tokens[:, 0] >= 0) & (tokens[:, 1] >= 0)]
    laws, acc = predict(prompt, sampling, target, draft)
    V = laws["target"].shape[0]
    joint = np.zeros((V, V))
    np.add.at(joint, (tokens[:, 0], tokens[:, 1]), 1)
    out(f"{run_dir} {set_name} {sampling.label()} n={len(tokens)}")
    for name, law in laws.items():
        tv2 = 0.5 * np.abs(law.sum(0) - laws["target"].sum(0)).sum()
        tv12 = 0.5 * np.abs(law - laws["target"]).sum()
        p_2 = chi2_p(joint.sum(0), law.sum(0), min_prob=MIN_PROB, renormalise=True)
        p_12 = chi2_p(joint, law, min_prob=MIN_PROB, renormalise=True)
        out(f"  {name:28s} TV from target: token 2 {tv2:.3f}, tokens 1-2 {tv12:.3f};  chi-square p: "
            f"token 2 {p_2:.3g}, tokens 1-2 {p_12:.3g};  "
            f"predicted acceptance of draft 1 {acc[name]:.3f}" + ("  (canonical)" if name == "target" else ""))
    out(f"  observed: {json.dumps(observed_acceptance(shards, report or {}))}")


def observed_acceptance(shards, report: dict) -> dict:
    """Engine-reported totals (accepted drafts, rounds) from the shards' meta and the report, where present."""
    out = {}
    for s in shards:
        for k in ("accepted", "rounds", "engine_accepted", "engine_rounds"):
            if k in s.meta:
                out[k] = out.get(k, 0) + s.meta[k]
    if "acceptance" in report:
        out["report"] = report["acceptance"]
    return out
