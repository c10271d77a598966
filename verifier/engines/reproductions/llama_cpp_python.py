"""llama-cpp-python's speculative path with a model draft: acceptance next to the source's prediction and canonical.

Run: ``python -m verifier.diagnose.reproduce llama-cpp-python RUN_DIR[=REPORT_DIR] ...``
(reports/audits/llama-cpp-python-0.3.36).

``Llama.generate`` keeps a proposal while it equals the target's own sample at that position (read from
``llama_cpp/llama.py::Llama.generate``), and the ``draft=model`` proposals are the draft GGUF's greedy tokens.
The first emitted token is a plain target sample (drafting starts after it), so the first round's draft position 1
is token 2: its acceptance is predicted exactly as E_{x1 ~ p(.|prompt)} p(argmax q(.|prompt, x1) | prompt, x1)
(processed target probs p, draft probs q; greedy drafting takes the argmax), and the canonical min(1, p/q) rule
would accept E_{x1} sum min(p, q).  Observed: the share of rows whose token 2 has origin 0 (the worker derives
origins from the proposals and the emitted tokens), 99% Clopper-Pearson interval.  Float64 arithmetic.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from verifier.engines.reproductions._common import acceptance_by_position, first_two_token_probs

__all__ = ["predict", "score_set"]


def predict(prompt, sampling, target, draft) -> dict:
    """The target's law of token 2 and the acceptance of draft position 1 under target-match with greedy
    proposals and under the canonical rule."""
    p1, support, p2, q2 = first_two_token_probs(prompt, sampling, target, draft)
    greedy = q2.argmax(1)
    w = p1[support]
    return {"target token 2": w @ p2, "target-match greedy": float(w @ p2[np.arange(len(support)), greedy]),
            "canonical": float(w @ np.minimum(p2, q2).sum(1))}


def score_set(run_dir: str, set_name: str, prompt, sampling, shards, target, draft, *, report_dir: str | None = None,
              report: dict | None = None, out: Callable[[str], None] = print) -> None:
    """Print observed vs predicted first-round acceptance of one sample set; with ``report_dir``, write
    ``REPORT_DIR/acceptance.txt`` (the README matrix reads it)."""
    law = predict(prompt, sampling, target, draft)
    tokens = np.concatenate([s.tokens for s in shards])
    out(f"{run_dir} {sampling.label()} n={len(tokens)}")
    if any(s.origins is None for s in shards):
        out("    no per-token origins stored (run made before the worker reported them)")
        return
    orig = np.concatenate([s.origins for s in shards])
    acceptance_by_position(orig, law["canonical"], law["target-match greedy"], "target-match, greedy draft", out,
                           report_dir)
