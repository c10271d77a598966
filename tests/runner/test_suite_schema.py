"""Suite schema: strict keys, types, references, profiles; CLI exit code 2 with a clear message."""

from __future__ import annotations

import pytest

from verifier.cli import main
from verifier.errors import EXIT_USAGE, ConfigError
from verifier.suite import load_suite

from .conftest import EXACT_DECODER, TINY, suite_text


def test_tiny_suite_loads_and_profiles_scale_budgets():
    ci = load_suite(TINY)
    nightly = load_suite(TINY, "nightly")
    assert ci.profile == "ci" and nightly.profile == "nightly"
    assert [d.samples for d in ci.decoders] == [1200, 1200]
    assert [d.samples for d in nightly.decoders] == [9600, 9600]  # built-in nightly scale 8
    audit = load_suite(TINY, "audit")
    assert audit.stats.correction == "audit" and audit.stats.alpha == 0.05
    assert ci.decoders[1].options == {"bias": 0.5} and ci.decoders[1].expect == "detect"


@pytest.mark.parametrize(
    "text, message",
    [
        ("schema_version = 1\nname = 'x'\nbogus = 1\n", r"unknown key 'bogus'; allowed keys: \['decoders', 'default_profile'"),
        (suite_text(EXACT_DECODER.replace('expect = "pass"', 'expect = "pass"\nsamplez = 3')),
         r"unknown key 'decoders\[0\]\.samplez' in \[decoders\[0\]\]; allowed keys: \[.*'samples'"),
        (suite_text(EXACT_DECODER + 'samples = "many"\n'), r"decoders\[0\]\.samples='many' is invalid; allowed: int"),
        (suite_text(EXACT_DECODER + "tests = ['gof', 'ks-on-ids']\n"), r"decoders\[0\]\.tests='ks-on-ids' is invalid; allowed: 'gof' \| 'joint'"),
        (suite_text(EXACT_DECODER.replace('expect = "pass"', 'expect = "pass"\nsampling = ["t9"]')),
         r"decoders\[0\]\.sampling='t9' is invalid; allowed: names defined under \[sampling\]: \['t1'\]"),
        (suite_text(EXACT_DECODER.replace('expect = "pass"', 'expect = "maybe"')), r"expect='maybe' is invalid; allowed: 'pass' \| 'detect'"),
        (suite_text(EXACT_DECODER, stats="alpha = 2"), r"stats\.alpha=2\.0 is invalid; allowed: a number in \(0, 1\)"),
        (suite_text(EXACT_DECODER, stats="correction = 'bonferroni'"), r"stats\.correction='bonferroni' is invalid; allowed: 'gate' \| 'audit'"),
        (suite_text(EXACT_DECODER).replace("schema_version = 1", "schema_version = 2"), r"schema_version=2 is invalid"),
        (suite_text(EXACT_DECODER) + "\n[sampling.bad]\ntemperature = -1.0\n", r"temperature=-1\.0 is invalid"),
        ("schema_version = 1\nname = 'x'\n[decoders\n", r"malformed TOML"),
    ],
    ids=["unknown-top", "unknown-nested", "wrong-type", "unknown-test", "undefined-ref", "bad-expect",
         "alpha-range", "bad-correction", "schema-version", "bad-temperature", "malformed"],
)
def test_bad_suites_name_key_value_and_allowed(write_suite, text, message):
    path = write_suite(text)
    with pytest.raises(ConfigError, match=message):
        load_suite(path)


def test_unknown_profile(write_suite):
    path = write_suite(suite_text(EXACT_DECODER))
    with pytest.raises(ConfigError, match=r"profile='weekly' is not defined; allowed: \['audit', 'ci', 'nightly'\]"):
        load_suite(path, "weekly")


def test_suite_defined_profile(write_suite):
    path = write_suite(suite_text(EXACT_DECODER) + "\n[profiles.smoke]\nsample_scale = 0.5\ntarget_mde = 0.3\n")
    suite = load_suite(path, "smoke")
    assert suite.decoders[0].samples == 300 and suite.stats.target_mde == 0.3


@pytest.mark.parametrize("text", ["schema_version = 1\nname = 'x'\nbogus = 1\n", "not toml = = =\n"])
def test_cli_config_errors_exit_2_without_traceback(write_suite, capsys, text, tmp_path):
    code = main(["run", str(write_suite(text)), "--report-dir", str(tmp_path / "r"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "ConfigError" in err and "Traceback" not in err


def test_missing_suite_file(capsys, tmp_path):
    assert main(["run", str(tmp_path / "nope.toml")]) == EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err
