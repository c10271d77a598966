"""``specverify bench calibration``: family-wise false-alarm rate of a suite's statistics under the null.

Method.  For every ``pass`` decoder of the suite (default ``suites/ci.toml``) and each of its
sample sets on a tabular model pair, the joint law of (first ``max_new_tokens`` emitted tokens,
drafts accepted in the first round) of the decoder's rule on the *processed* tables is enumerated
exactly (:mod:`verifier.bench._tabular`; the canonical rule, or the registered lossless rule of
``fresh_target_match`` / ``block_verification``) -- a correct decoder samples exactly this.  Each null run
draws the sample set's ``samples`` rows from it (multinomial counts over the joint outcomes, so the
cells keep their dependence: tokens and accepted counts come from the same rows) and computes
the runner's cells:

* ``gof@t`` / ``joint@1..J`` / ``accepted`` (only where a decoder declares ``acceptance =
  "canonical"``: acceptance rule conformance, the runner's own family of one at the suite's alpha --
  counted here in the decoder's family, which is conservative): pooled Pearson chi-square with
  :func:`verifier.stats.gof_test`'s ``"auto"`` p-values at the runner's per-cell level, small-sample
  regime included (:func:`verifier.stats.gof.gof_pvalues_from_codes`; its Monte Carlo null
  sample is the very one the runner draws for that law and n, so the rate is that of the suite as
  it runs).  Where the runner's 10-floor test could also switch to Monte Carlo -- per-cell level
  below 1e-4 -- every p-value under 0.05 is recomputed with :func:`verifier.stats.gof_test`;
* ``surprisal@1..J``: summed surprisal of the first J tokens (:mod:`verifier.stats.surprisal`);
* ``pit``: randomized PIT of every emitted token against the target's conditional probs, KS.

On a transformer pair (e.g. the shipped models) the law of the first ``joint_tokens`` tokens comes
from the runner's own float64 prefix enumeration instead, the PIT values after them are drawn iid
Uniform(0, 1) (their law under the null) and the accepted count independently from its law
(:class:`FloatSet`).

The decoder's family rejects under the runner's gate (Holm alpha/2 + Cauchy alpha/2 over all its
cells, :func:`verifier.bench._battery.family_rejects`, equal to ``verifier.stats.adjust``'s
decision).  The false-alarm rate over ``--runs`` runs gets a Clopper–Pearson interval
(``scipy.stats.binomtest(...).proportion_ci(method="exact")``); the goal is a rate <= the suite's alpha.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from verifier.bench._battery import TupleLaw, family_rejects, ks_uniform_pvalues, BatterySpec
from verifier.bench._common import md_table
from verifier.errors import ConfigError, invalid_argument
from verifier.stats.surprisal import surprisal_pvalues, surprisal_pvalues_from_codes

__all__ = ["HELP", "SimulatedSet", "FloatSet", "CalibrationResult", "suite_null_sets", "simulate_null_pvalues", "calibrate",
           "register", "run", "render_markdown"]

HELP = "Family-wise false-alarm rate of a suite's statistics over simulated null runs (Clopper-Pearson CI)."
DEFAULT_RUNS = 2000
DEFAULT_SUITE = "suites/ci.toml"
CONFIDENCE = 0.95
MC_RECHECK_BELOW = 0.05  # asymptotic p-values below this are recomputed the runner's way (Monte Carlo)
_RUN_CHUNK = 250  # runs whose PIT values are materialised at once


@dataclass
class SimulatedSet:
    """One sample set with its exact null law and the runner's cells."""

    label: str
    samples: int
    tuple_law: TupleLaw
    joint_outcome: np.ndarray  # (J,) index into tuple_law.outcomes of each joint (tokens, accepted) outcome
    joint_accepted: np.ndarray  # (J,) accepted count of each joint outcome
    joint_probs: np.ndarray  # (J,) null probs
    count_cells: list  # (name, code over tuple outcomes, expected probs)
    surprisal: tuple | None  # (window code over tuple outcomes, window law) of the surprisal cell
    pit: bool
    accepted_expected: np.ndarray | None
    cells: tuple[str, ...]


@dataclass
class FloatSet:
    """A sample set on a transformer pair: float64 laws of the first J tokens from the runner's own
    prefix enumeration (:func:`verifier.runner.expected.position_laws`).

    Null rows are drawn from the joint law of the first J tokens; their gof/joint cells and their
    PIT values at positions 1..J follow from it exactly.  At positions J+1..max_new_tokens the
    randomized PIT values of a correct decoder are iid Uniform(0, 1) whatever came before (that is
    what makes the PIT valid), so they are drawn as such for every row not ended by position J
    (exact when max_new_tokens <= J + 1; beyond, rows that end after J are counted as live -- the
    number of u's, not their law, is then approximate).  The accepted count is drawn from its own
    law, independently of the tokens (its dependence on them is not known without enumerating the
    draft too).
    """

    label: str
    samples: int
    vocab: int
    joint_tokens: int
    joint: np.ndarray  # (V + 1) ** J, flattened, last index of each axis = ended
    gof_positions: tuple[int, ...]
    joint_cell: bool
    surprisal: bool
    pit: bool
    pit_lo: np.ndarray  # (J, codes) mass ranked before the emitted token, NaN when ended
    pit_width: np.ndarray  # (J, codes)
    alive_after_j: np.ndarray  # (codes,) bool: row not ended within the first J tokens
    extra_positions: int  # positions after J
    accepted_expected: np.ndarray | None
    cells: tuple[str, ...]


def _float_set(label: str, plan, spec, pair) -> FloatSet:
    from verifier.runner import expected

    vocab, eos = pair.vocab_size, pair.eos_token_id
    n_tok = plan.max_new_tokens
    j = spec.joint_tokens if "joint" in spec.tests and n_tok >= spec.joint_tokens else 0
    positions = tuple(t for t in spec.gof_positions if t <= n_tok) if "gof" in spec.tests else ()
    sw = min(spec.joint_tokens, n_tok) if "surprisal" in spec.tests else 0  # the runner's surprisal window
    depth = max([j, sw, *positions, 1])
    if sw and sw != depth:
        raise ConfigError(f"{label}: surprisal window {sw} < depth {depth} of the simulated law; allowed for a transformer "
                          "pair: gof positions <= joint_tokens")
    if positions and max(positions) > max(j, 1) or (not j and positions and max(positions) > 1):
        raise ConfigError(f"{label}: gof positions {positions} beyond joint_tokens={j}; allowed for a transformer "
                          "pair: gof positions <= joint_tokens (the simulation draws the first J tokens jointly)")
    laws = expected.position_laws(pair.reference, tuple(plan.prompt_ids), plan.sampling, depth, depth if depth >= 2 else 0)
    joint = laws.joint if depth >= 2 else laws.marginals[1]
    joint = np.clip(joint, 0, None) / np.clip(joint, 0, None).sum()
    base = vocab + 1
    shape = (base,) * depth
    cube = joint.reshape(shape)
    codes = np.arange(joint.size)
    digits = np.stack(np.unravel_index(codes, shape))  # (depth, codes)
    lo = np.full((depth, joint.size), np.nan)
    width = np.full((depth, joint.size), np.nan)
    alive = np.ones(joint.size, dtype=bool)
    for t in range(depth):
        prefix_mass = cube.sum(axis=tuple(range(t + 1, depth))) if t + 1 < depth else cube  # law of tokens 1..t+1
        flat = prefix_mass.reshape(-1, base)[:, :vocab]  # (prefixes, vocab): P(prefix, x)
        tot = flat.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            cond = flat / tot
        order = np.argsort(-cond, axis=1, kind="stable")  # prob descending, ties by id
        ranked = np.take_along_axis(cond, order, axis=1)
        before = np.zeros_like(cond)
        np.put_along_axis(before, order, np.cumsum(ranked, axis=1) - ranked, axis=1)
        pre = np.ravel_multi_index(digits[:t], shape[:t]) if t else np.zeros(joint.size, dtype=np.int64)
        x = digits[t]
        live = alive & (x < vocab)
        lo[t, live] = before[pre[live], x[live]]
        width[t, live] = cond[pre[live], x[live]]
        alive = live & ((x != eos) if eos is not None else True)
    acc = None
    names = ([f"gof@{t}" for t in positions] + ([f"joint@1..{j}"] if j else []) + ([f"surprisal@1..{sw}"] if sw else [])
             + (["pit"] if "pit" in spec.tests else []))
    if _conformance_cell(spec) and n_tok >= plan.num_draft_tokens + 1:
        acc = expected.accepted_count_law(pair.reference, pair.draft_reference, tuple(plan.prompt_ids), plan.sampling,
                                          plan.num_draft_tokens)
        names.append("accepted")
    return FloatSet(label, plan.samples, vocab, depth, joint, positions, bool(j), bool(sw), "pit" in spec.tests, lo, width,
                    alive, n_tok - depth, acc, tuple(names))


def _simulate_float(s: FloatSet, runs: int, rng: np.random.Generator, cell_alpha: float) -> np.ndarray:
    base = s.vocab + 1
    shape = (base,) * s.joint_tokens
    cols: dict[str, list[np.ndarray]] = {c: [] for c in s.cells}
    chunk = max(1, 2_000_000 // s.samples)
    for start in range(0, runs, chunk):
        r = min(chunk, runs - start)
        codes = rng.choice(s.joint.size, size=(r, s.samples), p=s.joint)
        digits = np.unravel_index(codes, shape)
        for t in s.gof_positions:
            marg = s.joint.reshape(shape).sum(axis=tuple(a for a in range(s.joint_tokens) if a != t - 1))
            cols[f"gof@{t}"].append(_pooled_gof(digits[t - 1], marg, cell_alpha, rng))
        if s.joint_cell:
            cols[f"joint@1..{s.joint_tokens}"].append(_pooled_gof(codes, s.joint, cell_alpha, rng))
        if s.surprisal:
            cols[f"surprisal@1..{s.joint_tokens}"].append(surprisal_pvalues_from_codes(codes, s.joint, alpha=cell_alpha)[0])
        if s.pit:
            u = s.pit_lo[:, codes] + rng.random((s.joint_tokens,) + codes.shape) * s.pit_width[:, codes]  # (J, r, n)
            parts = [u.transpose(1, 2, 0).reshape(r, -1)]
            if s.extra_positions:
                extra = rng.random((r, s.samples, s.extra_positions))
                extra[~s.alive_after_j[codes]] = np.nan
                parts.append(extra.reshape(r, -1))
            cols["pit"].append(ks_uniform_pvalues(np.concatenate(parts, axis=1)))
        if s.accepted_expected is not None:
            acc = rng.multinomial(s.samples, s.accepted_expected / s.accepted_expected.sum(), size=r)
            cols["accepted"].append(_gof_pvalues_runner(acc, s.accepted_expected, cell_alpha, rng))
    return np.column_stack([np.concatenate(cols[c]) for c in s.cells])


def _conformance_cell(spec) -> bool:
    """The runner's cells include the accepted-count law only as acceptance rule conformance, where
    the decoder declares ``acceptance = "canonical"`` (:mod:`verifier.runner.acceptance`)."""
    return "accepted" in spec.tests and getattr(spec, "acceptance", "any") == "canonical"


def _null_rule(spec) -> str:
    """The exact rule a ``pass`` decoder samples by: its own for a registered lossless decoder
    (``fresh_target_match``, ``block_verification``: same token law, other accepted counts), else canonical."""
    from verifier.exact import RULES

    rule = RULES.get(spec.decoder)
    return spec.decoder if rule is not None and rule.declared == "exact" and spec.acceptance != "canonical" else "canonical"


_MODELLED_TESTS = {"gof", "joint", "surprisal", "pit", "accepted"}  # the cells this simulation computes


def _not_modelled(spec, plans, pairs) -> str | None:
    """Why a ``pass`` decoder's null is not simulated here (None: it is): its family holds cells this bench does not
    compute, its processing depends on the emitted prefix, its rule or model pair has no exact table law."""
    from verifier.exact import RULES, TabularLM

    other = sorted(set(spec.tests) - _MODELLED_TESTS)
    if other:
        return f"cells not simulated here ({', '.join(other)}): the family's size and level would be misstated"
    if any(getattr(p.sampling, f, None) not in (None, 0, 0.0, 1.0 if f == "repetition_penalty" else None)
           for p in plans for f in ("repetition_penalty", "presence_penalty", "frequency_penalty", "min_p")):
        return "penalties / min-p: the processed law depends on the emitted prefix (verifier.exact.penalties), not a table"
    if spec.decoder != "reference" and spec.decoder not in RULES:
        return f"decoder {spec.decoder!r} samples by no rule of verifier.exact.RULES"
    for p in plans:
        pair = pairs[p.pair]
        tabular = isinstance(pair.target_model, TabularLM) and isinstance(pair.draft_model, TabularLM)
        if not tabular and getattr(pair, "reference", None) is None:
            return "its model pair is neither tabular nor a transformer with a float64 reference"
    return None


def suite_null_sets(suite_path: str, profile: str | None = None,
                    skipped: dict[str, str] | None = None) -> tuple[Any, dict[str, list]]:
    """The ``pass`` decoders of a suite and their sample sets with null laws: exact
    (:class:`SimulatedSet`) on tabular pairs, the runner's float64 laws (:class:`FloatSet`) otherwise.
    A ``pass`` decoder whose null this bench cannot simulate (:func:`_not_modelled`) is left out, its reason put in
    ``skipped`` (name -> reason) when given.

    Raises
    ------
    ConfigError
        The suite cannot be loaded, or a transformer sample set has gof positions beyond its joint_tokens.
    """
    from verifier.exact import TabularLM
    from verifier.runner.context import SuiteContext as _Context
    from verifier.suite import load_suite
    from verifier.bench._tabular import marginal_tokens, processed_tabular, tokens_and_accepted_law

    suite = load_suite(suite_path, profile)
    ctx = _Context(suite)
    out: dict[str, list[SimulatedSet]] = {}
    for spec in suite.decoders:
        if spec.expect != "pass":
            continue
        why = _not_modelled(spec, [p for p in ctx.plans if p.decoder.name == spec.name], ctx.pairs)
        if why is not None:
            if skipped is not None:
                skipped[spec.name] = why
            continue
        sets = []
        for plan in (p for p in ctx.plans if p.decoder.name == spec.name):
            pair = ctx.pairs[plan.pair]
            if not (isinstance(pair.target_model, TabularLM) and isinstance(pair.draft_model, TabularLM)):
                sets.append(_float_set(f"{spec.name} | {plan.prompt} | {plan.sampling_name} | k={plan.num_draft_tokens}",
                                       plan, spec, pair))
                continue
            target = processed_tabular(pair.target_model, plan.sampling)
            draft = processed_tabular(pair.draft_model, plan.sampling)
            n_tok, k = plan.max_new_tokens, plan.num_draft_tokens
            joint = tokens_and_accepted_law(target, draft, tuple(plan.prompt_ids), k, n_tok, _null_rule(spec))
            tlaw = marginal_tokens(joint)
            tl = TupleLaw(tlaw, lambda pre, t=target, pr=tuple(plan.prompt_ids): t.probs(pr + tuple(pre)), target.vocab_size)
            keys = sorted(joint)
            jt = spec.joint_tokens if "joint" in spec.tests and n_tok >= spec.joint_tokens else 0
            bspec = BatterySpec(gof_positions=tuple(t for t in spec.gof_positions if t <= n_tok) if "gof" in spec.tests else (),
                                joint_tokens=jt, pit="pit" in spec.tests)
            cells = tl.cell_codes(bspec)
            sw = min(spec.joint_tokens, n_tok) if "surprisal" in spec.tests else 0
            acc_expected = None
            names = [c[0] for c in cells] + ([f"surprisal@1..{sw}"] if sw else []) + (["pit"] if bspec.pit else [])
            if _conformance_cell(spec) and n_tok >= k + 1:
                acc_expected = np.zeros(k + 1)
                for (tokens, a), p in joint.items():
                    acc_expected[min(a, k)] += float(p)
                names.append("accepted")
            sets.append(SimulatedSet(
                label=f"{spec.name} | {plan.prompt} | {plan.sampling_name} | k={k}", samples=plan.samples, tuple_law=tl,
                joint_outcome=np.array([tl.index[t] for t, _ in keys]), joint_accepted=np.array([a for _, a in keys]),
                joint_probs=np.array([float(joint[key]) for key in keys]), count_cells=cells,
                surprisal=tl.window(sw) if sw else None, pit=bspec.pit,
                accepted_expected=acc_expected, cells=tuple(names)))
        out[spec.name] = sets
    return suite, out


def _gof_pvalues_runner(counts: np.ndarray, expected: np.ndarray, cell_alpha: float, rng: np.random.Generator) -> np.ndarray:
    from verifier.stats import gof_pvalues

    return _recheck(gof_pvalues(counts, expected, pvalue_method="auto", alpha=cell_alpha), lambda i: counts[i], expected,
                    cell_alpha, rng)


def _recheck(p: np.ndarray, counts_of, expected: np.ndarray, cell_alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Where ``gof_test`` ("auto") could differ from the vectorised p-value -- its 10-floor test
    switches to Monte Carlo near per-cell levels below 1e-4 -- recompute it the runner's way."""
    from verifier.stats.gof import ASYMPTOTIC_MIN_ALPHA, gof_test

    if cell_alpha < ASYMPTOTIC_MIN_ALPHA:
        for i in np.flatnonzero(p < MC_RECHECK_BELOW):
            p[i] = gof_test(counts_of(i), expected, alpha=cell_alpha, rng=rng, num_bootstrap=0).pvalue
    return p


def _pooled_gof(codes: np.ndarray, expected: np.ndarray, cell_alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Per run (row of ``codes``, shape (runs, n), category ids) the runner's GOF p-value, counting
    per pooled category only (data-blind pooling, so that changes nothing) to keep big cells cheap."""
    from verifier.stats.gof import gof_pvalues_from_codes

    p = gof_pvalues_from_codes(codes, expected, pvalue_method="auto", alpha=cell_alpha)
    return _recheck(p, lambda i: np.bincount(codes[i], minlength=expected.size), expected, cell_alpha, rng)


def simulate_null_pvalues(sset, runs: int, rng: np.random.Generator, cell_alpha: float) -> np.ndarray:
    """p-values of the set's cells over ``runs`` null runs, shape (runs, cells)."""
    if isinstance(sset, FloatSet):
        return _simulate_float(sset, runs, rng, cell_alpha)
    tl = sset.tuple_law
    joint_counts = rng.multinomial(sset.samples, sset.joint_probs, size=runs)  # (R, J)
    tuple_counts = np.zeros((runs, len(tl.outcomes)), dtype=np.int64)
    np.add.at(tuple_counts.T, sset.joint_outcome, joint_counts.T)
    cols = []
    for _, code, expected in sset.count_cells:
        cc = np.zeros((runs, expected.size), dtype=np.int64)
        np.add.at(cc.T, code, tuple_counts.T)
        cols.append(_gof_pvalues_runner(cc, expected, cell_alpha, rng))
    if sset.surprisal is not None:
        code, law = sset.surprisal
        sc = np.zeros((runs, law.size), dtype=np.int64)
        np.add.at(sc.T, code, tuple_counts.T)
        cols.append(surprisal_pvalues(sc, law, alpha=cell_alpha)[0])
    if sset.pit:
        pit = np.empty(runs)
        for s in range(0, runs, _RUN_CHUNK):
            block = tuple_counts[s:s + _RUN_CHUNK]
            rows = [np.repeat(np.arange(len(tl.outcomes)), c) for c in block]  # each run's rows, by outcome
            ids = np.stack(rows)  # (chunk, samples)
            v = rng.random(ids.shape + (tl.num_tokens,))
            u = tl.pit_lo[ids] + v * tl.pit_width[ids]
            pit[s:s + _RUN_CHUNK] = ks_uniform_pvalues(u.reshape(len(block), -1))
        cols.append(pit)
    if sset.accepted_expected is not None:
        k = sset.accepted_expected.size - 1
        acc = np.zeros((runs, k + 1), dtype=np.int64)
        np.add.at(acc.T, np.minimum(sset.joint_accepted, k), joint_counts.T)
        cols.append(_gof_pvalues_runner(acc, sset.accepted_expected, cell_alpha, rng))
    return np.column_stack(cols)


@dataclass
class CalibrationResult:
    """False alarms of one ``pass`` decoder over simulated null runs."""

    decoder: str
    runs: int
    false_alarms: int
    alpha: float
    ci_low: float
    ci_high: float
    num_cells: int
    sets: list[str]
    per_cell_rejections: dict[str, int]
    seconds: float

    @property
    def rate(self) -> float:
        return self.false_alarms / self.runs

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["rate"] = self.rate
        return d


def calibrate(suite_path: str = DEFAULT_SUITE, runs: int = DEFAULT_RUNS, seed: int = 0, profile: str | None = None,
              alpha: float | None = None, decoders: list[str] | None = None,
              skipped: dict[str, str] | None = None) -> list[CalibrationResult]:
    """Simulate ``runs`` null runs of every ``pass`` decoder of the suite; count family-wise false alarms.

    Parameters
    ----------
    suite_path : str, default "suites/ci.toml"
    runs : int, default 2000
    seed : int, default 0
    profile : str, optional
        Suite profile (default: the suite's own default).
    alpha : float, optional
        Family-wise level; default the suite's ``stats.alpha``.
    decoders : list of str, optional
        Only these ``pass`` decoders (each keeps the random stream it has in a full run).
    skipped : dict, optional
        Receives the ``pass`` decoders whose null is not simulated here, with the reason (:func:`suite_null_sets`).

    Raises
    ------
    InvalidArgumentError
        runs < 1, alpha outside (0, 1), or a name in ``decoders`` that is no ``pass`` decoder of the suite.
    ConfigError
        See :func:`suite_null_sets`; also a suite whose correction is not ``gate``.
    """
    from verifier.runner.verdict import cell_level

    if not (isinstance(runs, int) and runs >= 1):
        raise invalid_argument("runs", runs, "an integer >= 1")
    suite, sets_by_decoder = suite_null_sets(suite_path, profile, skipped)
    if suite.stats.correction != "gate":
        raise ConfigError(f"{suite_path}: stats.correction={suite.stats.correction!r}; allowed: 'gate' (FWER calibration)")
    level = suite.stats.alpha if alpha is None else alpha
    if not 0 < level < 1:
        raise invalid_argument("alpha", alpha, "a number in (0, 1)")
    unknown = sorted(set(decoders or ()) - set(sets_by_decoder))
    if unknown:
        raise invalid_argument("decoders", unknown[0], f"a pass decoder of the suite: {sorted(sets_by_decoder)}")
    results = []
    for d, (name, sets) in enumerate(sets_by_decoder.items()):
        if decoders and name not in decoders:
            continue
        t0 = time.perf_counter()
        rng = np.random.default_rng([seed, d])
        m = sum(len(s.cells) for s in sets)
        cell_alpha = cell_level(level, m, "gate")
        blocks = [simulate_null_pvalues(s, runs, rng, cell_alpha) for s in sets]
        pv = np.column_stack(blocks)
        rejected = family_rejects(pv, level)
        holm_cell = pv <= level / (2 * m)
        names = [f"{s.label} / {c}" for s in sets for c in s.cells]
        k = int(rejected.sum())
        ci = stats.binomtest(k, runs).proportion_ci(confidence_level=CONFIDENCE, method="exact")
        results.append(CalibrationResult(name, runs, k, level, float(ci.low), float(ci.high), m, [s.label for s in sets],
                                         {n: int(c) for n, c in zip(names, holm_cell.sum(axis=0)) if c},
                                         time.perf_counter() - t0))
    return results


def render_markdown(results: list[CalibrationResult]) -> str:
    rows = [[r.decoder, r.num_cells, r.runs, r.false_alarms, f"{r.rate:.2e}",
             f"[{r.ci_low:.2e}, {r.ci_high:.2e}]", f"{r.alpha:g}",
             "yes" if r.rate <= r.alpha else "**no**", "yes" if r.ci_high <= r.alpha else "not shown at this many runs"]
            for r in results]
    return md_table(["pass decoder", "cells", "null runs", "false alarms", "rate", f"{CONFIDENCE:.0%} Clopper-Pearson",
                     "suite alpha", "rate <= alpha", "CI upper <= alpha"], rows) + "\n"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", default=DEFAULT_SUITE, metavar="PATH", help=f"Suite file. Default: {DEFAULT_SUITE}.")
    parser.add_argument("--profile", default=None, help="Suite profile. Default: the suite's default_profile.")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, metavar="N", help=f"Null runs. Default: {DEFAULT_RUNS}.")
    parser.add_argument("--alpha", type=float, default=None, help="Family-wise alpha. Default: the suite's stats.alpha.")
    parser.add_argument("--seed", type=int, default=0, help="Seed. Default: 0.")
    parser.add_argument("--decoder", action="append", default=None, metavar="NAME",
                        help="Only this pass decoder (repeatable; same random stream as in a full run). Default: all.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    skipped: dict[str, str] = {}
    results = calibrate(args.suite, args.runs, args.seed, args.profile, args.alpha, args.decoder, skipped)
    if args.format == "json":
        print(json.dumps([r.to_json() for r in results], indent=1))
    else:
        print(render_markdown(results))
        for name, why in skipped.items():
            print(f"- not calibrated here: `{name}`: {why}")
        print(f"_{time.perf_counter() - t0:.0f} s_", file=sys.stderr)
    return 0
