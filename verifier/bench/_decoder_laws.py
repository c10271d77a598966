"""Exact emitted-token laws of decoder-level mutants on a suite's tabular sample sets.

A decoder mutant of :data:`verifier.decoders.DECODER_REGISTRY` on a tabular pair under a sampling
config has an exactly known law when its defect is one verification rule of
:data:`verifier.exact.RULES` applied to the *processed* tables (:data:`DECODER_RULES`), or one of
two processing mix-ups built here:

``target_unprocessed``  the canonical rule with the raw target table (verification and bonus at
                        default params) and the processed draft: its output law is the raw
                        target's law, compared against the processed target's.
``draft_raw_q``         draft tokens drawn from the processed draft, but the acceptance ratio and
                        residual computed with the raw draft row: the canonical rule with
                        ``propose`` mapping each raw row to its processed row.

``kv_not_rolled_back`` and ``batch_cross_talk`` have no exact law here (the enumerator models no
cache and no batch); ``specverify bench time-to-verdict`` shows the suite detects them end to end.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["DECODER_RULES", "NO_EXACT_LAW", "DecoderLawCase", "suite_decoder_cases"]

DECODER_RULES = {  # decoder mutant -> the exact rule it implements on the processed tables
    "full_p_fallback": "full_p_fallback",
    "greedy_draft_softmax_q": "greedy_draft",
    "bonus_wrong_position": "bonus_wrong_position",
    "draft_suffix_kept": "draft_suffix_kept",
    "greedy_acceptance": "greedy_acceptance",
    "deterministic_acceptance": "deterministic_acceptance",
    "typical_acceptance": "typical_acceptance",
}
INVISIBLE_TV = 1e-12  # processed tables are float64 rows made exact: T=1 "processing" moves a law by ~1e-17
NO_EXACT_LAW = {
    "kv_not_rolled_back": "no cache in the exact enumerator",
    "batch_cross_talk": "depends on the batch composition, not one row's law",
    "degenerate_residual_div0": "needs float64 rounding, not a rational law",
}


@dataclass
class DecoderLawCase:
    """One (decoder mutant, sample set) with the target law and the mutant's exact law."""

    decoder: str
    set_label: str
    target_law: dict
    law: dict | None
    target: Any  # processed target TabularLM (for the PIT's conditional probs)
    prefix: tuple[int, ...]
    num_draft_tokens: int
    num_tokens: int
    tests: tuple[str, ...]
    gof_positions: tuple[int, ...]
    joint_tokens: int
    note: str = ""


def _raw_q_rule(raw_draft, proc_draft):
    from verifier.exact import get_rule

    lookup: dict = {}
    for ctx in raw_draft.contexts:
        raw, proc = tuple(raw_draft.probs(ctx)), tuple(proc_draft.probs(ctx))
        if lookup.setdefault(raw, proc) != proc:
            return None  # two contexts share a raw row but not a processed one: not expressible this way
    return dataclasses.replace(get_rule("canonical"), name="draft_raw_q", declared="biased",
                               description="draft sampled from processed q, ratio/residual with raw q",
                               propose=lambda q: lookup[tuple(q)])


def suite_decoder_cases(suite_path: str, profile: str | None = None) -> list[DecoderLawCase]:
    """Every ``detect`` decoder x sample set of a suite on a tabular pair, with exact laws where known."""
    from verifier.exact import TabularLM, n_token_law, target_law, total_variation
    from verifier.runner.context import SuiteContext as _Context
    from verifier.suite import load_suite
    from verifier.bench._tabular import processed_tabular

    suite = load_suite(suite_path, profile)
    ctx = _Context(suite)
    out = []
    for plan in ctx.plans:
        spec = plan.decoder
        if spec.expect != "detect":
            continue
        pair = ctx.pairs[plan.pair]
        if not (isinstance(pair.target_model, TabularLM) and isinstance(pair.draft_model, TabularLM)):
            out.append(DecoderLawCase(spec.name, f"{plan.prompt} | {plan.sampling_name} | k={plan.num_draft_tokens}", {},
                                      None, None, tuple(plan.prompt_ids), plan.num_draft_tokens, plan.max_new_tokens,
                                      tuple(spec.tests), tuple(spec.gof_positions), spec.joint_tokens,
                                      f"model pair {plan.pair!r} is a transformer: its exact law is not enumerable"))
            continue
        t_raw, d_raw = pair.target_model, pair.draft_model
        t, d = processed_tabular(t_raw, plan.sampling), processed_tabular(d_raw, plan.sampling)
        prefix, k, n = tuple(plan.prompt_ids), plan.num_draft_tokens, plan.max_new_tokens
        tlaw = target_law(t, prefix, n)
        name = spec.decoder
        law, note = None, ""
        if name in DECODER_RULES:
            law = n_token_law(t, d, prefix, k, n, DECODER_RULES[name])
        elif name == "target_unprocessed":
            law = n_token_law(t_raw, d, prefix, k, n, "canonical")
        elif name == "draft_raw_q":
            rule = _raw_q_rule(d_raw, d)
            law = n_token_law(t, d_raw, prefix, k, n, rule) if rule is not None else None
            note = "" if rule is not None else "raw draft rows collide"
        else:
            note = NO_EXACT_LAW.get(name, "no exact law known for this decoder")
        if law is not None and total_variation(law, tlaw) < INVISIBLE_TV:
            note, law = "exact law equals the target's in this sample set (invisible here)", None
        out.append(DecoderLawCase(spec.name, f"{plan.prompt} | {plan.sampling_name} | k={k}", tlaw, law, t, prefix, k, n,
                                  tuple(spec.tests), tuple(spec.gof_positions), spec.joint_tokens, note))
    return out
