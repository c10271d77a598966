"""The ``transformers`` engine (in-process HF ``generate``), through ``specverify audit --engine transformers``.

Real transformers, shipped models; the local checkpoints of the draft-unknown modes come from
``bash ci/engines/transformers.sh`` (require_engine skips without them, fails under CI).  About 3-5 min on a
loaded 2-core machine (three short audits).
"""

import json
import shutil

import pytest

from verifier.cli import main
from verifier.engines import get_engine


@pytest.fixture
def engine(require_engine):
    eng = require_engine("transformers")
    if not (eng.install_dir() / "INSTALLED.json").is_file():
        import os

        why = f"transformers local checkpoints not built: run `{eng.install_script()}`"
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    return eng


def test_registered_with_its_modes_and_draft_declaration():
    eng = get_engine("transformers")
    assert eng.kind == "decoder" and eng.version.count(".") == 2
    assert eng.draft_known({"mode": "assisted"}) and not eng.draft_known({"mode": "prompt_lookup"})
    assert {o.name for o in eng.options} >= {"mode", "max_matching_ngram_size", "assistant_model"}
    assert "harness's process" in eng.describe()["runtime"]


def test_bad_options_are_usage_errors(engine, tmp_path, capsys):
    assert main(["audit", "--engine", "transformers", "--engine-arg", "mode=bogus", "--run-dir", str(tmp_path / "a")]) == 2
    assert "mode" in capsys.readouterr().err
    # the Gemma4 assistant needs a Gemma4 target: transformers refuses a Llama target
    assert main(["audit", "--engine", "transformers", "--engine-arg", "mode=gemma4_assistant", "--target", "shipped:target",
                 "--num-samples", "10", "--no-progress", "--run-dir", str(tmp_path / "b")]) == 2
    assert "Gemma4" in capsys.readouterr().err


def test_short_assisted_audit_is_underpowered_with_floor_and_stats(engine, tmp_path, capsys):
    """n = 300 cannot see TV 0.03 (known verdict: UNDERPOWERED, exit 4); the floor (HF vs HF) is ~0 and the
    engine's rounds feed the acceptance audit (conformance with the declared canonical rule is tested)."""
    run = tmp_path / "r"
    code = main(["audit", "--engine", "transformers", "--num-draft-tokens", "2", "--num-samples", "300", "--target-tv", "0.03",
                 "--acceptance", "canonical", "--no-progress", "--run-dir", str(run)])
    out = capsys.readouterr().out
    assert code == 4, out
    report = json.loads((run / "report.json").read_text())
    assert report["numeric_floor"]["max_tv"] < 1e-5 and not report["numeric_floor"]["above_target"]
    d = report["decoders"][0]
    assert d["acceptance"][0]["rounds"] == 300 and d["acceptance"][0]["canonical_mean_accepted"] is not None
    assert d["acceptance_conformance"]["verdict"] in ("CONFORMS", "NONCONFORMING")
    assert report["sample_sets"][0]["rounds"] > 0


def test_corrupt_assistant_is_a_crash_exit_3(engine, tmp_path, capsys):
    bad = tmp_path / "bad-draft"
    shutil.copytree(engine.install_dir() / "retokenized-draft", bad)
    (bad / "model.safetensors").write_bytes(b"\x00" * 64)
    code = main(["audit", "--engine", "transformers", "--engine-arg", "mode=assistant_tokenizer", "--engine-arg",
                 f"assistant_model={bad}", "--num-samples", "20", "--no-progress", "--run-dir", str(tmp_path / "r")])
    captured = capsys.readouterr()
    assert code == 3, captured.out + captured.err


def test_floor_is_measured_on_the_runs_own_instance_before_the_verdict(engine, tmp_path, capsys, monkeypatch):
    """Issue 27 (fixed cost): the numeric floor asks the engine instance that drew the samples, before the verdict is
    announced -- one engine instance per audit (the floor used to start a second one after the verdict; 6.5 s of vLLM
    start).  A folder resumed without a report (its run stopped while sampling) gets its floor measured too (it used to
    end with none)."""
    from verifier.engines import hf_assisted

    built = []
    init = hf_assisted.HFAssistedDecoder.__init__

    def counted(self, *a, **k):  # the real constructor, counted
        built.append(1)
        init(self, *a, **k)

    monkeypatch.setattr(hf_assisted.HFAssistedDecoder, "__init__", counted)
    run = tmp_path / "r"
    code = main(["audit", "--engine", "transformers", "--engine-arg", "num_workers=1", "--num-samples", "60",
                 "--no-progress", "--run-dir", str(run)])
    out = capsys.readouterr().out
    assert code == 4, out  # n = 60 cannot see the default target TV
    assert len(built) == 1, out
    floor_at, verdict_at = out.index("numeric floor: TV"), out.index("time to verdict:")
    assert floor_at < verdict_at and "before the numeric floor" not in out, out
    report = json.loads((run / "report.json").read_text())
    assert report["numeric_floor"]["max_tv"] < 1e-5 and report["run"]["stage_seconds"]["numeric_floor"] > 0
    for name in ("report.json", "report.md", "report.html", "junit.xml"):  # as if the run had stopped before them
        (run / name).unlink()
    code = main(["audit", "--resume", str(run), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 4 and "numeric floor: TV" in out, out
    assert json.loads((run / "report.json").read_text())["numeric_floor"]["max_tv"] < 1e-5
