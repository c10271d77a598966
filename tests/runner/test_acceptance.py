"""The bias verdict is about the output law only; acceptance is its own finding (issue 12, part 1).

Regressions (each failed before the accepted-count law left the bias gate):

* ``fresh_target_match`` as a decoder plugin with ``expect = "pass"`` got BIAS DETECTED (exit 1)
  on trigram3 (T=1 and T=0.7/top-k 2) and on the shipped models -- only the ``accepted`` cell fired;
* a draft path applying top-k and top-p jointly while the target path applies them one after the
  other (lossless: the draft samples the q it hands over) was failed on trigram3 (top_k=2,
  top_p=0.6) through ``accepted`` with "support violation ... target prob is 0".

Budgets are the ci suite's (2500 rows per trigram3 set, 3000 on the shipped models; family-wise
alpha 1e-3, fixed seed 7): every bias cell sees TV <= 0.1, and the conformance chi-square sees
the fresh-match rule's accepted-count law (TV 0.33 from the canonical one on trigram3 at T=1,
exact) with power ~1 -- so the NONCONFORMING expectation below can fail.
"""

from __future__ import annotations

import json

import pytest

from verifier.cli import main
from verifier.errors import ConfigError
from verifier.suite import load_suite

from .conftest import REPO

SUITE = f"""
schema_version = 1
name = "acceptance"
seed = 7
python_path = [{json.dumps(str(REPO))}]

[exact]
enabled = false

[models.trigram3]
target = "tabular:trigram3"
draft = "tabular:trigram3"

[models.shipped]
target = "shipped:target"
draft = "shipped:draft"

[prompts.ctx01]
ids = [0, 1]

[prompts.def]
text = "def "

[sampling.t1]
temperature = 1.0

[sampling.t07k2]
temperature = 0.7
top_k = 2

[sampling.k2p06]
temperature = 1.0
top_k = 2
top_p = 0.6

[defaults]
models = "trigram3"
prompts = ["ctx01"]
num_draft_tokens = [2]
max_new_tokens = 3
samples = 2500
chunk_size = 500
tests = ["gof", "joint", "surprisal", "pit", "accepted"]
gof_positions = [1, 2, 3]
joint_tokens = 3

{{decoders}}

[stats]
alpha = 1e-3
target_mde = 0.1
"""

PLUGINS = """
[[decoders]]
name = "fresh_target_match-plugin"
decoder = "tests.runner.lossless_plugins:fresh_target_match"
expect = "pass"
sampling = ["t1", "t07k2"]

[[decoders]]
name = "fresh_target_match-plugin@shipped"
decoder = "tests.runner.lossless_plugins:fresh_target_match"
expect = "pass"
models = "shipped"
prompts = ["def"]
sampling = ["t1"]
samples = 3000
chunk_size = 1000
gof_positions = [1, 2]
joint_tokens = 2
"""

JOINT = """
[[decoders]]
name = "joint-topk-topp-draft"
decoder = "tests.runner.lossless_plugins:joint_topk_topp"
expect = "pass"
sampling = ["k2p06"]
samples = 500
"""


def _run(write_suite, tmp_path, decoders: str, capsys):
    path = write_suite(SUITE.replace("{decoders}", decoders))
    code = main(["run", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    out = capsys.readouterr().out
    return code, json.loads((tmp_path / "run" / "report.json").read_text()), out


@pytest.mark.slow
def test_lossless_plugins_pass_and_acceptance_is_reported_beside_the_verdict(write_suite, tmp_path, capsys):
    code, report, out = _run(write_suite, tmp_path, PLUGINS, capsys)
    assert code == 0, out
    decoders = {d["decoder"]: d for d in report["decoders"]}
    assert {d["verdict"] for d in decoders.values()} == {"PASS"}, out
    assert not any(c["test"] == "accepted" for c in report["cells"])  # no bias cell on acceptance
    # the fresh-match rule accepts far fewer drafts than canonical at T=1: PASS + the loud note
    t1 = next(a for a in decoders["fresh_target_match-plugin"]["acceptance"] if "T=1 " in a["label"])
    assert t1["far_below"] and "FAR BELOW CANONICAL" in t1["note"] and t1["passes_ratio"] > 1.3
    assert "FAR BELOW CANONICAL" in out and "FAR BELOW CANONICAL" in (tmp_path / "run" / "report.md").read_text()
    assert t1["positions"][0]["canonical"] == pytest.approx(0.7)  # sum min(p, q) at the prompt, exact
    assert all(d["acceptance_conformance"] is None for d in decoders.values())  # nothing declared


def test_joint_topk_topp_draft_is_not_failed_through_acceptance(write_suite, tmp_path, capsys):
    """Under T=1, top_k=2, top_p=0.6 the processed trigram3 target is deterministic from the prompt
    on (so every output cell states an infinite MDE today: UNDERPOWERED, part 2 of the issue);
    the decoder's draft accepts token 1 where the suite's canonical draft never proposes it, which
    used to be a support violation -> BIAS DETECTED.  Now: never BIAS, and the audit shows it."""
    code, report, out = _run(write_suite, tmp_path, JOINT, capsys)
    d = report["decoders"][0]
    assert d["verdict"] != "BIAS DETECTED" and code != 1, out
    assert not any(c.get("support_violation") for c in report["cells"])
    audit = d["acceptance"][0]
    assert audit["canonical_mean_accepted"] == 0 and audit["mean_accepted"] > 0.2  # its q differs from the suite's


@pytest.mark.slow
def test_declared_canonical_acceptance_fails_a_non_canonical_lossless_rule_as_conformance_not_bias(write_suite, tmp_path,
                                                                                                   capsys):
    decoders = """
[[decoders]]
name = "fresh_target_match"
decoder = "fresh_target_match"
expect = "pass"
sampling = ["t1"]
acceptance = "canonical"

[[decoders]]
name = "reference"
decoder = "reference"
expect = "pass"
sampling = ["t1"]
acceptance = "canonical"
"""
    code, report, out = _run(write_suite, tmp_path, decoders, capsys)
    d = {x["decoder"]: x for x in report["decoders"]}
    assert code == 1, out  # declared, so the mismatch fails the run ...
    assert d["fresh_target_match"]["verdict"] == "PASS" and not d["fresh_target_match"]["expectation_met"]
    conf = d["fresh_target_match"]["acceptance_conformance"]
    assert conf["verdict"] == "NONCONFORMING" and "acceptance rule conformance" in conf["reason"]
    assert "not distribution bias" in conf["reason"] and d["fresh_target_match"]["failing_cells"] == []
    assert d["reference"]["verdict"] == "PASS" and d["reference"]["expectation_met"]
    assert d["reference"]["acceptance_conformance"]["verdict"] == "CONFORMS"
    assert "acceptance rule conformance: NONCONFORMING" in out
    assert "acceptance rule conformance **NONCONFORMING**" in (tmp_path / "run" / "report.md").read_text()
    assert 'failure message="acceptance rule conformance: NONCONFORMING"' in (tmp_path / "run" / "junit.xml").read_text()


def test_acceptance_key_is_strict(write_suite):
    bad = SUITE.replace("{decoders}", '[[decoders]]\nname = "r"\ndecoder = "reference"\nacceptance = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"decoders\[0\]\.acceptance='sometimes'.*'any' \| 'canonical'"):
        load_suite(write_suite(bad))
    default = SUITE.replace("{decoders}", '[[decoders]]\nname = "r"\ndecoder = "reference"\n')
    assert load_suite(write_suite(default)).decoders[0].acceptance == "any"
    declared = SUITE.replace('joint_tokens = 3\n', 'joint_tokens = 3\nacceptance = "canonical"\n').replace(
        "{decoders}", '[[decoders]]\nname = "r"\ndecoder = "reference"\n')
    assert load_suite(write_suite(declared)).decoders[0].acceptance == "canonical"
