"""Predict OpenVINO GenAI's law of tokens 1-2 from its source, and test an audit run's samples against it.

Usage: python reports/audits/openvino-genai-2026.4.1.0/predict.py RUN_DIR [RUN_DIR ...]

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

Prints per sample set: TV of each predicted law from the target's (token 2 and tokens 1-2), the
chi-square p-value of the observed token-2 counts and of the observed (token 1, token 2) counts against
each law (tails pooled to expected counts >= 10 without looking at the data), and the predicted vs
observed acceptance of the first drafted token.  A law the samples do not reject (p above alpha) while
they reject the target's is the law the engine samples.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

from verifier.engines.openvino_repro import cdf_interval, inverse_cdf_law, validation_step_law_np, walk_order
from verifier.models.loading import load_model
from verifier.runner.store import SampleStore
from verifier.sampling import SamplingConfig, processed_probs

COUPLINGS = ("independent", "shared seed")
BATCH = 4096  # target contexts per forward pass


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


def chi2_p(counts, law):
    """Chi-square p-value of counts against law; 0 when a count falls where the law is 0."""
    counts, law = counts.ravel().astype(float), law.ravel()
    keep = law > 1e-15
    if counts[~keep].sum() > 0:
        return 0.0
    exp = law[keep] / law[keep].sum() * counts.sum()
    order = np.argsort(-exp)
    obs, exp = counts[keep][order], exp[order]
    bins_o, bins_e, o, e = [], [], 0.0, 0.0
    for a, b in zip(obs, exp):
        o, e = o + a, e + b
        if e >= 10:
            bins_o.append(o), bins_e.append(e)
            o = e = 0.0
    if e > 0 and bins_e:
        bins_o[-1] += o
        bins_e[-1] += e
    return float(sps.chisquare(bins_o, bins_e).pvalue) if len(bins_o) > 1 else 1.0


def main():
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    for run_dir in sys.argv[1:]:
        store = SampleStore(run_dir)
        report = json.loads((Path(run_dir) / "report.json").read_text()) if (Path(run_dir) / "report.json").exists() else {}
        for set_dir in sorted(p for p in store.samples_dir.iterdir() if p.is_dir()):
            shards, i = [], 0
            while (s := store.read_chunk(set_dir.name, i)) is not None:
                shards.append(s)
                i += 1
            key = shards[0].meta["set_key"]
            prompt = json.loads(key.split("|prompt=", 1)[1].split("|", 1)[0])
            sampling = SamplingConfig(**json.loads(key.split("|sampling=", 1)[1].split("|", 1)[0]))
            tokens = np.concatenate([s.tokens for s in shards])
            tokens = tokens[(tokens[:, 0] >= 0) & (tokens[:, 1] >= 0)]
            laws, acc = predict(prompt, sampling, target, draft)
            V = laws["target"].shape[0]
            joint = np.zeros((V, V))
            np.add.at(joint, (tokens[:, 0], tokens[:, 1]), 1)
            print(f"{run_dir} {set_dir.name} {sampling.label()} n={len(tokens)}")
            for name, law in laws.items():
                tv2 = 0.5 * np.abs(law.sum(0) - laws["target"].sum(0)).sum()
                tv12 = 0.5 * np.abs(law - laws["target"]).sum()
                print(f"  {name:28s} TV from target: token 2 {tv2:.3f}, tokens 1-2 {tv12:.3f};  chi-square p: "
                      f"token 2 {chi2_p(joint.sum(0), law.sum(0)):.3g}, tokens 1-2 {chi2_p(joint, law):.3g};  "
                      f"predicted acceptance of draft 1 {acc[name]:.3f}" + ("  (canonical)" if name == "target" else ""))
            print(f"  observed: {json.dumps(_observed_acceptance(shards, report))}")


def _observed_acceptance(shards, report):
    """Engine-reported totals (accepted drafts, rounds) from the shards' meta and the report, where present."""
    out = {}
    for s in shards:
        for k in ("accepted", "rounds", "engine_accepted", "engine_rounds"):
            if k in s.meta:
                out[k] = out.get(k, 0) + s.meta[k]
    if "acceptance" in report:
        out["report"] = report["acceptance"]
    return out


if __name__ == "__main__":
    main()
