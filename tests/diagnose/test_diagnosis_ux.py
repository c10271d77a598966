"""Issue 28 item 3: the diagnosis after BIAS DETECTED is visible, skippable, reusable and in plain words.

Suite: trigram3 (k = 2, T = 1, n = 2500, ci seed) with the reference and ``full_p_fallback`` declared
``expect = "pass"`` (so it *fails* its expectation: a junit failure and a pytest-plugin failure).  Its bias
(exact TV 0.07 over the first 3 tokens, ``specverify exact --rule full_p_fallback``) is far above the cells'
MDE at n = 2500 and alpha 1e-3, so the run detects it and the diagnosis names full_p_fallback
(tests/diagnose/test_run_diagnosis.py, same data).

Before: no line on the CLI (the result only in report.json/md), no ``--diagnose``/``--no-diagnosis``,
``specverify diagnose`` recomputed what report.json held, no progress bar, mechanisms named by zoo id only,
nothing in junit failures or the plugin's message.
"""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.cli._summary import diagnosis_lines
from verifier.diagnose.glossary import GLOSSARY
from verifier.errors import InvalidArgumentError

SUITE = """
schema_version = 1
name = "diagux"
seed = 20261129
[exact]
enabled = false
[models.trigram3]
target = "tabular:trigram3"
draft = "tabular:trigram3"
[prompts.ctx01]
ids = [0, 1]
[sampling.t1]
temperature = 1.0
[defaults]
num_draft_tokens = [2]
max_new_tokens = 3
samples = 2500
chunk_size = 500
tests = ["gof", "joint", "surprisal", "pit"]
gof_positions = [1, 2, 3]
joint_tokens = 3
[[decoders]]
name = "reference"
decoder = "reference"
expect = "pass"
[[decoders]]
name = "full_p_fallback"
decoder = "full_p_fallback"
expect = "pass"
[stats]
alpha = 1e-3
target_mde = 0.1
"""
PLAIN = GLOSSARY["full_p_fallback"]


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("diagux") / "suite.toml"
    path.write_text(SUITE)
    return path


@pytest.fixture(scope="module")
def run_dir(suite_file):
    from verifier.pipeline import run_suite
    from verifier.suite import load_suite

    out = suite_file.parent / "run"
    outcome = run_suite(load_suite(suite_file), out, progress=False, log=lambda _m: None)
    assert outcome.exit_code == 1  # full_p_fallback was expected to pass
    return out


def _report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


@pytest.mark.slow
def test_the_cli_prints_one_plain_line_per_biased_decoder(run_dir):
    lines = diagnosis_lines(_report(run_dir))
    assert len(lines) == 1 and "full_p_fallback" in lines[0] and "diagnosis:" in lines[0]
    assert PLAIN.rstrip(".") in lines[0] and "specverify exact --rule full_p_fallback" in lines[0]


@pytest.mark.slow
def test_reports_junit_and_the_pytest_plugin_name_the_mechanism(run_dir):
    from verifier.pytest_plugin import SuiteOutcome

    report = _report(run_dir)
    item = report["diagnosis"]["decoders"][0]
    assert item["mechanism"] == [{"name": "full_p_fallback", "plain": PLAIN,
                                  "reproduce": "specverify exact --rule full_p_fallback",
                                  "pointer": "exact law and counterexample: specverify exact --rule full_p_fallback"}]
    md = (run_dir / "report.md").read_text()
    assert f"what the code did wrong (`full_p_fallback`): {PLAIN}" in md
    assert PLAIN.replace("(q > p)", "(q &gt; p)") in (run_dir / "report.html").read_text()
    failures = ET.parse(run_dir / "junit.xml").getroot().findall(".//failure")
    assert failures and all("mechanism=full_p_fallback" in f.get("message") for f in failures)
    assert all("specverify exact --rule full_p_fallback" in f.text for f in failures)
    outcome = SuiteOutcome(Path("suite.toml"), 1, run_dir, report, "specverify run suite.toml")
    with pytest.raises(AssertionError) as info:
        outcome.assert_ok()
    assert f"diagnosis: full_p_fallback: {PLAIN.rstrip('.')}" in str(info.value)


@pytest.mark.slow
def test_diagnose_reuses_the_stored_diagnosis_and_recompute_forces_it(run_dir, capsys, monkeypatch):
    import verifier.diagnose.run_dir as rd
    from verifier import progress

    stored = _report(run_dir)["diagnosis"]["decoders"]
    real = rd.diagnose_decoders

    def refuse(*a, **k):
        raise AssertionError("recomputed although report.json holds the diagnosis")

    monkeypatch.setattr(rd, "diagnose_decoders", refuse)
    assert main(["diagnose", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "reused the diagnosis stored in report.json" in out and "full_p_fallback: consistent with full_p_fallback" in out
    assert json.loads((run_dir / "diagnosis.json").read_text())["decoders"] == stored

    bars = []

    class Bar:
        def __init__(self, total, desc, unit="it", **kw):
            self.total, self.desc, self.n = total, desc, 0
            bars.append(self)

        def update(self, n=1):
            self.n += n

        def set_postfix_str(self, s="", refresh=True):
            pass

        def close(self):
            pass

    monkeypatch.setattr(rd, "diagnose_decoders", real)
    monkeypatch.setattr(progress, "bar", Bar)
    assert main(["diagnose", str(run_dir), "--recompute"]) == 0
    assert "reused" not in capsys.readouterr().out
    diag = [b for b in bars if b.desc == "diagnosis"]
    assert len(diag) == 1 and diag[0].total == 1 and diag[0].n == 1  # one set of one biased decoder, shown done

    # a decoder report.json has no diagnosis for: computed once, then reused from diagnosis.json
    assert main(["diagnose", str(run_dir), "--decoder", "reference"]) == 0
    assert "reused" not in capsys.readouterr().out
    monkeypatch.setattr(rd, "diagnose_decoders", refuse)
    assert main(["diagnose", str(run_dir), "--decoder", "reference"]) == 0
    out = capsys.readouterr().out
    assert "reused the diagnosis stored in diagnosis.json" in out and "reference: no mechanism preferred" in out


@pytest.mark.slow
def test_no_diagnosis_skips_it_and_says_how_to_run_it_later(suite_file, tmp_path, capfd):
    out = tmp_path / "run"
    assert main(["run", str(suite_file), "--run-dir", str(out), "--no-diagnosis", "--no-progress"]) == 1
    printed = capfd.readouterr().out
    assert f"diagnosis skipped (--diagnose off); which mechanism, where: specverify diagnose {out}" in printed
    report = _report(out)
    assert report["diagnosis"] == {"skipped": "--diagnose off", "command": f"specverify diagnose {out}", "decoders": []}
    assert "diagnosis" not in report["run"]["stage_seconds"]
    assert f"Skipped (--diagnose off)" in (out / "report.md").read_text()
    assert [d["verdict"] for d in report["decoders"]] == ["PASS", "BIAS DETECTED"]  # the verdicts do not change


def test_diagnose_mode_is_checked_and_the_cli_choices_match():
    from verifier.cli._diagnose_args import DIAGNOSE_CHOICES
    from verifier.diagnose.run_dir import DIAGNOSE_MODES, mode, set_mode

    assert DIAGNOSE_CHOICES == DIAGNOSE_MODES and mode() == "auto"
    with pytest.raises(InvalidArgumentError, match="diagnose='sometimes'.*'auto' | 'off'"):
        set_mode("sometimes")


@pytest.mark.parametrize("command, extra", [("run", ["suite.toml"]), ("audit", ["--decoder", "reference"])])
def test_run_and_audit_take_diagnose_and_its_alias(command, extra):
    from verifier.cli import build_parser

    parse = build_parser(command).parse_args
    assert parse([command, *extra]).diagnose == "auto"
    assert parse([command, *extra, "--diagnose", "off"]).diagnose == "off"
    assert parse([command, *extra, "--no-diagnosis"]).diagnose == "off"
    with pytest.raises(SystemExit):
        parse([command, *extra, "--diagnose", "sometimes"])


def test_a_damaged_stored_diagnosis_is_recomputed_never_reused_or_a_traceback(run_dir, tmp_path):
    """Break-it findings: an edited report.json diagnosis (sets a string, mechanism entries without their sentence,
    the diagnosis itself a string) made `stored_diagnosis` raise AttributeError / the text renderer KeyError; such a
    candidate is now skipped, and a report.json that is not an object is a ConfigError naming the file."""
    import shutil

    from verifier.diagnose.run_dir import _well_formed, diagnose_run_dir, stored_diagnosis
    from verifier.errors import ConfigError

    assert not _well_formed([{"decoder": "d", "sets": "garbage"}])
    assert not _well_formed([{"decoder": "d", "sets": ["x"]}])
    assert not _well_formed([{"decoder": "d", "mechanism": [{"name": "no_such"}]}])
    assert _well_formed([{"decoder": "d", "sets": [{}], "mechanism": [{"name": "a", "plain": "b", "reproduce": "c"}]}])
    assert stored_diagnosis(tmp_path, {"diagnosis": "oops", "run": {"inputs_sha256": "x"}}, ["d"]) is None
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "report.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a report written by specverify"):
        diagnose_run_dir(copy)


def test_diagnose_refuses_a_report_json_whose_verdicts_were_edited(run_dir, tmp_path, capsys):
    """Break-it finding: report.json with full_p_fallback's BIAS DETECTED edited to PASS made `specverify diagnose`
    print "no decoder to diagnose" and exit 0 over biased samples (it picks decoders from those verdicts unchecked).
    Now exit 2 naming the file and `specverify report RUN_DIR --recompute`, also when the forger resealed it (the
    verdict no longer follows from the BIAS cells); the untouched folder is still diagnosed."""
    import shutil

    from verifier.reports.digest import DIGEST_FIELD, report_digest

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "diagnosis.json").unlink(missing_ok=True)
    report = _report(copy)
    for d in report["decoders"]:
        if d["decoder"] == "full_p_fallback":
            assert d["verdict"] == "BIAS DETECTED"
            d["verdict"] = "PASS"
    (copy / "report.json").write_text(json.dumps(report))
    assert main(["diagnose", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "report.json does not match its own digest" in err and f"specverify report {copy} --recompute" in err, err
    assert not (copy / "diagnosis.json").exists()
    report["run"][DIGEST_FIELD] = report_digest(report)  # resealed by the forger: the cells still say BIAS
    (copy / "report.json").write_text(json.dumps(report))
    assert main(["diagnose", str(copy)]) == 2
    assert "whose cells include BIAS" in capsys.readouterr().err
    assert main(["diagnose", str(run_dir)]) == 0
    assert "full_p_fallback" in capsys.readouterr().out
