"""The pytest plugin (verifier.pytest_plugin), driven through pytester as a user would load it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# pytester runs in-process and unloads every module first imported by an inner run; compiled
# extensions (numpy.fft, torch) cannot be loaded twice, so load what the inner runs use up front.
import verifier.api  # noqa: F401,E402
import verifier.pytest_plugin  # noqa: F401,E402
import verifier.reports  # noqa: F401,E402
import verifier.pipeline  # noqa: F401,E402  (the run order: imports the runner's stages)
import verifier.suite.schema  # noqa: F401,E402

pytest_plugins = ["pytester"]

def _registered_entry_point() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value == "verifier.pytest_plugin" for ep in entry_points(group="pytest11"))


# Loaded by its pytest11 entry point once pyproject registers it.  Under any entry-point name other
# than the module's own, `-p` on top of it would register the module twice (pluggy refuses), so the
# flag is only passed while the entry point is absent.
PLUGIN = () if _registered_entry_point() else ("-p", "verifier.pytest_plugin")


def test_help_groups_prefixed_options_with_metavars_and_defaults(pytester):
    result = pytester.runpytest(*PLUGIN, "--help")
    assert result.ret == 0
    out = result.stdout.str()
    assert "spec-verifier (statistical verification of speculative decoders)" in out
    for option, metavar in (("--verifier-profile", "NAME"), ("--verifier-seed", "INT"), ("--verifier-report-dir", "DIR")):
        assert f"{option}={metavar}" in out, option
    help_block = out[out.index("--verifier-profile"):]
    assert help_block.count("Default:") >= 3
    assert "Default: ci" in help_block


def test_header_shows_resolved_options(pytester):
    pytester.makepyfile("def test_nothing():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest(*PLUGIN, "--verifier-profile=nightly", "--verifier-seed=7")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["spec-verifier: profile=nightly seed=7 report-dir=*reports*pytest"])


def test_ini_key_sets_the_profile(pytester):
    pytester.makeini("[pytest]\nverifier_profile = audit\n")
    pytester.makepyfile(
        """
        def test_options(verifier_options):
            assert verifier_options.profile == "audit"
            assert verifier_options.seed is None
        """
    )
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)


@pytest.mark.parametrize("args, message", [
    (("--verifier-seed=-3",), "--verifier-seed='-3' is invalid; allowed: an integer >= 0"),
    (("--verifier-seed=abc",), "--verifier-seed='abc' is invalid"),
    (("--verifier-profile=fast",), "invalid choice: 'fast'"),
])
def test_bad_option_is_a_usage_error(pytester, args, message):
    result = pytester.runpytest(*PLUGIN, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_seed_option_reaches_plain_api_calls(pytester):
    """--verifier-seed is exported for verifier.api calls that pass seed=None."""
    pytester.makepyfile(
        """
        import os
        def test_env():
            assert os.environ["SPECVERIFY_SEED"] == "123"
        """
    )
    before = os.environ.get("SPECVERIFY_SEED")
    pytester.runpytest(*PLUGIN, "--verifier-seed=123").assert_outcomes(passed=1)
    assert os.environ.get("SPECVERIFY_SEED") == before  # restored when the run ends


def test_no_summary_section_when_nothing_ran(pytester):
    pytester.makepyfile("def test_nothing():\n    assert True\n")
    result = pytester.runpytest(*PLUGIN)
    assert "spec-verifier summary" not in result.stdout.str()


_IMPORT_PROBE = textwrap.dedent(
    """
    import importlib.util, sys, types
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "numpy", "scipy", "transformers", "statsmodels"}:
                raise ImportError(f"{name} blocked by the test")
    sys.meta_path.insert(0, Block())
    # the package without running verifier/__init__.py: only the plugin module's own imports run
    spec = importlib.util.find_spec("verifier")
    pkg = types.ModuleType("verifier")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["verifier"] = pkg
    import verifier.pytest_plugin
    print("OK")
    """
)


def test_plugin_module_imports_nothing_heavy():
    """The plugin module itself loads with torch, numpy, scipy, transformers and statsmodels blocked."""
    proc = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


_NO_TORCH_PROBE = textwrap.dedent(
    """
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "transformers"}:
                raise ImportError(f"{name} blocked by the test")
    sys.meta_path.insert(0, Block())
    try:
        import verifier
    except ImportError as exc:
        print("PACKAGE", exc)
        sys.exit(3)
    import verifier.pytest_plugin
    print("OK")
    """
)


def test_plugin_imports_without_torch():
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH_PROBE], capture_output=True, text=True, timeout=120)
    if proc.returncode == 3:
        pytest.skip("verifier/__init__.py imports torch eagerly (" + proc.stdout.strip() + "); "
                    "the plugin module itself is lazy, see test_plugin_module_imports_nothing_heavy")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


_CHECK_TESTS = '''
from verifier.decoders.kernels import full_p_fallback_kernel
from verifier.decoders.speculative import AncestralDecoder, SpeculativeDecoder
from verifier.exact import TabularLM
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig

TARGET = TabularLM({(): ("1/5", "1/2", "3/10")}, vocab_size=3, context_len=0)
DRAFT = TabularLM({(): ("0", "0", "1")}, vocab_size=3, context_len=0)

def test_reference(verifier_check):
    result = verifier_check(AncestralDecoder(TabularCausalLM(TARGET)), TARGET, [[0]], SamplingConfig(),
                            num_samples=100, max_new_tokens=2, name="ancestral")
    assert result.seed == 5 and result.num_samples == 400  # audit profile: 4x the written budget

def test_mutant(verifier_check):
    mutant = SpeculativeDecoder(TabularCausalLM(TARGET), TabularCausalLM(DRAFT), 1, kernel=full_p_fallback_kernel)
    verifier_check(mutant, TARGET, [[0]], SamplingConfig(), num_samples=100, max_new_tokens=2, name="full-p-fallback")
'''


def test_check_fixture_records_verdicts_in_the_summary(pytester):
    """Full-p fallback with a one-hot draft (exact TV 0.21) at n=100 x 4 (audit profile) = 400, alpha
    1e-3: detected (power > 0.999, see test_api); the ancestral sampler passes.  The summary lists
    both; the failure names the seed."""
    pytester.makepyfile(test_checks=_CHECK_TESTS)
    result = pytester.runpytest(*PLUGIN, "--verifier-seed=5", "--verifier-profile=audit", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*= spec-verifier summary =*",
        "profile=audit seed=5",
        "PASS*check ancestral*(test_checks.py::test_reference)*seed=5",
        "BIAS DETECTED*check full-p-fallback*(test_checks.py::test_mutant)*seed=5",
        "2 spec-verifier check(s)/suite(s), 1 not passing",
    ])
    flag = " -p verifier.pytest_plugin" if PLUGIN else ""
    result.stdout.fnmatch_lines([f"*reproduce: python -m pytest test_checks.py::test_mutant{flag} --verifier-seed=5*"])


def test_failing_check_shows_the_cells_and_the_reproduce_command_first(pytester):
    """A failing verifier_check printed 134 lines, mostly the source and docstring of assert_preserves_target
    (issue 16); the harness frames are hidden (__tracebackhide__): the failure section is the test's own
    line, then the failing cells and the reproduce command.  Same mutant, n and alpha as above."""
    pytester.makepyfile(test_checks=_CHECK_TESTS)
    result = pytester.runpytest(*PLUGIN, "--verifier-seed=5", "--verifier-profile=audit", "-p", "no:cacheprovider",
                                "test_checks.py::test_mutant")
    result.assert_outcomes(failed=1)
    out = result.stdout.lines
    start = next(i for i, line in enumerate(out) if "_ test_mutant _" in line)
    end = next(i for i, line in enumerate(out) if i > start and ("short test summary" in line or "spec-verifier summary" in line))
    section = out[start:end]
    text = "\n".join(section)
    assert "def assert_preserves_target" not in text and "def check(" not in text
    assert "Parameters" not in text and "__tracebackhide__" not in text
    assert "gof@1" in text and "reproduce: python -m pytest test_checks.py::test_mutant" in text
    assert len(section) <= 40, text


def test_suite_fixture_runs_suites_and_reports_failed_expectations(pytester):
    """The sharding suite as is (reference pass, mutant detect: expectations met), and a copy that
    wrongly expects the full-p-fallback mutant to pass: that test fails naming the decoder, its
    rejected cells and a reproduce command."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    suite = root / "tests" / "integration" / "suites" / "shard.toml"
    text = suite.read_text().replace('python_path = ["../../.."]', f'python_path = ["{root}"]')
    wrong = text.replace('name = "full-p-fallback"\ndecoder = "tests.integration.shard_plugins:full_p_fallback"\nexpect = "detect"',
                         'name = "full-p-fallback"\ndecoder = "tests.integration.shard_plugins:full_p_fallback"\nexpect = "pass"')
    assert wrong != text
    pytester.path.joinpath("wrong.toml").write_text(wrong)
    pytester.makepyfile(test_suites=f'''
def test_good(verifier_suite):
    outcome = verifier_suite({str(suite)!r})
    outcome.assert_ok()
    assert outcome.report["suite"]["seed"] == 3 and (outcome.run_dir / "junit.xml").is_file()

def test_wrong(verifier_suite):
    verifier_suite("wrong.toml").assert_ok()
''')
    result = pytester.runpytest(*PLUGIN, "--verifier-seed=3", "--verifier-report-dir=out", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*spec-verifier suite wrong.toml: FAIL (exit code 1)",
        "*full-p-fallback: expected pass, got BIAS DETECTED*",
        "*diagnosis: full_p_fallback: after a rejected draft, the replacement token is resampled from the full target*",
        "*full-p-fallback/zero/t1/k=*/gof@1  BIAS  p=*  adj. p=*  effect tv *(CI *",
        "*reproduce: specverify run wrong.toml --profile ci --report-dir *out --no-progress --seed 3",
    ])
    result.stdout.fnmatch_lines([
        "*= spec-verifier summary =*",
        "PASS *suite */shard.toml*(test_suites.py::test_good)*report *out/shard/*",
        "FAIL *suite wrong.toml*(test_suites.py::test_wrong)*expectation failed: full-p-fallback (mechanism full_p_fallback)*",
    ])
