"""URL-audit flags are refused where nothing reads them (exit 2 naming the flag, its value and what it needs).

Before the fix ``specverify audit --decoder reference --target tabular:trigram3 --unseeded`` ran a plain known-p audit
and ignored ``--unseeded`` (and every other flag of the ``--url`` group) without a word; the self-reported design's
``--collisions`` / ``--consistency-positions`` / ``--reported-logprobs`` were ignored by the known-target design.
Every refusal here comes before any model is sampled or any request sent (the URL is port 9: nothing listens).
"""

from __future__ import annotations

import pytest

from verifier.cli import main

KNOWN_P = ["audit", "--decoder", "reference", "--target", "tabular:trigram3", "--num-draft-tokens", "2",
           "--num-samples", "20", "--no-progress"]
URL_ONLY = [
    (["--unseeded"], "--unseeded=True"),
    (["--mixed-batch"], "--mixed-batch=True"),
    (["--concurrency-levels", "1,4"], "--concurrency-levels='1,4'"),
    (["--n-levels", "1,2"], "--n-levels='1,2'"),
    (["--num-concurrent", "8"], "--num-concurrent=8"),
    (["--api", "llama-server"], "--api='llama-server'"),
    (["--logprobs", "5"], "--logprobs=5"),
    (["--speculation-unverified"], "--speculation-unverified=True"),
    (["--collisions", "50"], "--collisions=50"),
    (["--floor-positions", "0"], "--floor-positions=0"),
]


@pytest.mark.parametrize("flags, shown", URL_ONLY, ids=[f[0] for f, _ in URL_ONLY])
def test_url_only_flag_without_url_is_a_usage_error(flags, shown, tmp_path, capsys):
    code = main([*KNOWN_P, *flags, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{shown} is invalid; allowed: with --url BASE_URL" in err and "it would be ignored" in err
    assert not (tmp_path / "run").exists()  # refused before the run folder


def test_url_only_flag_with_resume_says_the_stored_options_are_kept(tmp_path, capsys):
    code = main(["audit", "--resume", str(tmp_path / "nothing"), "--unseeded", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--unseeded=True is invalid; allowed: with --url BASE_URL" in err
    assert "--resume continues a URL audit with the options it was started with" in err


AT_DEFAULT = [
    (["--num-concurrent", "4"], "--num-concurrent=4"),
    (["--api", "openai-completions"], "--api='openai-completions'"),
    (["--speculation", "server"], "--speculation='server'"),
    (["--max-retries", "5"], "--max-retries=5"),
    (["--collisions", "200"], "--collisions=200"),
    (["--num-conc", "4"], "--num-concurrent=4"),  # an abbreviation argparse expands: the flag's own name is shown
]


@pytest.mark.parametrize("flags, shown", AT_DEFAULT, ids=[f[0] for f, _ in AT_DEFAULT])
def test_a_url_flag_at_its_default_value_is_refused_without_url(flags, shown, tmp_path, capsys):
    """Presence, not value: before the fix the check compared each value with its default, so ``--num-concurrent
    4`` (the default) ran a plain known-p audit and was ignored without a word."""
    code = main([*KNOWN_P, *flags, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{shown} is invalid; allowed: with --url BASE_URL" in err
    assert not (tmp_path / "run").exists()


def test_the_first_url_flag_given_is_the_one_named(tmp_path, capsys):
    code = main([*KNOWN_P, "--unseeded", "--num-concurrent", "4", "--run-dir", str(tmp_path / "run")])
    assert code == 2 and "--unseeded=True is invalid" in capsys.readouterr().err


def test_self_reported_only_flag_at_its_default_is_refused_by_the_other_designs(tmp_path, capsys):
    code = main(["audit", "--url", "http://127.0.0.1:9", "--target", "tabular:trigram3", "--consistency-positions", "32",
                 "--no-progress", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--consistency-positions=32 is invalid; allowed: with --design self-reported" in err


@pytest.mark.parametrize("flags, shown", [(["--collisions", "50"], "--collisions=50"),
                                          (["--consistency-positions", "8"], "--consistency-positions=8"),
                                          (["--reported-logprobs", "raw"], "--reported-logprobs='raw'")])
def test_self_reported_only_flags_are_refused_by_the_other_designs(flags, shown, tmp_path, capsys):
    code = main(["audit", "--url", "http://127.0.0.1:9", "--target", "tabular:trigram3", *flags, "--no-progress",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{shown} is invalid; allowed: with --design self-reported (the known-target design does not use it)" in err
