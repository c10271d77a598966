"""The request's own setting ignored (``verifier.diagnose.setting_laws``; issue 26, "never a wrong name").

A decoder that drops one request processor for the whole row (the llama-cpp-python negative control
``processors_dropped``) was named ``target_unprocessed`` (min-p dropped, penalties kept) or nothing (penalties dropped),
and on tabular pairs the penalty finding named ``min_p_skipped_on_verified`` (a verification-only defect) for the
whole-row drop.  These tests run real suites through the CLI's runner and diagnosis (the harness's reference decoder
inside the same ``processors_dropped`` wrapper the engine controls use) and check the decoder-level name:

* each whole-row drop is named as that setting ignored, and each zoo penalty mutant keeps its own name (a setting
  law must never take the name of a speculative-path defect, nor the reverse);
* ``target_unprocessed`` keeps its name (dropping every processor is its law), also at T = 0.7 with top-k 2, where
  ``temperature_ignored`` and ``top_k_top_p_ignored`` are ranked beside it and top-k dropped alone is named as such;
* rows of the target (the reference decoder) get no diagnosis.

Tabular suite: seed 2901, bigram4_eos, prompt (0, 1, 0, 1), T = 1, repetition 1.5, presence 0.5, frequency 0.5, min-p
0.3, k = 2, 2,000 rows of 4 tokens (the penalty cells reject every defect here, TV >= 0.1; the diagnosis names at
alpha 0.01 with its fit check at 1e-3).  The exact enumerator gives every law (``verifier.exact.penalties``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from verifier.diagnose.penalty import penalty_set_finding
from verifier.diagnose.setting_laws import SETTINGS, candidates, without
from verifier.exact import standard_tabular_pairs
from verifier.exact.penalties import PENALTY_PROMPTS, PENALTY_SAMPLING, penalty_n_token_law
from verifier.sampling import SamplingConfig

SUITE = """
schema_version = 1
name = "setting-laws"
seed = 2901
[exact]
enabled = false
[models.bigram4]
target = "tabular:bigram4_eos"
draft = "tabular:bigram4_eos"
[prompts.repeated]
ids = [0, 1, 0, 1]
[sampling.pen]
temperature = 1.0
repetition_penalty = 1.5
presence_penalty = 0.5
frequency_penalty = 0.5
min_p = 0.3
[sampling.t07k2]
temperature = 0.7
top_k = 2
[defaults]
models = "bigram4"
prompts = ["repeated"]
sampling = ["pen"]
num_draft_tokens = [2]
max_new_tokens = 4
samples = 2000
tests = ["gof", "joint"]
gof_positions = [1, 2, 3, 4]
joint_tokens = 4
"""
DECODERS = {  # suite decoder name -> (decoder table, the name the diagnosis must give; None: no diagnosis)
    "min-p-dropped": ('decoder = "verifier.engines.field_controls:processors_dropped"\n'
                      'options = { decoder = "reference", drop = ["min_p"] }', "min_p_ignored"),
    "penalties-dropped": ('decoder = "verifier.engines.field_controls:processors_dropped"\n'
                          'options = { decoder = "reference", drop = ["repetition_penalty", "presence_penalty", '
                          '"frequency_penalty"] }', "penalties_ignored"),
    "piv": ('decoder = "penalty_ignored_in_verification"', "penalty_ignored_in_verification"),
    "mpsv": ('decoder = "min_p_skipped_on_verified"', "min_p_skipped_on_verified"),
    "unprocessed": ('decoder = "target_unprocessed"', "target_unprocessed"),
    "reference": ('decoder = "reference"', None),
    "top-k-dropped": ('decoder = "verifier.engines.field_controls:processors_dropped"\n'
                      'options = { decoder = "reference", drop = ["top_k"] }\nsampling = ["t07k2"]', "top_k_top_p_ignored"),
    "unprocessed-t07": ('decoder = "target_unprocessed"\nsampling = ["t07k2"]', "target_unprocessed"),
}


@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory) -> dict:
    from verifier.cli import main

    root = tmp_path_factory.mktemp("setting-laws")
    text = SUITE + "".join(f'\n[[decoders]]\nname = "{n}"\n{body}\nexpect = "{"pass" if want is None else "detect"}"\n'
                           for n, (body, want) in DECODERS.items())
    (root / "suite.toml").write_text(text)
    code = main(["run", str(root / "suite.toml"), "--run-dir", str(root / "run"), "--no-progress"])
    assert code == 0  # every expectation met: the controls and mutants detected, the reference PASS
    report = json.loads((root / "run" / "report.json").read_text())
    return {d["decoder"]: d for d in report["diagnosis"]["decoders"]}


def _named(d: dict) -> list[str]:
    if d.get("status") == "consistent":
        return [m["name"] for m in d.get("mechanism") or []]
    if d.get("status") == "penalty mechanism":
        return [d["penalty"]["named"]]
    return []


@pytest.mark.parametrize("decoder", [n for n, (_, want) in DECODERS.items() if want is not None])
def test_each_defect_gets_its_own_name_and_no_other(diagnosis, decoder):
    want = DECODERS[decoder][1]
    assert _named(diagnosis[decoder]) == [want], diagnosis[decoder]["sentence"]


def test_the_target_rows_get_no_diagnosis(diagnosis):
    assert "reference" not in diagnosis


def test_a_setting_law_names_its_margin_and_fit(diagnosis):
    d = diagnosis["min-p-dropped"]
    law = d["setting_law"]
    assert law["named"] == "min_p_ignored" and law["fit_pvalue"] >= 1e-3
    assert "min_p_ignored" in d["sentence"] and "over the next hypothesis" in d["sentence"]
    assert d["mechanism"][0]["reproduce"].startswith("specverify audit ... with min_p removed")


def test_candidates_leave_the_unprocessed_target_to_its_mechanism():
    """A request with one processor group: removing it is the unprocessed target (target_unprocessed's law)."""
    assert candidates([SamplingConfig(temperature=0.7)]) == []
    assert candidates([SamplingConfig(min_p=0.1)]) == []
    assert candidates([SamplingConfig(temperature=0.7, top_k=8)]) == ["temperature_ignored", "top_k_top_p_ignored"]
    assert candidates([PENALTY_SAMPLING]) == ["penalties_ignored", "min_p_ignored"]
    assert candidates([SamplingConfig(temperature=0.0)]) == []  # greedy: no law to drop a processor from
    assert without(SamplingConfig(temperature=0.7, top_k=8), "temperature_ignored") == SamplingConfig(top_k=8)
    assert set(SETTINGS) == {"temperature_ignored", "top_k_top_p_ignored", "penalties_ignored", "min_p_ignored"}


@pytest.mark.parametrize("setting", ["min_p_ignored", "penalties_ignored"])
def test_the_penalty_finding_leaves_a_whole_row_drop_unnamed(setting):
    """600 rows drawn from the exact law of the request without min-p (or without the penalties) on trigram3: the
    penalty finding names none of its speculative-path mechanisms, and says the setting law fits best."""
    pair = standard_tabular_pairs()["trigram3"]
    prompt, k, n = PENALTY_PROMPTS["trigram3"], 2, 4
    law = penalty_n_token_law(pair.target, pair.draft, prompt, without(PENALTY_SAMPLING, setting), k, n, rule="canonical")
    keys = sorted(law)
    pick = np.random.default_rng([26, len(setting)]).choice(len(keys), size=600, p=np.array([float(law[x]) for x in keys]))
    rows = np.array([keys[i] for i in pick], dtype=np.int64)
    f = penalty_set_finding(pair.target, pair.draft, prompt, PENALTY_SAMPLING, k, rows)
    assert f["named"] is None and f"they follow {setting} best" in f["sentence"], f["sentence"]
    assert replace(PENALTY_SAMPLING, min_p=None) == without(PENALTY_SAMPLING, "min_p_ignored")


def test_an_exact_penalty_rival_that_is_not_separated_makes_a_class():
    """A setting law leads the family, but the exact penalty finding (which ranks the penalty mechanisms the family
    lacks) does not put it first by its threshold: never named alone."""
    from verifier.diagnose.setting_laws import _rival_check

    first = {"best": "min_p_ignored", "margin": 9.0, "threshold": 6.2, "runner_up": "min_p_skipped_on_verified"}
    assert _rival_check("min_p_ignored", [first]) == []
    assert _rival_check("min_p_ignored", [{**first, "margin": 3.0}]) == ["min_p_skipped_on_verified"]
    assert _rival_check("min_p_ignored", [{**first, "best": "min_p_skipped_on_verified", "runner_up": "min_p_ignored"}]) \
        == ["min_p_skipped_on_verified"]
    assert _rival_check("min_p_ignored", None) == [] and _rival_check("min_p_ignored", [None, {}]) == []


def test_a_server_that_ignores_top_k_is_named_with_its_draft_unknown(tmp_path, capsys):
    """A URL audit's server drafts with its own model (draft unknown: no family to rank); a setting it ignores needs the
    target alone, so it is still named (tests/diagnose/unknown_plugins.py:TopKIgnored, trigram3, T = 0.7, top-k 2, 2,000
    rows, seed 0: the third token of each position is emitted where the request removes it)."""
    from verifier.cli import main

    run = tmp_path / "run"
    code = main(["audit", "--decoder", f"{Path(__file__).with_name('unknown_plugins.py')}:TopKIgnored",
                 "--target", "tabular:trigram3", "--draft", "unknown", "--prompt-ids", "0,1", "--temperature", "0.7",
                 "--top-k", "2", "--num-draft-tokens", "2", "--max-new-tokens", "3", "--num-samples", "2000", "--seed", "0",
                 "--run-dir", str(run), "--no-progress"])
    assert code == 1, capsys.readouterr().err[-2000:]
    item = json.loads((run / "report.json").read_text())["diagnosis"]["decoders"][0]
    assert item["status"] == "consistent" and [m["name"] for m in item["mechanism"]] == ["top_k_top_p_ignored"], item
    assert "the draft is unknown" in item["sentence"] and item["setting_law"]["fit_pvalue"] >= 1e-3
