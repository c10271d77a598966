"""Exact stage: rational enumeration of speculative sampling and the verification-rule zoo.

Everything is :class:`fractions.Fraction`; see docs/ARCHITECTURE.md ("Exact stage") for the
contract and :mod:`verifier.exact.rules` for the rules and where exp() is handled.
"""

from verifier.exact.rules import RULES, Rule, get_rule, residual  # first: RULES is complete before any other module
from verifier.exact.field_rules import FIELD_RULES

RULES.update(FIELD_RULES)  # the field-reported rules (issue 26) build on rules.py: registered here, no import circle
# isort: split
from verifier.exact.batch import batch_level_law, corrupted_share, leaked_prompt, mixed_prompts_level_law, slot_law
from verifier.exact.counterexample import Counterexample, find_counterexample
from verifier.exact.cases import ExactCase, TabularPair, standard_cases, standard_tabular_pairs, unigram_case
from verifier.exact.logprob import LogprobDefectLaw, logprob_defect_law
from verifier.exact.laws import accepted_count_law, marginal, n_token_law, round_law, target_law, total_variation
from verifier.exact.penalties import PENALTY_RULES, penalty_n_token_law, penalty_target_law
from verifier.exact.stage import ExactFinding, RuleVerdict, rule_verdicts, run_exact_stage
from verifier.exact.step import StepLaw, step_law
from verifier.exact.stop import stop_position_law, stop_position_of, stop_violation_prob
from verifier.exact.tabular import TabularLM, as_fraction_probs
from verifier.exact.vocab import MappedDraft, VOCAB_MODES, map_draft, vocab_n_token_law, vocab_round_law, vocab_view

__all__ = [
    "ExactCase",
    "ExactFinding",
    "PENALTY_RULES",
    "RULES",
    "Rule",
    "RuleVerdict",
    "StepLaw",
    "TabularLM",
    "TabularPair",
    "LogprobDefectLaw",
    "accepted_count_law",
    "batch_level_law",
    "leaked_prompt",
    "mixed_prompts_level_law",
    "corrupted_share",
    "as_fraction_probs",
    "find_counterexample",
    "Counterexample",
    "get_rule",
    "logprob_defect_law",
    "marginal",
    "n_token_law",
    "penalty_n_token_law",
    "penalty_target_law",
    "residual",
    "round_law",
    "rule_verdicts",
    "run_exact_stage",
    "slot_law",
    "standard_cases",
    "standard_tabular_pairs",
    "step_law",
    "stop_position_law",
    "stop_position_of",
    "stop_violation_prob",
    "target_law",
    "total_variation",
    "unigram_case",
    "MappedDraft",
    "VOCAB_MODES",
    "map_draft",
    "vocab_n_token_law",
    "vocab_round_law",
    "vocab_view",
]

