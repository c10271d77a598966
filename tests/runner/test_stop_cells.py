"""The ``stop`` test: ``stop-rule`` and ``stop-position@1..L`` (``verifier.runner.stop``; issue 29, bug kind 5).

Suite ``suites/stop.toml``: bigram4_eos target and draft, prompt (0,), T = 1, stop token 2 (EOS is 3), max_tokens 6
in rows of 8 columns, k = 3, 800 rows per set in calls of 200, seed 5, family-wise alpha 1e-3 (gate: per-cell level
2.5e-4).  The reference's false-fail rate is <= 1e-3 (the stop-rule cell never rejects it: no correct row violates).

* ``stop_mid_block``: 246 of 800 rows run on past an accepted stop token -> stop-rule BIAS; the stopping position
  keeps its law (exactly: the mutant's tokens up to the stop are the reference's), so stop-position passes.
* ``max_tokens_overshoot``: 7 of 800 rows carry the tail of a block past max_tokens -> stop-rule BIAS; stop-position
  passes.  The stop-rule cell's MDE at n = 800 and power 0.99 is a violating-row rate of 0.0057.
* ``deterministic_acceptance`` (accept iff p >= q) keeps the stop rule but moves the stopping law by TV 0.192
  (exact, tests/exact/test_stop_law.py) -> stop-position BIAS (MDE 0.123 TV at n = 800), stop-rule passes.

Calibration of the stopping-position cell alone (numpy, no decoder): 200 seeded sets of 300 iid stopping positions
drawn from the exact law, through ``stop_position_cell`` at cell alpha 0.05, reject at most 21 times (the 0.999
quantile of Binomial(200, 0.05)).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from verifier.cli import main
from verifier.errors import EXIT_OK, EXIT_USAGE, ConfigError, DecoderOutputError
from verifier.exact import standard_tabular_pairs, stop_position_law
from verifier.runner.models import load_pair
from verifier.runner.stop import StopLaw, stop_ends, stop_position_cell, stop_position_law as runner_stop_law, \
    stop_rule_cell, stop_violations
from verifier.sampling import SamplingConfig
from verifier.suite.schema import DEFAULT_TESTS, TEST_NAMES, ModelPair, parse_suite
from verifier.validation import check_emitted_tokens

SUITE = Path(__file__).parent / "suites" / "stop.toml"
ENDS = np.array([2, 3])


def test_stop_cells_pass_the_reference_and_catch_the_stop_zoo(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
    assert code == EXIT_OK, report["summary"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"reference": "PASS", "stop_mid_block": "BIAS DETECTED", "max_tokens_overshoot": "BIAS DETECTED",
                        "deterministic_acceptance": "BIAS DETECTED"}
    cells = {(c["decoder"], c["test"]): c for c in report["cells"]}
    assert {t for (d, t) in cells if d == "reference"} == {"stop-rule", "stop-position@1..6"}
    ref_rule = cells[("reference", "stop-rule")]
    assert ref_rule["verdict"] == "PASS" and ref_rule["statistic"] == 0 and ref_rule["mde"] < 0.006
    assert cells[("reference", "stop-position@1..6")]["verdict"] == "PASS"
    for name, what in (("stop_mid_block", "after stop token 2"), ("max_tokens_overshoot", "past max_tokens = 6")):
        rule = cells[(name, "stop-rule")]
        assert rule["verdict"] == "BIAS" and rule["statistic"] > 0 and what in rule["support_violation"]
        assert "row " in rule["support_violation"] and "position" in rule["support_violation"]
        assert cells[(name, "stop-position@1..6")]["verdict"] == "PASS"  # the stopping law is the target's
    assert cells[("deterministic_acceptance", "stop-rule")]["verdict"] == "PASS"
    law_cell = cells[("deterministic_acceptance", "stop-position@1..6")]
    assert law_cell["verdict"] == "BIAS" and law_cell["effect_unit"] == "tv" and law_cell["mde"] < 0.13
    diagnosis = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}
    for name in ("stop_mid_block", "max_tokens_overshoot"):
        assert diagnosis[name]["status"] == "stop rule violated"
        assert diagnosis[name]["sentence"].startswith("stop rule violated inside an accepted block")
    assert "stop_rule" not in diagnosis["deterministic_acceptance"]
    md = (run_dir / "report.md").read_text()
    assert "stop rule violated inside an accepted block" in md and "stopping position" in md


def test_stop_position_cell_false_positive_rate_is_at_most_alpha():
    """Seeds 0..199 (``default_rng([401, s])``), 300 iid rows each, cell alpha 0.05: <= 21 rejections."""
    pair = standard_tabular_pairs()["bigram4_eos"]
    probs = np.array([float(f) for f in stop_position_law(pair.target, (0,), 6, [2])])
    law = StopLaw(probs, 6)
    rejected = 0
    for s in range(200):
        rng = np.random.default_rng([401, s])
        pos = rng.choice(7, size=300, p=probs)  # category c: stop at c + 1, or (c = 6) none within 6
        rows = np.full((300, 8), 0, dtype=np.int64)  # token 0 never stops a row
        stopped = pos < 6
        rows[stopped, pos[stopped]] = 2
        for r in np.nonzero(stopped)[0]:
            rows[r, pos[r] + 1:] = -1
        rows[~stopped, 6:] = -1
        cell = stop_position_cell("c", rows, law, ENDS, cell_alpha=0.05, power=0.99, rng=rng, decoder="d", set_id="s")
        rejected += cell.pvalue <= 0.05
    assert rejected <= stats.binom.ppf(0.999, 200, 0.05), rejected


def test_stop_violations_name_the_row_and_position():
    rows = np.array([[1, 2, -1, -1], [1, 1, 1, 1], [2, 0, -1, -1], [1, 1, 1, 1]])
    bad, first = stop_violations(rows, ENDS, 4)
    assert bad.tolist() == [False, False, True, False]
    assert first.startswith("row 2, token 0 at position 2 after stop token 2 at position 1")
    bad, first = stop_violations(rows, ENDS, 3)
    assert bad.tolist() == [False, True, True, True] and first.startswith("row 1, token 1 at position 4 past max_tokens = 3")
    cell = stop_rule_cell("c", rows, ENDS, 3, power=0.99, cell_alpha=1e-3, decoder="d", set_id="s")
    assert cell.pvalue == 0.0 and cell.statistic == 3 and cell.effect == 0.75
    assert cell.support_violation.startswith("stop rule violated in 3 of 4 rows; first: row 1")


def test_validation_lets_padding_follow_a_stop_token_or_the_limit_only_under_a_stop_rule():
    rows = np.array([[1, 2, -1, -1], [1, 1, 1, -1]])
    kw = dict(num_samples=2, max_new_tokens=4, vocab_size=4, eos_token_id=3)
    check_emitted_tokens(rows, **kw, stop_token_ids=(2,), max_tokens=3)
    with pytest.raises(DecoderOutputError, match="padding -1 at position 2 with no EOS before it"):
        check_emitted_tokens(rows, **kw)
    with pytest.raises(DecoderOutputError, match="nor the max_tokens limit"):
        check_emitted_tokens(np.array([[1, 1, -1, -1]]), **{**kw, "num_samples": 1}, stop_token_ids=(2,), max_tokens=3)
    ran_on = np.array([[2, 1, 1, 1]])  # a token after a stop token is the stop-rule cell's finding, not invalid output
    check_emitted_tokens(ran_on, **{**kw, "num_samples": 1}, stop_token_ids=(2,), max_tokens=4)


def test_the_stopping_law_pools_the_positions_a_large_prefix_tree_cannot_reach():
    """The shipped target (V = 384, EOS 0) at T = 1: level 2's 384 ** 2 live prefixes exceed prefix_cap, so positions
    >= 3 form one category; the law stays a law (sums to 1) and the cell says so."""
    pair = load_pair(ModelPair("p", "shipped:target", "shipped:draft"))
    law = runner_stop_law(pair.reference, (5, 6), SamplingConfig(temperature=1.0), stop_ends([], pair.eos_token_id), 6)
    assert law.pooled_from == 3 and len(law.probs) == 3 and abs(law.probs.sum() - 1) < 1e-12
    assert law.label(2) == "stop at >= 3 or no stop"


def test_stop_is_opt_in():
    assert "stop" in TEST_NAMES and "stop" not in DEFAULT_TESTS


_BASE = """
schema_version = 1
name = "s"
[exact]
enabled = false
[models.tab]
target = "tabular:{model}"
draft = "tabular:{model}"
[prompts.p]
ids = {prompt}
[sampling.t]
temperature = {temperature}
[[decoders]]
name = "d"
decoder = "{decoder}"
max_new_tokens = 4
samples = 20
{extra}
"""


PLAIN_PLUGIN = """
import numpy as np


class Plain:  # the Decoder protocol's generate, without the stop-rule keywords
    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        return np.zeros((num_samples, max_new_tokens), dtype=np.int64)


def factory():
    return Plain()
"""


def _suite(extra: str, model: str = "bigram4_eos", prompt: str = "[0]", temperature: float = 1.0,
           decoder: str = "reference") -> str:
    return _BASE.format(extra=extra, model=model, prompt=prompt, temperature=temperature, decoder=decoder)


@pytest.mark.parametrize("extra, fragment", [
    ('tests = ["stop"]\nmax_tokens = 5', "max_tokens=5 is invalid; allowed: an integer in 1..max_new_tokens=4"),
    ('tests = ["stop"]\nmax_tokens = 0', "max_tokens=0 is invalid"),
    ('tests = ["stop"]\nstop_token_ids = [-1]', "stop_token_ids=[-1] is invalid"),
    ('tests = ["stop"]\nstop_token_ids = [2, 2]', "each entry at most once"),
    ('tests = ["stop"]\nstop_token_ids = "2"', "stop_token_ids='2' is invalid"),
    ('tests = ["gof", "stop"]\nstop_token_ids = [2]', "['stop'] with stop_token_ids or max_tokens set"),
    ('stop_token_ids = [2]', "['stop'] with stop_token_ids or max_tokens set"),
])
def test_bad_stop_keys_are_config_errors(extra, fragment):
    import tomllib

    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")):
        parse_suite(tomllib.loads(_suite(extra)))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"extra": 'tests = ["stop"]\nstop_token_ids = [4]'}, "token ids in 0..3"),
    ({"extra": 'tests = ["stop"]\nstop_token_ids = [2]', "temperature": 0.0}, "is greedy"),
    ({"extra": 'tests = ["stop"]', "model": "trigram3", "prompt": "[0, 1]"}, "has no EOS"),
    ({"extra": 'tests = ["stop"]\nstop_token_ids = [2]', "decoder": "plain.py:factory"}, "takes no stop_token_ids"),
])
def test_stop_rules_the_models_or_decoder_cannot_honour_exit_2(write_suite, tmp_path, capsys, kwargs, fragment):
    (tmp_path / "plain.py").write_text(PLAIN_PLUGIN)
    code = main(["run", str(write_suite(_suite(**kwargs))), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert code == EXIT_USAGE
    assert fragment in capsys.readouterr().err


def test_takes_stop_rule_reads_the_generate_signature():
    from verifier.runner.stop import takes_stop_rule

    class Keywords:
        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed, *, stop_token_ids=(), max_tokens=None):
            return None

    class AnyKeyword:
        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed, **kwargs):
            return None

    class Plain:
        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            return None

    assert takes_stop_rule(Keywords()) and takes_stop_rule(AnyKeyword()) and not takes_stop_rule(Plain())


def test_stop_cells_beside_the_token_cells_without_a_stop_rule(write_suite, tmp_path):
    """No stop_token_ids / max_tokens: EOS (id 3 of bigram4_eos) and max_new_tokens are the stop rule, the other cells
    run beside it, and the PASS names both what the token cells and what the stop cells cover."""
    path = write_suite(_suite('tests = ["gof", "stop"]\ngof_positions = [1, 2]\nnum_draft_tokens = [2]\nsamples = 600'
                              '\n[stats]\ntarget_mde = 0.2').replace("samples = 20\n", ""))
    run_dir = tmp_path / "run"
    assert main(["run", str(path), "--run-dir", str(run_dir), "--no-progress"]) == EXIT_OK
    report = json.loads((run_dir / "report.json").read_text())
    assert sorted(c["test"] for c in report["cells"]) == ["gof@1", "gof@2", "stop-position@1..4", "stop-rule"]
    reason = report["decoders"][0]["reason"]
    assert "tokens 1-2" in reason and "the law of the stopping position" in reason
