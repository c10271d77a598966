"""Acceptance of llama-cpp-python's speculative path with a model draft, next to the source's prediction and canonical.

Usage: python reports/audits/llama-cpp-python-0.3.36/acceptance.py RUN_DIR[=REPORT_DIR] ...

``Llama.generate`` keeps a proposal while it equals the target's own sample at that position (read from
``llama_cpp/llama.py::Llama.generate``), and the ``draft=model`` proposals are the draft GGUF's greedy tokens.
The first emitted token is a plain target sample (drafting starts after it), so the first round's draft position 1
is token 2: its acceptance is predicted exactly as E_{x1 ~ p(.|prompt)} p(argmax q(.|prompt, x1) | prompt, x1)
(processed target probs p, draft probs q; greedy drafting takes the argmax), and the canonical min(1, p/q) rule
would accept E_{x1} sum min(p, q).  Observed: the share of rows whose token 2 has origin 0 (the worker derives
origins from the proposals and the emitted tokens), 99% Clopper-Pearson interval.  Also prints the chi-square
p-value of the token-2 counts against the target law (the lossless claim).  Float64 arithmetic.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

from verifier.models.loading import load_model
from verifier.runner.store import SampleStore
from verifier.sampling import SamplingConfig, processed_probs


def clopper_pearson(k, n, confidence=0.99):
    a = (1 - confidence) / 2
    lo = sps.beta.ppf(a, k, n - k + 1) if k > 0 else 0.0
    hi = sps.beta.ppf(1 - a, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def predict(prompt, sampling, target, draft):
    with torch.no_grad():
        p1 = processed_probs(target(torch.tensor([prompt])).logits[0, -1], sampling).numpy()
        support = np.nonzero(p1)[0]
        ctx = torch.tensor([list(prompt) + [int(t)] for t in support])
        p2 = processed_probs(target(ctx).logits[:, -1], sampling).numpy()
        q2 = processed_probs(draft(ctx).logits[:, -1], sampling).numpy()
    greedy = q2.argmax(1)
    w = p1[support]
    return {"target token 2": w @ p2, "target-match greedy": float(w @ p2[np.arange(len(support)), greedy]),
            "canonical": float(w @ np.minimum(p2, q2).sum(1))}


def main():
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    for arg in sys.argv[1:]:  # RUN_DIR, or RUN_DIR=REPORT_DIR to write REPORT_DIR/acceptance.txt (the README matrix reads it)
        run_dir, _, report_dir = arg.partition("=")
        store = SampleStore(run_dir)
        for set_dir in sorted(p for p in store.samples_dir.iterdir() if p.is_dir()):
            shards, i = [], 0
            while (s := store.read_chunk(set_dir.name, i)) is not None:
                shards.append(s)
                i += 1
            key = shards[0].meta["set_key"]
            prompt = json.loads(key.split("|prompt=", 1)[1].split("|", 1)[0])
            sampling = SamplingConfig(**json.loads(key.split("|sampling=", 1)[1].split("|", 1)[0]))
            law = predict(prompt, sampling, target, draft)
            tokens = np.concatenate([s.tokens for s in shards])
            print(f"{run_dir} {sampling.label()} n={len(tokens)}")
            if any(s.origins is None for s in shards):
                print("    no per-token origins stored (run made before the worker reported them)")
                continue
            orig = np.concatenate([s.origins for s in shards])
            reached = orig[:, 1] >= 0
            acc = int((orig[reached, 1] == 0).sum())
            lo, hi = clopper_pearson(acc, int(reached.sum()))
            canon = law["canonical"]
            note = "ABOVE THE COUPLING BOUND" if lo > law["canonical"] else "FAR BELOW CANONICAL" if hi < 0.5 * law["canonical"] else ""
            print(f"    ACCEPTANCE first round, draft position 1 (token 2): observed {acc / reached.sum():.3f} [99% CI {lo:.3f}, "
                  f"{hi:.3f}] (n={int(reached.sum())}); predicted from the source (target-match, greedy draft) "
                  f"{law['target-match greedy']:.3f}; canonical sum min(p, q) {law['canonical']:.3f} {note}")
            if report_dir:
                Path(report_dir, "acceptance.txt").write_text(
                    f"draft position 1 (token 2; round 1 starts after token 1): {acc / reached.sum():.3f} [99% CI {lo:.3f}, {hi:.3f}] "
                    f"vs canonical {canon:.3f} (predicted from the source {law['target-match greedy']:.3f}) {note.split(' (')[0]}\n")
            for j in range(2, orig.shape[1]):
                alive = (orig[:, 1:j] == 0).all(1) & (orig[:, j] >= 0)
                if alive.sum():
                    a_j = int((orig[alive, j] == 0).sum())
                    lo, hi = clopper_pearson(a_j, int(alive.sum()))
                    print(f"        draft position {j}: observed {a_j / alive.sum():.3f} [99% CI {lo:.3f}, {hi:.3f}] "
                          f"(n={int(alive.sum())} rounds that reached it)")


if __name__ == "__main__":
    main()
