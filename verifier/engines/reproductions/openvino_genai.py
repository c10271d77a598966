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
  interval.  CDFs walked in id order (no top-k / top-p), by decreasing prob (top-p), or, with top-k alone, in the
  order ``TopKFilter``'s heap leaves the kept tokens (:mod:`verifier.engines.openvino_topk`, libstdc++'s heap
  algorithms replayed on the raw float32 logits).

Probs: on an audit of the installed engine (:func:`engine_laws` with the audit's decoder options), the engine's own
logits -- its IRs at the precision the pipeline sampled at, what ``LLMPipeline`` samples from
(:mod:`verifier.engines.openvino_logits`; the CPU plugin's default unless ``precision=f32``: bf16 on CPUs with AMX,
where the fp32 models' top-p set at T = 0.7, top-k 50, top-p 0.9 keeps 11 tokens and the engine's 12).  The shards
record that precision (``settings["inference_precision"]``); a CPU that cannot compute at it scores no law
(:func:`law_unsupported`), and shards that recorded none get this CPU's default, said in the report
(:func:`untested`).  Else the torch models given.

:func:`score_set` prints per sample set: TV of each predicted law from the target's (token 2 and tokens
1-2), the chi-square p-value of the observed token-2 counts and of the observed (token 1, token 2) counts
against each law (tails pooled to expected counts >= 10 without looking at the data), and the predicted
vs observed acceptance of the first drafted token.  A law the samples do not reject (p above alpha) while
they reject the target's is the law the engine samples.
"""

from __future__ import annotations

# where a filter-boundary finding's precision comes from (verifier.diagnose.boundary; field-kinds/FINDINGS.md)
PRECISION_HINT = ("OpenVINO's CPU plugin runs LLMPipeline at its default INFERENCE_PRECISION_HINT, bf16 on CPUs with "
                  "AMX / AVX512-bf16, with a u8 KV cache (KV_CACHE_PRECISION), although the IR is f32; the adapter's "
                  "`--engine-arg precision=f32` sets both to f32 for target and draft")

import json
import subprocess
from typing import Callable

import numpy as np
import torch

from verifier.engines.openvino_repro import cdf_interval, inverse_cdf_law, validation_step_law_np, walk_order
from verifier.engines.openvino_topk import topk_heap_order
from verifier.engines.reproductions._common import chi2_p
from verifier.sampling import processed_probs

__all__ = ["COUPLINGS", "predict", "score_set", "observed_acceptance", "LAW_TOKENS", "LAW_SOURCE", "LAW_POINTER",
           "TAKES_SETTINGS", "engine_laws", "law_unsupported", "untested", "sampled_precision", "UNTIL_FAILURE",
           "PRECISION_ONLY", "mixtures"]

# engine_laws / law_unsupported / untested take the shards' recorded decoder settings (verifier.diagnose.engine_laws):
# the precision the pipeline sampled at (settings["inference_precision"], recorded since 2026-12-06)
TAKES_SETTINGS = True

COUPLINGS = ("independent", "shared seed")
# the mixture prefix caching on samples (FINDINGS.md sections 1, 3): the shared-seed law in the calls before the pipeline's
# first content_length failure, the target's after it
UNTIL_FAILURE = "as shipped, shared seed until the first content_length failure, then the target"
# ... and its limit: no call speculated (or too few to matter), the target sampled at the pipeline's own precision
PRECISION_ONLY = "the target alone, at the pipeline's precision"
BATCH = 4096  # target contexts per forward pass
MIN_PROB = 1e-15  # a law's categories at or below this count as impossible in the chi-square


def model_logits(target, draft):
    """Logits function of :func:`predict` from torch models: ``(role, contexts) -> (contexts, vocab)`` in the models' dtype."""
    models = {"target": target, "draft": draft}

    def fn(role: str, contexts: list[list[int]]) -> np.ndarray:
        out = []
        with torch.no_grad():
            for i in range(0, len(contexts), BATCH):
                out.append(models[role](torch.tensor(contexts[i:i + BATCH])).logits[:, -1].numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)
    return fn


def engine_logits_fn(precision: str | None = None):
    """Logits function of :func:`predict` from the engine's own IRs (:mod:`verifier.engines.openvino_logits`; what
    ``LLMPipeline`` samples from) at ``precision`` (``"f32"``, ``"bf16"``; default the CPU plugin's default).

    Raises (when called) ``RuntimeError`` where this CPU cannot compute at ``precision``."""
    from verifier.engines.openvino_logits import engine_logits

    return lambda role, contexts: engine_logits({role: contexts}, precision=precision)[0][role]


def _processed(logits: np.ndarray, sampling) -> np.ndarray:
    return processed_probs(torch.as_tensor(logits), sampling).numpy()


def _probs(model, contexts, sampling) -> np.ndarray:
    """Processed probs of a torch model after each context, shape (contexts, vocab) (the float path of :func:`predict`)."""
    return _processed(model_logits(model, None)("target", [list(c) for c in contexts]), sampling)


def _walk(probs: np.ndarray, logits: np.ndarray, sampling) -> np.ndarray:
    """The order ``_multinomial_sample`` walks the CDF in: decreasing prob after top-p's sort, TopKFilter's heap order
    with top-k alone (:func:`verifier.engines.openvino_topk.topk_heap_order` of the raw logits), else id order."""
    if sampling.top_p is not None and sampling.top_p < 1:
        return walk_order(probs, True)
    if sampling.top_k is not None and 0 < sampling.top_k < len(probs):
        return np.asarray(topk_heap_order(logits, int(sampling.top_k)))
    return walk_order(probs, False)


def predict(prompt, sampling, target, draft, *, logits=None):
    """Laws of (token 1, token 2): dict name -> ndarray (vocab, vocab), plus predicted acceptances.

    ``logits``: ``(role, contexts) -> float32 (contexts, vocab)`` for role "target" / "draft"; default the torch models
    ``target`` and ``draft`` (:func:`model_logits`); :func:`engine_logits_fn` gives the engine's own.
    """
    fn = logits or model_logits(target, draft)
    l1 = fn("target", [list(prompt)])[0]
    p1 = _processed(l1, sampling)
    V = len(p1)
    support = [int(t) for t in np.nonzero(p1)[0]]
    ctx1 = [list(prompt) + [t] for t in support]
    p2 = _processed(fn("target", ctx1), sampling)
    ql2 = fn("draft", ctx1)
    q2 = _processed(ql2, sampling)
    cands = [[int(x) for x in np.nonzero(q2[i])[0]] for i in range(len(support))]
    flat = [ctx1[i] + [x] for i in range(len(support)) for x in cands[i]]
    p3 = _processed(fn("target", flat), sampling)
    laws = {"target": np.zeros((V, V))}
    laws.update({f"as shipped, {c}": np.zeros((V, V)) for c in COUPLINGS})
    acc = {name: 0.0 for name in laws}
    order1 = _walk(p1, l1, sampling)
    row = 0
    for i, t1 in enumerate(support):
        xs = cands[i]
        nxt = np.zeros((V, V))
        nxt[xs] = p3[row:row + len(xs)]
        row += len(xs)
        laws["target"][t1] = p1[t1] * p2[i]
        acc["target"] += p1[t1] * np.minimum(p2[i], q2[i]).sum()  # canonical acceptance
        lo, hi = cdf_interval(p1, order1, t1)
        proposals = {"independent": None, "shared seed": inverse_cdf_law(q2[i], _walk(q2[i], ql2[i], sampling), lo, hi)}
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
    PRECISION_ONLY: (
        "OpenVINO GenAI's pipeline sampled the target alone (with prefix caching on, every call after its first "
        "content_length failure), from its own logits at the CPU plugin's precision (bf16 with native bf16): a bias "
        "left is the precision's (a token across a top-k / top-p / min-p threshold), not the speculative rule's; the "
        "control is --engine-arg precision=f32"),
    UNTIL_FAILURE: (
        "with prefix caching on (the engine default) OpenVINO GenAI's continuous-batching pipeline speculates with the "
        "shared-seed validate_candidate law above only until its first content_length failure (sequence_group.cpp), "
        "then samples the target alone (at the pipeline's own precision: its target law from the engine's logits): the "
        "rows are that law's at a small share, the target's at the rest (FINDINGS.md sections 1 and 3; the share is "
        "fitted, the failure's timing is not in the source; a share near 0 says the calls hardly speculated, and a bias "
        "left then comes from the precision)"),
}


PRECISIONS = ("f32", "bf16", "f16")  # OpenVINO inference precisions a CPU pipeline can resolve to (type names)


def sampled_precision(options=None, settings=None) -> tuple[list[str], str]:
    """The precision(s) the audit's pipeline sampled at, and where that comes from.

    Parameters
    ----------
    options : dict, optional
        The decoder's options (``precision``: ``"f32"`` forces f32; ``"engine"`` or absent: the CPU plugin's default).
    settings : list of dict, optional
        The distinct decoder settings the set's shards recorded; ``inference_precision`` in each (the pipeline's
        resolved precision, recorded since 2026-12-06).

    Returns
    -------
    (precisions, source) : the distinct precisions (empty: unknown) and ``"recorded"`` (every shard recorded one),
        ``"option"`` (``precision=f32`` set, nothing recorded), ``"partly recorded"``, ``"not recorded"`` or
        ``"malformed"`` (a shard's settings are not a mapping, or record a value outside :data:`PRECISIONS`: then
        ``precisions`` holds those values' reprs, shortened).
    """
    settings = list(settings or ())
    bad = [s if not isinstance(s, dict) else s["inference_precision"] for s in settings
           if not isinstance(s, dict) or ("inference_precision" in s and s["inference_precision"] not in PRECISIONS)]
    if bad:
        return sorted({_short(v) for v in bad}), "malformed"
    recorded = sorted({s["inference_precision"] for s in settings if "inference_precision" in s})
    if recorded and all("inference_precision" in s for s in settings):
        return recorded, "recorded"
    if recorded:
        return recorded, "partly recorded"
    if (options or {}).get("precision") == "f32":
        return ["f32"], "option"
    return [], "not recorded"


def _short(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def mixtures(options=None) -> dict[str, tuple[str, ...]]:
    """The mixture hypotheses of an audit with decoder ``options``: with prefix caching on (``prefix_caching=True``,
    the engine's default) the pipeline speculates only until its first ``content_length`` failure and samples the
    target alone afterwards (FINDINGS.md section 1), so its rows are the shared-seed law's at a share set by when that
    failure comes, which the source does not fix (:data:`UNTIL_FAILURE`: that law and the target's, the share fitted
    by :func:`verifier.diagnose.engine_laws.mixture_score` over ``ONE_LAW_SHARES``); with it off, none."""
    return {UNTIL_FAILURE: ("as shipped, shared seed",)} if (options or {}).get("prefix_caching") is True else {}


def law_unsupported(sampling, num_draft_tokens: int, options=None, settings=None) -> str | None:
    """Why no law of tokens 1-2 can be predicted for this audit (None: they can).

    On an audit of the installed engine the laws are computed at the precision the pipeline sampled at
    (:func:`sampled_precision`): shards drawn at more than one precision, or at one this CPU cannot compute (bf16
    samples, a CPU without native bf16), get no law.  (Prefix caching on is scored as :func:`mixtures`.)
    """
    if not _audited_engine(options):
        return None
    precisions, source = sampled_precision(options, settings)
    if source == "malformed":
        return (f"the shards record the pipeline's precision as {', '.join(precisions)} (settings.inference_precision; "
                f"allowed: {', '.join(PRECISIONS)}, in a settings mapping), so the precision it sampled at is unknown")
    if len(precisions) > 1 or source == "partly recorded":
        return (f"the shards were drawn at more than one OpenVINO inference precision ({', '.join(precisions)}"
                f"{'; some shards recorded none' if source == 'partly recorded' else ''}: a run resumed on another "
                f"CPU), so no one law of the engine describes them")
    if precisions:
        from verifier.engines.openvino_logits import resolved_precision

        try:
            here = resolved_precision(precisions[0])
        except (OSError, subprocess.SubprocessError) as exc:  # the engine's Python cannot compile the IR here
            return (f"the engine's IRs cannot be compiled here to compute its laws at {precisions[0]} "
                    f"({type(exc).__name__}: {_short(getattr(exc, 'stderr', None) or exc, 300)})")
        if here != precisions[0]:
            return (f"the pipeline sampled at {precisions[0]} (recorded in the shards) and this CPU computes the "
                    f"engine's IRs at {here} only (no native {precisions[0]}), so the probs it sampled from cannot be "
                    f"computed here; diagnose on a CPU with native {precisions[0]} (AMX or AVX512-BF16 for bf16)")
    return None


def untested(draft_known: bool, options=None, settings=None) -> str | None:
    """What the scored laws leave out: on shards that recorded no precision (drawn before 2026-12-06 with the
    plugin's default), the laws are computed at this CPU's default, which may not be the sampling CPU's."""
    if not _audited_engine(options) or sampled_precision(options, settings)[1] != "not recorded":
        return None
    from verifier.engines.openvino_logits import resolved_precision

    return (f"the pipeline's precision was not recorded with these samples (the CPU plugin's default on the sampling "
            f"machine: bf16 with native bf16, f32 without); the engine laws are computed at this CPU's default "
            f"({resolved_precision()}), and at T < 1 with top-k / top-p the kept sets can differ between the two")


def _audited_engine(options) -> bool:
    """An audit of the installed engine on the shipped pair (its decoder options name them): the laws then take the
    engine's own logits (:func:`engine_logits_fn`) -- the probs its pipeline samples from."""
    from verifier.engines.openvino_logits import available

    opts = options or {}
    return (opts.get("target_model") == "shipped:target" and opts.get("draft_model") == "shipped:draft"
            and available())


def engine_laws(prompt, sampling, target, draft, options=None, settings=None) -> dict[str, np.ndarray]:
    """Joint laws of tokens 1-2, shape (vocab, vocab): ``"target"`` (the target's law on the same probs), each
    coupling of :data:`COUPLINGS`, and with prefix caching on (:func:`mixtures`) on the engine's own logits
    :data:`PRECISION_ONLY` (the engine's target alone: the until-failure mixture at share 0, scored beside it so that
    the mixture never takes the credit for a bias of the precision alone).  On an audit of the installed engine (``options`` name the shipped pair) the probs
    are the engine's own (:mod:`verifier.engines.openvino_logits`) at the precision the pipeline sampled at
    (:func:`sampled_precision` of ``options`` and the shards' recorded ``settings``; unknown: the CPU plugin's default,
    bf16 on CPUs with AMX); otherwise the torch models' (``target``, ``draft``).

    Raises
    ------
    RuntimeError
        This CPU cannot compute at the recorded precision (:func:`law_unsupported` says so first).
    """
    if not _audited_engine(options):
        return predict(prompt, sampling, target, draft)[0]
    precisions, _ = sampled_precision(options, settings)
    laws = predict(prompt, sampling, target, draft, logits=engine_logits_fn(precisions[0] if len(precisions) == 1 else None))[0]
    if mixtures(options):  # prefix caching on: the until-failure mixture's limit, the engine's target alone, is its rival
        laws[PRECISION_ONLY] = laws["target"].copy()
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
