"""llama.cpp ``llama-speculative``: its law of token 2 predicted from the source, scored against an audit's samples.

Run: ``python -m verifier.diagnose.reproduce llama.cpp RUN_DIR[=REPORT_DIR] ...`` (reports/audits/llama.cpp-0.3.36).

For each sample set (k = 1 or more; token 2 is the first drafted position): the exact law of token 2
under the source as shipped is the mixture over token 1 (a plain target sample) of
:func:`verifier.engines.llama_cpp_repro.speculative_step_law` on the shipped target/draft processed
probs after ``prompt + token 1``; the control variants likewise.  :func:`score_set` prints, per set:
TV(target law, predicted as-shipped law), the chi-square p-value of the observed token-2 counts against
the target law and against each predicted law (a law the samples do not reject is the one the engine
samples), the predicted and observed first-round acceptance at position 1 (observed from the per-token
origins the adapter derives from the binary's accept flags, 99% Clopper-Pearson intervals), next to the
canonical sum min(p, q).  Float64 arithmetic (the exact fractions of the reproduction are exact per
step; here the model probs are floats).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from verifier.engines.reproductions._common import acceptance_by_position, chi2_p, first_two_token_probs

__all__ = ["VARIANTS", "CONTROL_OF_BINARY", "step_law_float", "predict", "score_set"]

VARIANTS = {"as shipped": dict(), "control sampled_draft": dict(draft_token="sampled"),
            "control residual_by_id": dict(residual="by_id"),
            "control both": dict(draft_token="sampled", residual="by_id")}
CONTROL_OF_BINARY = {"llama-speculative-ids": "as shipped", "llama-speculative-ids-ctl-draft": "control sampled_draft",
                     "llama-speculative-ids-ctl-residual": "control residual_by_id", "llama-speculative-ids-ctl-both": "control both"}


def step_law_float(p, q, draft_token="most_probable", residual="by_index"):
    """speculative_step_law in float64 (same lines; see verifier/engines/llama_cpp_repro.py):
    ``(law of the emitted token (vocab,), acceptance probability)``."""
    V = len(p)
    tgt = [(t, p[t]) for t in range(V) if p[t] > 0]
    dft = [(t, q[t]) for t in range(V) if q[t] > 0]
    dmap = dict(dft)
    res = np.zeros(V)
    for i, (t, pv) in enumerate(tgt):
        qv = (dft[i][1] if i < len(dft) else 0.0) if residual == "by_index" else dmap.get(t, 0.0)
        res[t] = max(0.0, pv - qv)
    res = res / res.sum() if res.sum() > 0 else res
    props = {int(np.argmax(q)): 1.0} if draft_token == "most_probable" else dict(dft)
    law, acc_total = np.zeros(V), 0.0
    for x, w in props.items():
        a = min(1.0, p[x] / q[x])
        law[x] += w * a
        law += w * (1 - a) * res
        acc_total += w * a
    return law, acc_total


def predict(prompt, sampling, target, draft) -> dict:
    """Laws of token 2 (``"target"`` and each of :data:`VARIANTS`) and their acceptances at draft position 1."""
    p1, support, p2, q2 = first_two_token_probs(prompt, sampling, target, draft)
    out = {"target": p1[support] @ p2}
    for name, kw in VARIANTS.items():
        laws = [step_law_float(p2[i], q2[i], **kw) for i in range(len(support))]
        out[name] = p1[support] @ np.array([law for law, _ in laws])
        out[name + " acceptance"] = float(p1[support] @ np.array([a for _, a in laws]))
    out["canonical acceptance"] = float(p1[support] @ np.minimum(p2, q2).sum(1))
    return out


def score_set(run_dir: str, set_name: str, prompt, sampling, shards, target, draft, *, report_dir: str | None = None,
              report: dict | None = None, out: Callable[[str], None] = print) -> None:
    """Print the scores of one sample set (``shards``: its :class:`~verifier.runner.store.Shard` s in chunk
    order); with ``report_dir``, write ``REPORT_DIR/acceptance.txt`` (the README matrix reads it)."""
    tokens = np.concatenate([s.tokens for s in shards])
    law = predict(prompt, sampling, target, draft)
    V = len(law["target"])
    counts = np.bincount(tokens[:, 1][tokens[:, 1] >= 0], minlength=V).astype(float)
    tv = 0.5 * np.abs(law["target"] - law["as shipped"]).sum()
    out(f"{run_dir} {set_name} {sampling.label()} n={len(tokens)}: TV(target, as-shipped law of token 2) = {tv:.3f}")
    for name in ("target", *VARIANTS):
        out(f"    token-2 counts vs {name:22s} chi-square p = {chi2_p(counts, law[name]):.3g}")
    out(f"    predicted acceptance of draft position 1: as shipped {law['as shipped acceptance']:.3f}, "
        f"control {law['control sampled_draft acceptance']:.3f}, canonical {law['canonical acceptance']:.3f}")
    for name in VARIANTS:
        if name != "as shipped":
            out(f"    predicted acceptance of draft position 1 under {name}: {law[name + ' acceptance']:.3f}")
    counts_all = np.concatenate([s.accepted_counts for s in shards]) if shards[0].accepted_counts is not None else None
    if counts_all is not None and len(counts_all):
        out(f"    observed mean accepted per round (all rounds): {counts_all.mean():.3f}")
    origins = [s.origins for s in shards]
    if all(o is not None for o in origins):  # per-token origins (the adapter fills them from the accept flags)
        binary = shards[0].meta.get("decoder", {}).get("settings", {}).get("binary", "")
        variant = CONTROL_OF_BINARY.get(binary, "as shipped")
        orig = np.concatenate(origins)
        acceptance_by_position(orig, law["canonical acceptance"], law[variant + " acceptance"], variant, out, report_dir,
                               above_note="ABOVE THE COUPLING BOUND (canonical = the most any lossless rule "
                                          "drafting from this q accepts)")
