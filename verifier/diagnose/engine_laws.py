"""Engine laws: the law an engine's own source predicts, ranked beside the family on the first emitted tokens.

Issue 26 ("engine hypotheses"): some engines' defects are not a mechanism of the family
(:mod:`verifier.diagnose.family`) -- OpenVINO GenAI's ``validate_candidate`` compares ``q(x)`` with the target prob
of a *fresh* target sample, resamples one position late, and draws the first draft with the uniform that drew the
first token.  An engine module registered in :data:`verifier.engines.reproductions.LAWS` predicts, from the engine's
source, the exact (float64) joint law of the first ``LAW_TOKENS`` emitted tokens on the audited prompt and
sampling config.  For an audit of that engine (engine name from the run folder's audit.json), this module scores
those laws on the rows' first ``J`` tokens **beside every hypothesis of the family scored on the same J tokens**
(:func:`verifier.diagnose.likelihood.log_likelihood` on rows cut after J tokens: the forward recursion's mass of a
row prefix), with the same robust scores (:mod:`verifier.diagnose.robust`) and the same decision
(:func:`verifier.diagnose.rank.decide`: threshold log(M/alpha) over the target, separation log(2M/alpha) from every
other hypothesis, classes), then checks the named law's own fit (chi-square of the observed J-token counts against
it, Bonferroni over the sample sets, at ``FIT_ALPHA``).  A mixture (``module.MIXTURES``), or a law the ranking fitted a
contamination share, is checked at its maximum-likelihood shares (:mod:`verifier.diagnose.share_fit`) with one degree
of freedom less per free share: the ranking's grid point (steps of :data:`WEIGHT_STEP`) is off the true shares by more
than the sampling error at large n, and a check there rejects a correct mixture far more often than ``FIT_ALPHA``
(reports/benchmarks.md section 35; ``specverify bench diagnose-fit``).

Error control: the whole-row ranking and this one each run at ``DIAGNOSIS_ALPHA / 2`` when an engine registers laws
(:func:`ranking_alpha`), so naming anything when the decoder samples from the target stays below ``DIAGNOSIS_ALPHA``.

An engine law is a law of the first J tokens only: it names the root cause the source predicts; the whole-row
diagnosis beside it stays what it was.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import replace
from typing import Any

import numpy as np

from verifier.diagnose.rank import (DIAGNOSIS_ALPHA, FIT_ALPHA, MechanismScore, Ranking, weighted_total, combine, decide,
                                    rank_mechanisms, robust_score, sentence)
from verifier.diagnose.robust import EPS_GRID
from verifier.diagnose.share_fit import mle_shares
from verifier.diagnose.likelihood import SequenceProbs, target_log_likelihood

__all__ = ["engine_module", "law_tokens", "ranking_alpha", "truncate", "score_engine_laws", "engine_law_diagnosis",
           "ENGINE_LAW_MARK"]

ENGINE_LAW_MARK = "engine:"  # hypothesis names of engine laws start with this ("engine:openvino-genai/as shipped ...")
MIN_PROB = 1e-300  # a law's entry at or below this is 0 (an impossible row: -inf before the contamination mixture)
SHOWN_SHARE = 5e-4  # a fitted share below this is left out of the sentence (it prints as 0.000); report.json keeps it


def engine_module(engine: str | None):
    """The module of :data:`verifier.engines.reproductions.LAWS` for ``engine``, or None."""
    from verifier.engines.reproductions import LAWS

    name = LAWS.get(engine) if isinstance(engine, str) else None
    return importlib.import_module(name) if name else None


def law_tokens(module, options: dict | None = None) -> int:
    """How many first tokens ``module``'s laws cover for a decoder with ``options``: ``module.law_tokens(options)``
    where the module defines it (the count depends on the engine's mode), else ``module.LAW_TOKENS``."""
    fn = getattr(module, "law_tokens", None)
    return int(fn(options or {})) if callable(fn) else int(module.LAW_TOKENS)


def ranking_alpha(engine: str | None, alpha: float = DIAGNOSIS_ALPHA) -> float:
    """Level of each of the two rankings: ``alpha / 2`` for an engine with registered laws, else ``alpha``."""
    return alpha / 2 if engine_module(engine) is not None else alpha


def truncate(seqs: SequenceProbs, num_tokens: int) -> SequenceProbs:
    """The rows cut after their first ``num_tokens`` emitted tokens (teacher-forced probs cut with them)."""
    cut = (lambda a: None if a is None else a[:, :num_tokens])
    return replace(seqs, tokens=seqs.tokens[:, :num_tokens], p=seqs.p[:, :num_tokens], q=seqs.q[:, :num_tokens],
                   p_raw=cut(seqs.p_raw), q_raw=cut(seqs.q_raw), q_temp=cut(seqs.q_temp))


def _law_name(engine: str, law: str) -> str:
    return f"{ENGINE_LAW_MARK}{engine}/{law}"


def score_engine_laws(engine: str, module, seqs: SequenceProbs, laws: dict[str, np.ndarray], num_draft_tokens: int,
                      num_tokens: int | None = None, mixtures: dict | None = None,
                      target_law: np.ndarray | None = None) -> Ranking:
    """The family and the engine's laws ranked on the first ``num_tokens`` (default ``module.LAW_TOKENS``) tokens of one
    sample set.

    Parameters
    ----------
    engine : str
    module : module
        Its :data:`~verifier.engines.reproductions.LAWS` entry (``LAW_TOKENS``).
    seqs : SequenceProbs
        The set's distinct rows with their weights (:func:`verifier.diagnose.sample_set.diagnose_sample_set`).
    laws : dict of str -> np.ndarray, each shape (vocab,) * J
        The engine's predicted joint laws of tokens 1..J (``module.engine_laws``).
    num_draft_tokens : int
    num_tokens : int, optional
        J, the tokens the laws cover (:func:`law_tokens`); default ``module.LAW_TOKENS``.
    mixtures : dict of str -> tuple of str, optional
        The mixture hypotheses (name -> component law names; :func:`module_mixtures`); default ``module.MIXTURES``.
    target_law : np.ndarray, shape (vocab,) * J, optional
        The module's own law of the target (``engine_laws()["target"]``: on an engine audit, from the engine's own
        logits): the second component of a one-law mixture (the calls that sampled the target alone, at the engine's
        precision); default the family's target.

    Returns
    -------
    Ranking
        Every family hypothesis and every engine law (named :data:`ENGINE_LAW_MARK` + ``engine/law``), scored on the
        rows cut after J tokens; rows that end (EOS) before J tokens keep their shorter prefix for the family and are
        left out of nothing: an engine law gives them the mass of every continuation of that prefix.
    """
    J = int(module.LAW_TOKENS) if num_tokens is None else int(num_tokens)
    short = truncate(seqs, J)
    ranking = rank_mechanisms(short, num_draft_tokens, per_position=False)
    ll_t = target_log_likelihood(short)
    w = short.row_weights
    _add_laws(ranking, engine, module, laws, short.tokens, ll_t, w, mixtures, target_law)
    return ranking


def module_mixtures(module, options: dict | None = None) -> dict[str, tuple[str, ...]]:
    """The mixture hypotheses ``module`` offers for a decoder with ``options``: ``module.mixtures(options)`` where the
    module defines it (a mixture that only some engine settings produce), else ``module.MIXTURES`` (or none)."""
    fn = getattr(module, "mixtures", None)
    return dict(fn(options or {})) if callable(fn) else dict(getattr(module, "MIXTURES", {}))


def _add_laws(ranking: Ranking, engine: str, module, laws: dict[str, np.ndarray], tokens: np.ndarray,
              ll_t: np.ndarray, weights: np.ndarray, mixtures: dict | None = None,
              target_law: np.ndarray | None = None) -> None:
    """Score each law (robust contamination mixture with the target) and the mixtures (default ``module.MIXTURES``)
    into ``ranking``."""
    total_t = weighted_total(ll_t, weights)
    for law_name, law in laws.items():
        ll = _row_log_law(law, tokens)
        name = _law_name(engine, law_name)
        ranking.row_ll[name] = ll
        ranking.scores.append(robust_score(name, "biased", ll, ll_t, weights, total_t))
    mixtures = module_mixtures(module) if mixtures is None else mixtures
    ranking.fitted = _add_mixtures(ranking, engine, mixtures, laws, tokens, ll_t, weights, total_t, target_law)


WEIGHT_STEP = 0.05  # grid of a mixture hypothesis's weights over its laws (and the target's): the simplex in steps of 0.05
# grid of a one-law mixture's share of that law (the rest the target's): half decades from 1e-4, then 0.2-1 -- an engine
# whose defect shows in a few rows only (OpenVINO GenAI with prefix caching on speculates until its first failure)
ONE_LAW_SHARES = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def _simplex(parts: int, step: float = WEIGHT_STEP) -> np.ndarray:
    """Every weight vector of ``parts`` non-negative multiples of ``step`` summing to 1, shape (points, parts)."""
    units = int(round(1 / step))

    def rec(left: int, n: int):
        if n == 1:
            yield (left,)
            return
        for i in range(left + 1):
            for rest in rec(left - i, n - 1):
                yield (i,) + rest
    return np.array(list(rec(units, parts)), dtype=np.float64) / units


def mixture_score(name: str, component_ll: np.ndarray, ll_t: np.ndarray, weights: np.ndarray,
                  total_t: float, grid: np.ndarray | None = None,
                  base_ll: np.ndarray | None = None) -> tuple[MechanismScore, np.ndarray, np.ndarray]:
    """A mixture hypothesis: the rows come from several predicted laws (and the target's) in unknown shares.

    Scored as the Bayes mixture over ``grid`` (default :func:`_simplex`, steps of :data:`WEIGHT_STEP`) with a uniform
    prior, ``log mean_w prod_i sum_c w_c P_c(x_i)``:
    each ``w`` is a law, its likelihood ratio over the target has mean 1 under the target, and so has their average
    (an e-value: the threshold of :func:`verifier.diagnose.rank.decide` keeps its guarantee).

    Parameters
    ----------
    component_ll : np.ndarray, shape (rows, components)
        Log probability of each distinct row under each component law.
    ll_t : np.ndarray, shape (rows,)
        Under the target (the last component of the mixture).
    weights : np.ndarray, shape (rows,)
    grid : np.ndarray, shape (points, components + 1), optional
        The weight vectors averaged over (each sums to 1; the target's weight last), fixed before the data.
    base_ll : np.ndarray, shape (rows,), optional
        The last component's log probability per row, when it is not ``ll_t`` (an engine's own target law); the
        likelihood ratio is still taken over ``ll_t``'s total ``total_t``.

    Returns
    -------
    (MechanismScore, best weights (components + 1,), per-row log-likelihood at the best weights)
    """
    comps = np.concatenate([component_ll, (ll_t if base_ll is None else base_ll)[:, None]], axis=1)
    grid = _simplex(comps.shape[1]) if grid is None else np.asarray(grid, dtype=np.float64)
    totals = np.empty(len(grid))
    step = max(1, GRID_CHUNK_CELLS // max(1, len(comps)))
    for a in range(0, len(grid), step):  # (rows, points) in chunks of points: 53,130 points for 6 components
        per_row = _grid_log_mixture(comps, grid[a:a + step])
        with np.errstate(invalid="ignore"):
            totals[a:a + step] = np.where(np.isfinite(per_row).all(axis=0), weights @ per_row, -np.inf)
    with np.errstate(divide="ignore"):
        total = float(np.logaddexp.reduce(totals) - math.log(len(grid)))
    best = int(np.argmax(totals))
    lr = total - total_t
    score = MechanismScore(name, "biased", total, 0.0 if math.isnan(lr) else float(lr), log_lr_pure=None,
                           contamination=float(grid[best, -1]))
    return score, grid[best], _grid_log_mixture(comps, grid[best:best + 1])[:, 0]


GRID_CHUNK_CELLS = 1 << 22  # rows x grid points evaluated at once (32 MiB of float64 per array)
UNDERFLOW_NATS = 700.0  # a component this far below a row's best underflows exp(): that row takes np.logaddexp instead


def _grid_log_mixture(comps: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``log sum_c w_c P_c(x_i)`` for each row i and grid point w, shape (rows, points): a matrix product of the
    components' probabilities scaled by each row's largest (``comps`` (rows, components) log, ``grid`` (points,
    components)); a row whose components span more than :data:`UNDERFLOW_NATS` is summed in log space."""
    shift = comps.max(axis=1)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    gap = comps - shift[:, None]
    with np.errstate(divide="ignore"):
        out = np.log(np.exp(gap) @ grid.T) + shift[:, None]
        tiny = (np.isfinite(gap) & (gap < -UNDERFLOW_NATS)).any(axis=1)
        if tiny.any():
            out[tiny] = np.logaddexp.reduce(np.log(grid)[None, :, :] + comps[tiny, None, :], axis=2)
    return out


def _add_mixtures(ranking: Ranking, engine: str, mixtures: dict, laws: dict[str, np.ndarray], tokens: np.ndarray,
                  ll_t: np.ndarray, weights: np.ndarray, total_t: float,
                  target_law: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Score ``mixtures`` (name -> component law names; each with the target's law as the last component) on the rows;
    returns name -> best weights.  A mixture of one law and the target's averages over :data:`ONE_LAW_SHARES` of that
    law (the robust score of the law alone covers target shares up to 0.3 only), its target component the module's own
    ``target_law`` where given (the engine's target at its own precision: what its calls without speculation sample,
    and the law the fit check mixes in); a mixture of several laws averages over the simplex with the family's target."""
    fitted, seen = {}, set()
    for mix, parts in mixtures.items():
        declared = len(parts)
        parts = [q for q in parts if q in laws]
        if not parts or len(parts) < min(2, declared) or tuple(parts) in seen:  # an earlier mixture's components: one
            continue
        seen.add(tuple(parts))
        comp = np.stack([_row_log_law(laws[q], tokens) for q in parts], axis=1)
        grid = None if len(parts) > 1 else np.array([(w, 1.0 - w) for w in ONE_LAW_SHARES])
        base = _row_log_law(target_law, tokens) if len(parts) == 1 and target_law is not None else None
        score, w, row = mixture_score(_law_name(engine, mix), comp, ll_t, weights, total_t, grid, base)
        ranking.scores.append(score)
        ranking.row_ll[score.name] = row
        fitted[mix] = dict(zip(list(parts) + ["target"], (float(x) for x in w)))
    return fitted


def _distinct(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows and their counts (float64 weights)."""
    if not len(tokens):
        return tokens, np.zeros(0)
    rows, counts = np.unique(tokens, axis=0, return_counts=True)
    return rows, counts.astype(np.float64)


def _target_only_ranking(engine: str, module, laws: dict[str, np.ndarray], target_law: np.ndarray, tokens: np.ndarray,
                         weights: np.ndarray, mixtures: dict | None = None) -> Ranking:
    """The engine's laws scored against the target's law of the first J tokens (no family: the draft is unknown)."""
    ll_t = _row_log_law(target_law, tokens)
    ranking = Ranking(int(weights.sum()), weighted_total(ll_t, weights), [])
    _add_laws(ranking, engine, module, laws, tokens, ll_t, weights, mixtures, target_law)
    return ranking


def _row_log_law(law: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """log P(row prefix) under a joint law of J tokens; a prefix shorter than J (EOS) sums the rest out."""
    out = np.empty(len(tokens))
    for i, row in enumerate(tokens):
        sub = law
        for t in row:
            if t < 0:
                break
            sub = sub[int(t)]
        mass = float(np.sum(sub))
        out[i] = math.log(mass) if mass > MIN_PROB else -math.inf
    return out


def _components(key: str, laws: dict[str, np.ndarray], target_law: np.ndarray | None, grid: dict,
                contaminated: bool) -> dict[str, np.ndarray]:
    """The named hypothesis's component laws of J tokens: a mixture's laws and the target's (``grid`` holds its grid
    weights, whose keys name them), a single law and the target's when the ranking fitted it a contamination share,
    else the single law alone."""
    if key in grid:
        return {c: target_law if c == "target" else laws[c] for c in grid[key]}
    if contaminated and target_law is not None:
        return {key: laws[key], "target": target_law}
    return {key: laws[key]}


def _fit_at_mle(components: dict[str, np.ndarray], tokens: np.ndarray, weights: np.ndarray,
                max_last: float = 1.0) -> tuple[float | None, dict[str, float]]:
    """Fit check of a hypothesis made of ``components`` (one law, or a mixture whose last component is the target's):
    its shares fitted by maximum likelihood on the rows (:func:`verifier.diagnose.share_fit.mle_shares`), then the
    chi-square of the J-token counts against the mixture at those shares, with one degree of freedom less per free
    share (components - 1).  Returns (p or None when nothing can be counted, {component: fitted share})."""
    names = list(components)
    if len(names) == 1:
        shares = np.ones(1)
    else:
        comp_ll = np.stack([_row_log_law(components[c], tokens) for c in names], axis=1)
        shares, _ = mle_shares(comp_ll, weights, max_last=max_last)
    law = sum(v * components[c] for c, v in zip(names, shares) if v > 0)
    return _fit_pvalue(law, tokens, weights, ddof=len(names) - 1), {c: float(v) for c, v in zip(names, shares)}


def _fit_pvalue(law: np.ndarray, tokens: np.ndarray, weights: np.ndarray, ddof: int = 0) -> float | None:
    """Chi-square p of the observed J-token counts against ``law`` (rows that end before J tokens left out), with
    ``ddof`` parameters of ``law`` fitted to them."""
    from verifier.engines.reproductions._common import chi2_p

    if tokens.ndim != 2 or tokens.shape[1] < law.ndim:  # rows shorter than the law's J tokens: nothing to count
        return None
    full = (tokens >= 0).all(axis=1)
    if not full.any():
        return None
    counts = np.zeros(law.shape)
    np.add.at(counts, tuple(tokens[full].T), weights[full])
    return chi2_p(counts, law, min_prob=MIN_PROB, renormalise=True, ddof=ddof)


def engine_law_diagnosis(engine: str, sets: list[dict[str, Any]], *, bias_detected: bool) -> dict[str, Any] | None:
    """Rank the engine's laws beside the family on the first J tokens of every sample set, summed over the sets.

    Parameters
    ----------
    engine : str
        Engine name with a module in :data:`verifier.engines.reproductions.LAWS`.
    sets : list of dict
        Per sample set: ``seqs`` (SequenceProbs of its distinct rows; None when the draft is unknown, then ``tokens``,
        the emitted rows (rows, max_new_tokens) int64, and only the engine's laws and the target's are ranked -- for
        a module whose laws need no draft, ``NEEDS_DRAFT = False``), ``prompt`` (list of int), ``sampling``
        (SamplingConfig), ``num_draft_tokens``, ``target`` / ``draft`` (the pair's torch models; draft None when
        unknown), ``label`` and optionally ``options`` (the decoder's options: the engine arguments, handed to the
        module's ``law_unsupported``, ``engine_laws`` and ``untested``), ``settings`` (the distinct decoder settings
        its shards recorded, handed to the same three where the module sets ``TAKES_SETTINGS``) and ``laws`` (the module's ``engine_laws`` output, computed
        once by a caller that diagnoses many row sets of one setting: the bench).
    bias_detected : bool

    Returns
    -------
    dict or None
        None when the engine has no module.  Else ``{"engine", "tokens", "sets": [{label, note?}], "decision",
        "fit_pvalue", "named" (the engine law named alone or in a class, or None), "sentence"}``; when a mixture's fit
        was checked also ``"weights"`` (per sample set, component -> maximum-likelihood share, the target's last) and
        ``"grid_weights"`` (the ranking's best grid point); ``decision["contamination"]`` is then the fitted target
        share and ``decision["contamination_grid"]`` the ranking's.
    """
    module = engine_module(engine)
    if module is None:
        return None
    J = int(module.LAW_TOKENS)
    rankings, fits, notes = [], [], []
    for s in sets:
        J = law_tokens(module, s.get("options"))  # one audit's sets share the decoder's options
        kw = {"options": s.get("options") or {}}  # + the shards' recorded settings for a module that reads them
        kw.update({"settings": s.get("settings") or []} if getattr(module, "TAKES_SETTINGS", False) else {})
        why = module.law_unsupported(s["sampling"], s["num_draft_tokens"], **kw)
        if why is None and s.get("seqs") is None and getattr(module, "NEEDS_DRAFT", True):
            why = "the draft is unknown and this engine's laws need its probs"
        if why is None and s["sampling"].uses_context and not getattr(module, "TAKES_CONTEXT", False):
            why = "penalties set: the engine's laws are predicted without the context a penalty needs"  # no context
        if why:
            notes.append({"set": s["label"], "note": why})
            continue
        if not callable(s["target"]):  # a tabular pair: the engines' laws run torch language models
            notes.append({"set": s["label"], "note": "the target is not a torch language model"})
            continue
        mixtures = module_mixtures(module, s.get("options"))
        laws = dict(s["laws"]) if s.get("laws") is not None else module.engine_laws(
            s["prompt"], s["sampling"], s["target"], s["draft"], **kw)
        target_law = laws.pop("target", None)
        if s.get("seqs") is not None:  # the family on the same tokens beside the engine's laws
            r = score_engine_laws(engine, module, s["seqs"], laws, s["num_draft_tokens"], J, mixtures, target_law)
            short = truncate(s["seqs"], J)
            tokens, weights = short.tokens, short.row_weights
        else:  # draft unknown: no family hypothesis can be scored; the engine's laws against the target's
            tokens, weights = _distinct(np.asarray(s["tokens"], dtype=np.int64)[:, :J])
            r = _target_only_ranking(engine, module, laws, target_law, tokens, weights, mixtures)
        rankings.append(r)
        fits.append((laws, target_law, tokens, weights, getattr(r, "fitted", {})))
        left_out = getattr(module, "untested", None)  # what the scored laws cannot test here (e.g. a class needing the draft)
        left_out = left_out(s.get("draft") is not None, **kw) if callable(left_out) else None
        notes.append({"set": s["label"], "note": left_out} if left_out else {"set": s["label"]})
    if rankings:  # a law predicted for some sets only would sum fewer log-likelihoods: scored only where all have it
        common = set.intersection(*({s.name for s in r.scores} for r in rankings))
        dropped = sorted({s.name for r in rankings for s in r.scores} - common)
        for r in rankings:
            r.scores = [s for s in r.scores if s.name in common]
            r.row_ll = {k: v for k, v in r.row_ll.items() if k in common}
        if dropped:
            notes.append({"set": "all", "note": "not scored (predicted for some sample sets only): " + ", ".join(dropped)})
    out: dict[str, Any] = {"engine": engine, "tokens": J, "sets": notes, "decision": None, "fit_pvalue": None,
                           "named": None}
    if not rankings:
        out["sentence"] = (f"the laws {engine}'s source predicts were not scored: "
                           + "; ".join(f"{n['set']}: {n['note']}" for n in notes if n.get("note")))
        return out
    total = combine(rankings)
    pre = decide(total, bias_detected=bias_detected, alpha=ranking_alpha(engine))
    best = pre.get("best") or []
    fit_p, checks = None, []
    if pre["status"] == "consistent" and best and best[0].startswith(ENGINE_LAW_MARK):
        key = best[0].split("/", 1)[1]
        # the law, or the mixture, at its maximum-likelihood shares (a contamination share at most EPS_GRID's largest,
        # as ranked), each set on its own rows; Bonferroni over the sets
        checks = [_fit_at_mle(_components(key, laws, tl, grid, bool(pre.get("contamination"))), tokens, weights,
                              max_last=1.0 if key in grid else max(EPS_GRID))
                  for laws, tl, tokens, weights, grid in fits]
        checks = [(p, w, grid.get(key)) for (p, w), (*_, grid) in zip(checks, fits) if p is not None]
        fit_p = min(1.0, min(p for p, _, _ in checks) * len(checks)) if checks else None
    d = decide(total, bias_detected=bias_detected, fit_pvalue=fit_p, alpha=ranking_alpha(engine))
    if any("target" in w for _, w, _ in checks):  # the target's share at the fitted shares, not at the grid point
        d["contamination_grid"] = d["contamination"]
        d["contamination"] = max(w.get("target", 0.0) for _, w, _ in checks)
        d["sentence"] = sentence(d)
    out["decision"], out["fit_pvalue"] = d, fit_p
    if checks and all(g is not None for *_, g in checks):  # a checked mixture: its fitted shares per sample set
        out["weights"] = [w for _, w, _ in checks]
        out["grid_weights"] = [g for *_, g in checks]  # the best point of the ranking's grid (WEIGHT_STEP)
    # named only when an engine law leads the class (its own fit was checked); a family hypothesis first: not named here
    lead = (d.get("best") or [""])[0]
    engine_best = [n for n in (d.get("best") or []) if n.startswith(ENGINE_LAW_MARK)] if lead.startswith(ENGINE_LAW_MARK) else []
    if d["status"] == "consistent" and engine_best:
        out["named"] = engine_best
        out["sentence"] = (f"{_tokens(J)} {d['sentence']}, a law {engine}'s source predicts (goodness of fit "
                           f"p = {fit_p:.2g} >= {FIT_ALPHA:g})" if fit_p is not None else
                           f"{_tokens(J)} {d['sentence']}, a law {engine}'s source predicts")
        if out.get("weights"):  # a mixture: which of its laws the rows came from (maximum-likelihood shares)
            out["sentence"] += "; fitted shares: " + " | ".join(
                ", ".join(f"{c} {v:.3f}" for c, v in w.items() if v >= SHOWN_SHARE) for w in out["weights"])
    elif d["status"] == "consistent":  # a family hypothesis leads on J tokens: its own fit is not checked here
        out["sentence"] = (f"no law {engine}'s source predicts is preferred on {_tokens(J)} (the best there, {lead}, "
                           "is a family hypothesis, whose own law the whole-row diagnosis checks)")
    else:
        out["sentence"] = (f"no law {engine}'s source predicts is preferred on {_tokens(J)} "
                           f"({d['sentence']})")
    left_out = list(dict.fromkeys(f"{n['set']}: {n['note']}" for n in notes if n.get("note") and n["set"] != "all"))
    if left_out:  # what the scored laws could not test (or the sets they were not scored on)
        out["sentence"] += "; not tested: " + "; ".join(left_out)
    return out


def _tokens(J: int) -> str:
    """'token 1' or 'tokens 1-J'."""
    return "token 1" if J == 1 else f"tokens 1-{J}"


def law_entry(engine: str, name: str) -> dict[str, str]:
    """Glossary-like entry of an engine law (report.json ``mechanism``): what the source does, how to reproduce."""
    module = engine_module(engine)
    key = name.split("/", 1)[1] if "/" in name else name
    from verifier.engines.reproductions import SCORERS

    where = (f"python -m verifier.diagnose.reproduce {engine} RUN_DIR" if engine in SCORERS
             else "specverify diagnose RUN_DIR (the engine laws of verifier.engines.reproductions.LAWS)")
    pointer = (getattr(module, "LAW_POINTERS", {}).get(key) or getattr(module, "LAW_POINTER", "")) if module else ""
    return {"name": name, "plain": module.LAW_SOURCE.get(key, "") if module else "", "reproduce": where,
            "pointer": pointer}
