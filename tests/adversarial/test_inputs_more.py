"""Adversarial-tester findings 8, 9, 11-16: inputs that ended in a traceback, wrote outside the report
folder, counted the same samples twice or were silently ignored.  Each is a usage error (exit 2, a
VerifierError naming the key or flag, its value and what is allowed).

Every test failed before its fix.  No statistics: assertions are on exit codes, messages and files.
Runs use the trigram3 tabular pair, tiny n.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_OK, EXIT_USAGE, ConfigError
from verifier.runner.guards import check_sizes
from verifier.suite import parse_suite

from .test_audit_cli_inputs import PLUGIN

BASE = {
    "schema_version": 1, "name": "inp", "seed": 1,
    "exact": {"enabled": False},
    "models": {"tri": {"target": "tabular:trigram3", "draft": "tabular:trigram3"}},
    "prompts": {"p": {"ids": [0, 1]}, "q": {"ids": [1, 0]}},
    "sampling": {"t1": {"temperature": 1.0}},
    "defaults": {"max_new_tokens": 2, "samples": 20, "chunk_size": 20, "num_draft_tokens": [2],
                 "tests": ["gof"]},
    "decoders": [{"name": "ref", "decoder": "reference"}],
}

SUITE_TOML = """schema_version = 1
name = "inp"
seed = 1
[exact]
enabled = false
[models.tri]
target = "{target}"
draft = "tabular:trigram3"
[prompts.p]
ids = [0, 1]
[sampling.t1]
temperature = 1.0
[defaults]
max_new_tokens = 2
samples = 20
chunk_size = 20
num_draft_tokens = [2]
tests = ["gof"]
[[decoders]]
name = "ref"
decoder = "reference"
"""


def suite(**changes) -> dict:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        table, _, sub = key.partition("__")
        if sub:
            data[table][sub] = value
        else:
            data[table] = value
    return data


def write_toml(tmp_path: Path, target: str = "tabular:trigram3") -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(SUITE_TOML.format(target=target))
    return path


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "uniform_plugin.py"
    path.write_text(PLUGIN)
    return f"{path}:make"


# 8 -- a module:attr model spec whose call fails
def test_model_factory_that_fails_when_called_is_a_config_error(tmp_path, capsys):
    assert main(["run", str(write_toml(tmp_path, "json:loads")), "--run-dir", str(tmp_path / "run"),
                 "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "models.tri.target" in err and "json:loads" in err and "Traceback" not in err


# 9 -- an --export path that cannot be created, found before sampling
def test_unwritable_export_is_a_usage_error_before_sampling(plugin, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["audit", "--decoder", plugin, "--target", "tabular:trigram3", "--prompt-ids", "0,1",
                 "--num-samples", "20", "--max-new-tokens", "2", "--export", "/proc/x.jsonl"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "--export" in err and "/proc/x.jsonl" in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists()  # refused before any sampling


# 11 -- the suite name names a folder under --report-dir
@pytest.mark.parametrize("name", ["..", "."])
def test_suite_name_must_be_a_plain_folder_name(name):
    with pytest.raises(ConfigError, match=r"name='\.+'.*plain folder name"):
        parse_suite(suite(name=name))


# 12 -- repeated grid entries would count the same samples as separate evidence
@pytest.mark.parametrize("key,value,dup", [
    ("num_draft_tokens", [2, 2], "2"), ("gof_positions", [1, 2, 1], "1"), ("tests", ["gof", "gof"], "'gof'"),
    ("prompts", ["p", "q", "p"], "'p'"), ("sampling", ["t1", "t1"], "'t1'"),
])
@pytest.mark.parametrize("where", ["defaults", "decoder"])
def test_duplicate_grid_entries_are_refused(key, value, dup, where):
    data = suite()
    if where == "defaults":
        data["defaults"][key] = value
        path = f"defaults.{key}"
    else:
        data["decoders"][0][key] = value
        path = f"decoders[0].{key}"
    with pytest.raises(ConfigError) as info:
        parse_suite(data)
    assert f"{path}=" in str(info.value) and f"{dup} is repeated" in str(info.value)


def test_distinct_grid_entries_still_parse():
    parsed = parse_suite(suite(defaults__num_draft_tokens=[1, 2], defaults__gof_positions=[1, 2]))
    assert parsed.decoders[0].num_draft_tokens == (1, 2)


# 13 -- shards need one shared run folder; merging a folder twice double-counts it
def test_shard_without_run_dir_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(write_toml(tmp_path)), "--shard", "0/2", "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--shard" in err and "--run-dir" in err
    assert not (tmp_path / "reports").exists()


def test_merge_of_the_same_run_folder_twice_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    assert main(["run", str(write_toml(tmp_path)), "--shard", "0/1", "--run-dir", str(run_dir),
                 "--no-progress"]) == EXIT_OK
    capsys.readouterr()
    assert main(["merge", str(run_dir), str(tmp_path / "." / "run")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "RUN_DIR" in err and "once" in err
    assert not (tmp_path / "reports").exists()


# 14 -- audit flags that restate a property of the target must agree with it
@pytest.mark.parametrize("flag,value,expected", [
    ("--eos-token-id", "7", "0..2"), ("--vocab-size", "2", "value 3"),
])
@pytest.mark.parametrize("mode", ["known-p", "blackbox"])
def test_audit_model_flags_must_agree_with_the_target(plugin, tmp_path, capsys, monkeypatch, flag, value,
                                                      expected, mode):
    monkeypatch.chdir(tmp_path)
    extra = ["--blackbox-reference", "reference"] if mode == "blackbox" else []
    code = main(["audit", "--decoder", plugin, "--target", "tabular:trigram3", "--prompt-ids", "0,1",
                 "--num-samples", "20", "--max-new-tokens", "2", flag, value, *extra])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert f"{flag}={value}" in err and expected in err and "Traceback" not in err


# 15 -- a dtype that tabular models would silently ignore
def test_dtype_on_tabular_models_is_refused(tmp_path, capsys):
    data = suite()
    data["models"]["tri"]["dtype"] = "float16"
    with pytest.raises(ConfigError, match=r"models\.tri\.dtype='float16'"):
        parse_suite(data)
    assert main(["run", str(write_toml(tmp_path)), "--dtype", "bfloat16", "--run-dir", str(tmp_path / "run"),
                 "--no-progress"]) == EXIT_USAGE
    assert "--dtype='bfloat16'" in capsys.readouterr().err


def test_audit_half_dtype_on_tabular_models_is_refused(plugin, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--blackbox-reference", "reference"]):
        code = main(["audit", "--decoder", plugin, "--target", "tabular:trigram3", "--prompt-ids", "0,1",
                     "--num-samples", "20", "--max-new-tokens", "2", "--dtype", "float16", *extra])
        err = capsys.readouterr().err
        assert code == EXIT_USAGE and "--dtype='float16'" in err, err


# 16 -- huge numbers in an (otherwise correct) error message
def test_huge_sample_count_is_printed_compactly():
    data = suite(default_profile="x", profiles={"x": {"sample_scale": 1e300}})
    parsed = parse_suite(data).with_profile("x")
    with pytest.raises(ConfigError) as info:
        check_sizes(parsed, available=2**34)
    message = str(info.value)
    assert "samples=2e+301" in message and len(message) < 500, message
