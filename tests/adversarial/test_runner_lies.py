"""Adversarial regression tests: inputs and decoders that used to slip through the runner.

* a decoder that ignores the seed (every chunk of a sample set identical) was reported as
  "BIAS DETECTED" at best and could PASS with few chunks; it is invalid output (exit 3);
* a `pass` decoder with no tested cell (``tests = []``, ``num_draft_tokens = []``, or only an
  ``accepted`` test the decoder cannot feed) was a vacuous PASS (exit 0);
* ``specverify run SUITE --resume RUN_DIR`` silently resumed the stored suite, ignoring a changed SUITE.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.errors import EXIT_DECODER, EXIT_OK, EXIT_UNDERPOWERED, EXIT_USAGE, ConfigError
from verifier.runner.verdict import UNDERPOWERED, decide, exit_code
from verifier.suite import parse_suite

PLUGIN = '''
import numpy as np


class Uniform:
    """Uniform over the vocabulary; ``ignore_seed`` draws every call from one fixed seed."""

    vocab_size = 4
    eos_token_id = 3

    def __init__(self, ignore_seed=False):
        self.ignore_seed, self.name = ignore_seed, "uniform"

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        rng = np.random.default_rng(1234 if self.ignore_seed else seed)
        out = rng.integers(0, 3, size=(num_samples, max_new_tokens)).astype(np.int64)  # never EOS
        return out


def make(ignore_seed=False):
    return Uniform(ignore_seed)
'''


def _suite(tmp_path: Path, module: str, decoders: str, defaults: str = "") -> Path:
    (tmp_path / f"{module}.py").write_text(PLUGIN)
    text = f"""
schema_version = 1
name = "adv"
seed = 5
python_path = [{json.dumps(str(tmp_path))}]
[exact]
enabled = false
[models.tab]
target = "tabular:bigram4_eos"
draft = "tabular:bigram4_eos"
[prompts.p]
ids = [0]
[sampling.t1]
temperature = 1.0
[defaults]
max_new_tokens = 3
samples = 400
chunk_size = 200
tests = ["gof", "joint", "pit"]
{defaults}
{decoders}
[stats]
target_mde = 0.5
"""
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def _run(suite: Path, run_dir: Path, *extra: str) -> int:
    return main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress", *extra])


def test_decoder_ignoring_the_seed_is_invalid_output(tmp_path, capsys):
    suite = _suite(tmp_path, "adv_seedless", '[[decoders]]\nname = "seedless"\ndecoder = "adv_seedless:make"\n'
                                              'options = { ignore_seed = true }\nexpect = "pass"')
    assert _run(suite, tmp_path / "run") == EXIT_DECODER
    out = capsys.readouterr().out
    assert "ignores the seed" in out and "chunk 1" in out and "chunk 0" in out
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["decoders"][0]["verdict"] == "ERROR"


def test_seed_check_spares_greedy_like_chunks():
    """Identical chunks of a (near-)constant law are expected (T = 0): never flagged."""
    from verifier.runner.run import _check_seed_used

    class Plan:
        set_id, label = "s", "s"

    seen: dict = {}
    const = np.zeros((500, 3), dtype=np.int64)
    _check_seed_used(seen, Plan, 0, 1, const, "d")
    _check_seed_used(seen, Plan, 1, 2, const.copy(), "d")  # no raise
    rare = const.copy()
    rare[7, 1] = 1  # one odd row in 500: an i.i.d. repeat is likely enough (n*H ~ 7 nats)
    _check_seed_used(seen, Plan, 2, 3, rare, "d")
    _check_seed_used(seen, Plan, 3, 4, rare.copy(), "d")  # no raise


def test_correct_decoder_with_seeds_passes_the_seed_check(tmp_path):
    suite = _suite(tmp_path, "adv_seeded", '[[decoders]]\nname = "seeded"\ndecoder = "adv_seeded:make"\nexpect = "detect"')
    # uniform is not the target law: expected to be detected, and no decoder error
    run_dir = tmp_path / "run"
    assert _run(suite, run_dir) == EXIT_OK
    assert json.loads((run_dir / "report.json").read_text())["decoders"][0]["verdict"] == "BIAS DETECTED"


def test_no_tested_cell_is_not_pass():
    v = decide("d", "pass", [], alpha=1e-3, correction="gate", target_mde=0.1)
    assert v.verdict == UNDERPOWERED and not v.expectation_met and "no cell was tested" in v.reason
    assert exit_code([v]) == EXIT_UNDERPOWERED


def test_accepted_only_on_a_decoder_without_stats_is_not_pass(tmp_path):
    suite = _suite(tmp_path, "adv_nostats", '[[decoders]]\nname = "nostats"\ndecoder = "adv_nostats:make"\nexpect = "pass"',
                   defaults='tests = ["accepted"]\nnum_draft_tokens = [1]')
    suite.write_text(suite.read_text().replace('tests = ["gof", "joint", "pit"]\n', "", 1))
    assert _run(suite, tmp_path / "run") == EXIT_UNDERPOWERED


@pytest.mark.parametrize("key", ["tests", "num_draft_tokens"])
def test_empty_grid_lists_are_config_errors(key):
    raw = {"schema_version": 1, "name": "x", "models": {"m": {"target": "tabular:trigram3", "draft": "tabular:trigram3"}},
           "prompts": {"p": {"ids": [0, 1]}}, "sampling": {"t": {"temperature": 1.0}},
           "decoders": [{"name": "reference", key: []}]}
    with pytest.raises(ConfigError, match=rf"decoders\[0\]\.{key}=\[\] is invalid; allowed: a non-empty list"):
        parse_suite(raw)


def test_resume_with_a_changed_suite_is_refused(tmp_path, capsys):
    decoders = '[[decoders]]\nname = "seeded"\ndecoder = "adv_resume:make"\nexpect = "detect"'
    suite = _suite(tmp_path, "adv_resume", decoders)
    run_dir = tmp_path / "run"
    assert _run(suite, run_dir) == EXIT_OK
    capsys.readouterr()
    assert main(["run", str(suite), "--resume", str(run_dir), "--no-progress"]) == EXIT_OK  # same suite: fine
    changed = tmp_path / "changed.toml"
    changed.write_text(suite.read_text().replace("samples = 400", "samples = 600"))
    assert main(["run", str(changed), "--resume", str(run_dir), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "differs from the suite stored in" in err and "defaults" in err and "Traceback" not in err


def test_replayed_chunk_in_another_order_is_caught():
    """Shuffling a replayed chunk does not hide it: rows are compared as a multiset."""
    from verifier.errors import DecoderOutputError
    from verifier.runner.run import _check_seed_used

    class Plan:
        set_id, label = "s", "s"

    rows = np.random.default_rng(0).integers(0, 3, size=(500, 3))
    seen: dict = {}
    _check_seed_used(seen, Plan, 0, 1, rows, "d")
    with pytest.raises(DecoderOutputError, match="same 500 rows as for chunk 0"):
        _check_seed_used(seen, Plan, 1, 2, rows[::-1].copy(), "d")
    two = np.repeat([[0, 0, 0], [1, 1, 1]], 250, axis=0)  # 2 outcomes: a repeat of the counts is plausible
    _check_seed_used(seen, Plan, 2, 3, two, "d")
    _check_seed_used(seen, Plan, 3, 4, two[::-1].copy(), "d")  # no raise


def test_pass_reason_claims_a_tv_only_for_cells_that_state_one():
    """A pass decoder whose cells are all surprisal (nats) must not be told "every cell sees TV <= 0.1";
    with no TV cell at all it cannot PASS (UNDERPOWERED, breakit item 4)."""
    from verifier.runner.analysis import CellResult

    cell = CellResult("d/s/surprisal@1..2", decoder="d", set_id="s", test="surprisal@1..2", method="mc", n=500,
                      statistic=0.01, pvalue=0.6, effect=0.01, effect_unit="nats", mde=0.2)
    v = decide("d", "pass", [cell], alpha=1e-3, correction="gate", target_mde=0.1)
    assert v.verdict == "UNDERPOWERED" and "TV <= " not in v.reason and "no cell states a TV" in v.reason
