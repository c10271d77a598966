"""Issue 12, part 3: suite inputs that overwrote, mixed, faked or crashed a run.

Each test is a regression test that failed before its fix (see the issue for the symptoms).
Statistics play no part: every assertion is on an exit code, a message or a file.  Runs use the
bigram4_eos tabular pair and 200 samples; the plugin is tests/adversarial/_plug.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_DECODER, EXIT_OK, EXIT_USAGE, ConfigError
from verifier.suite import parse_suite

from .test_plugin_exits import PLUG, write_suite


def run(suite: Path, run_dir: Path, *extra: str) -> int:
    return main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress", *extra])


def test_run_dir_that_holds_a_run_is_not_overwritten(tmp_path, capsys):
    suite = write_suite(tmp_path / "s")
    run_dir = tmp_path / "run"
    assert run(suite, run_dir) == EXIT_OK
    before = {p: p.read_bytes() for p in (run_dir / "samples").rglob("*.npz")}
    capsys.readouterr()
    assert run(suite, run_dir, "--seed", "99") == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--resume" in err and str(run_dir) in err
    assert {p: p.read_bytes() for p in (run_dir / "samples").rglob("*.npz")} == before


def test_relative_plugin_path_resolves_against_the_suite_folder(tmp_path, monkeypatch, capsys):
    suite = write_suite(tmp_path / "s", decoder="plug.py:make")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "plug.py").write_text("raise RuntimeError('the plug.py in the working directory was executed')\n")
    monkeypatch.chdir(cwd)
    assert run(suite, tmp_path / "run") == EXIT_OK, capsys.readouterr().err


def test_resume_with_a_changed_plugin_file_is_refused(tmp_path, capsys):
    suite = write_suite(tmp_path / "s", decoder="plug.py:make")
    run_dir = tmp_path / "run"
    assert run(suite, run_dir) == EXIT_OK
    run_file = json.loads((run_dir / "run.json").read_text())
    assert any(len(p.get("sha256") or "") == 64 for p in run_file["plugins"].values())
    plug = tmp_path / "s" / "plug.py"
    plug.write_text(plug.read_text() + "\n# changed\n")
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "changed" in err and "plug.py" in err and "Traceback" not in err


@pytest.mark.parametrize("mode", ["fra=99", "fra=-7", "counts=5", "counts=-1"])
def test_impossible_decoder_stats_are_invalid_output(tmp_path, capsys, mode):
    """k = 2: a first round accepts 0..2 drafts (-1: the row had no speculative round); 99, -7 (or a round
    count of 5) is not clipped into range."""
    suite = write_suite(tmp_path / "s", options=f'{{ mode = "{mode}", num_draft_tokens = 2 }}',
                        extra="num_draft_tokens = [2]\nmax_new_tokens = 3", tests='["gof", "accepted"]', expect="pass")
    assert run(suite, tmp_path / "run") == EXIT_DECODER
    out = capsys.readouterr().out
    value = mode.split("=")[1]
    allowed = "-1..2" if mode.startswith("fra") else "0..2"
    assert "row 0" in out and value in out and allowed in out


def test_plugin_path_to_a_non_python_file_is_a_config_error(tmp_path, capsys):
    (tmp_path / "plug.txt").write_text(PLUG.read_text())
    suite = write_suite(tmp_path / "s", decoder=f"{tmp_path / 'plug.txt'}:make")
    assert run(suite, tmp_path / "run") == EXIT_USAGE
    err = capsys.readouterr().err
    assert ".py" in err and "Traceback" not in err


def test_decoder_name_with_mathtext_still_gets_a_report(tmp_path):
    """'$...$' in a name crashed matplotlib after sampling and statistics (no report, exit 1)."""
    suite = write_suite(tmp_path / "s")
    suite.write_text(suite.read_text().replace('name = "plugin"', 'name = "a$x^$b_$\\\\frac$"'))
    run_dir = tmp_path / "run"
    assert run(suite, run_dir) == EXIT_OK
    html = (run_dir / "report.html").read_text()
    assert "a$x^$b_$\\frac$" in (run_dir / "report.md").read_text() and '<figure class="cell-figure"' in html


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0.0"])
def test_profile_sample_scale_must_be_finite_and_positive(tmp_path, capsys, value):
    suite = write_suite(tmp_path / "s")
    suite.write_text(suite.read_text() + f"[profiles.bad]\nsample_scale = {value}\n")
    assert run(suite, tmp_path / "run", "--profile", "bad") == EXIT_USAGE
    err = capsys.readouterr().err
    assert "profiles.bad.sample_scale" in err and "Traceback" not in err


@pytest.mark.parametrize("line, key", [("alpha = 5", "profiles.bad.alpha"), ("target_mde = -1", "profiles.bad.target_mde"),
                                       ("alpha = nan", "profiles.bad.alpha"), ("target_mde = 0", "profiles.bad.target_mde")])
def test_profile_stats_settings_are_checked_before_sampling(tmp_path, capsys, line, key):
    suite = write_suite(tmp_path / "s")
    suite.write_text(suite.read_text() + f"[profiles.bad]\n{line}\n")
    assert run(suite, tmp_path / "run", "--profile", "bad") == EXIT_USAGE
    assert key in capsys.readouterr().err
    assert not (tmp_path / "run" / "samples").exists()


def test_joint_window_longer_than_the_rows_is_a_config_error():
    raw = {"schema_version": 1, "name": "x", "models": {"m": {"target": "tabular:trigram3", "draft": "tabular:trigram3"}},
           "prompts": {"p": {"ids": [0, 1]}}, "sampling": {"t": {"temperature": 1.0}},
           "decoders": [{"name": "reference", "max_new_tokens": 2, "joint_tokens": 3, "tests": ["gof", "joint"]}]}
    with pytest.raises(ConfigError, match=r"decoders\[0\].joint_tokens=3 .*max_new_tokens=2"):
        parse_suite(raw)
    raw["decoders"][0]["tests"] = ["gof", "surprisal"]  # no joint cell asked for: the window may be shorter
    parse_suite(raw)


def test_cuda_device_without_cuda_is_refused_before_sampling(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    suite = write_suite(tmp_path / "s")
    assert run(suite, tmp_path / "run", "--device", "cuda") == EXIT_USAGE
    err = capsys.readouterr().err
    assert "device" in err and "cuda" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "samples").exists()


@pytest.mark.parametrize("line, key", [("samples = 1_000_000_000_000\nchunk_size = 1_000_000_000_000", "samples"),
                                       ("max_new_tokens = 1_000_000_000", "max_new_tokens")])
def test_sizes_beyond_memory_are_config_errors_before_sampling(tmp_path, capsys, line, key):
    suite = write_suite(tmp_path / "s", extra=line)
    assert run(suite, tmp_path / "run") == EXIT_USAGE
    err = capsys.readouterr().err
    assert key in err and "memory" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "samples").exists()


def test_samples_beyond_memory_with_small_chunks_fail_fast(tmp_path, capsys):
    """The issue's case: 10**12 samples in chunks of 100 grew memory until the machine died."""
    suite = write_suite(tmp_path / "s", extra="samples = 1_000_000_000_000")
    assert run(suite, tmp_path / "run") == EXIT_USAGE
    assert "samples" in capsys.readouterr().err


def test_a_failing_figure_is_left_out_not_the_report():
    """Malformed cell data (ragged PIT histograms) made a plot raise inside write_reports."""
    from verifier.reports import svg

    assert svg.cell_figure({"test": "pit", "effect_unit": "ks", "observed": [1, "x", 3], "decoder": "d"}) is None
    assert svg.cell_figure({"test": "gof@1", "effect_unit": "tv", "observed": [1, 2], "expected": [1, 2, 3]}) is None


def test_an_unknown_option_of_a_built_in_decoder_names_it_and_the_allowed_ones(tmp_path, capsys):
    suite = write_suite(tmp_path, decoder="reference", options="{ foo = 1 }", expect="pass")
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "options.foo = 1 is not an option of that decoder (decoder 'reference')" in err
    assert "allowed: eos_token_id, precision" in err  # kernel is the reference's own, not an option


@pytest.mark.parametrize("decoder, options, allowed", [
    ("reference", '{ kernel = "x" }', "allowed: eos_token_id, precision"),
    ("full_p_fallback", "{ name = 3 }", "allowed: eos_token_id, precision"),
    ("synthetic_acceptance", "{ foo = 1 }", "allowed: rates, eos_token_id, precision"),
    ("tree_reference", '{ rule = "canonical" }', "allowed: tree, kernel, proposal, eos_token_id"),
    ("recurrent_reference", "{ foo = 1 }", "allowed: skip_prob"),
])
def test_an_option_a_registered_decoder_sets_itself_is_named_with_the_real_options(tmp_path, capsys, decoder, options,
                                                                                   allowed):
    """kernel / rule / name are set by the registered factory (a mutant's kernel, a tree's rule, the registry name):
    the message listed them as allowed and passing one gave Python's 'got multiple values' text; synthetic_acceptance's
    own option ``rates`` was missing from the list, and recurrent_reference (whose defaults do not build on a
    non-recurrent pair) listed none."""
    suite = write_suite(tmp_path, decoder=decoder, options=options, expect="pass")
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    key = options.split()[1]
    assert f"options.{key} = " in err and "multiple values" not in err and allowed in err, err
    assert "Traceback" not in err


def test_a_recurrent_decoder_on_a_tabular_pair_is_a_config_error(tmp_path, capsys):
    """recurrent_reference wrapped the tabular target (config + forward, no weights) as a transformers state-space
    model and died on ``next(model.parameters())``: a StopIteration traceback and exit 3 from the job process."""
    suite = write_suite(tmp_path, decoder="recurrent_reference", expect="pass")
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "target='TabularCausalLM' is invalid" in err and "state-space" in err and "Traceback" not in err


def test_a_stop_rule_on_an_engine_adapter_that_declares_none_fails_before_sampling(tmp_path, capsys):
    """An EngineDecoder whose generate_keywords hold no stop rule (vLLM, mlx-lm, llama-cpp-python adapters): its
    generate signature has stop_token_ids / max_tokens, but the declaration decides -- exit 2 before a row is drawn."""
    import shutil

    suite = write_suite(tmp_path, decoder=f"{tmp_path / 'engine.py'}:make", extra="stop_token_ids = [2]\nmax_tokens = 2",
                        expect="pass", tests='["stop"]')
    shutil.copy(Path(__file__).parent / "_engine_plug.py", tmp_path / "engine.py")
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "sets stop_token_ids=[2] / max_tokens=2, but EngineDecoder.generate takes no stop_token_ids" in err, err
    assert not list((tmp_path / "run").glob("samples/**/*.npy")) and "Traceback" not in err


def test_a_generate_keywords_property_that_raises_is_a_decoder_error_naming_it(tmp_path, capsys):
    """The runner reads a decoder's declared keywords (verifier.validation.takes_generate_keyword) with a plain
    getattr: plugin code raising there killed the job process (a harness traceback, 'ended without writing its
    verdict'); now it is that decoder's ERROR (exit 3) naming the property."""
    plug = tmp_path / "liar.py"
    plug.write_text("import numpy as np\n\nclass Liar:\n    vocab_size, eos_token_id, name, last_stats = 4, 3, 'liar', None\n\n"
                    "    @property\n    def generate_keywords(self):\n        raise RuntimeError('boom')\n\n"
                    "    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed, **kw):\n"
                    "        return np.random.default_rng(seed).integers(0, 3, size=(num_samples, max_new_tokens))\n\n\n"
                    "def make():\n    return Liar()\n")
    suite = write_suite(tmp_path, decoder=f"{plug}:make", extra="stop_token_ids = [2]\nmax_tokens = 2", expect="pass",
                        tests='["stop"]')
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_DECODER
    out = capsys.readouterr()
    assert "reading its `generate_keywords` property raised RuntimeError: boom" in out.out + out.err
    assert "without writing its verdict" not in out.err


@pytest.mark.parametrize("value, allowed", [(1.5, "a number in (0, 1]"), (0.0, "a number in (0, 1]")])
def test_stats_target_mde_error_states_the_range_it_allows(value, allowed):
    """[stats] target_mde = 1 is accepted, but a refused value was told "allowed: a number in (0, 1)"."""
    raw = {"schema_version": 1, "name": "x", "models": {"m": {"target": "tabular:trigram3", "draft": "tabular:trigram3"}},
           "prompts": {"p": {"ids": [0, 1]}}, "sampling": {"t": {"temperature": 1.0}},
           "decoders": [{"name": "reference"}], "stats": {"target_mde": value}}
    with pytest.raises(ConfigError, match=rf"stats.target_mde={value} is invalid; allowed: {re.escape(allowed)}$"):
        parse_suite(raw, source="x.toml")
    raw["stats"]["target_mde"] = 1.0
    parse_suite(raw, source="x.toml")
