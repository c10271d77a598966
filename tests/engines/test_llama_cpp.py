"""``llama.cpp``: the real ``llama-speculative`` binary (ids-printing copy) on the shipped models, f32 GGUF.

Known verdicts (reports/audits/llama.cpp-0.3.36/FINDINGS.md):

* as shipped, the draft token is the draft's most probable candidate while the acceptance ratio
  uses the draft's softmax prob (``greedy_draft`` of the bug zoo): token 2 (the first drafted
  position) is biased -- BIAS DETECTED at small n;
* the CONTROL with only that line patched (``control=sampled_draft``) shows no bias at T=1 without
  truncation.

Run time: about 60-90 s in all on 2 loaded cores (about 10-25 binary runs/s).
"""

import json

import pytest

from verifier.cli import main

ENGINE = "llama.cpp"


@pytest.fixture
def engine(require_engine):
    return require_engine(ENGINE)


def _audit(tmp_path, *extra):
    return main(["audit", "--engine", ENGINE, "--num-draft-tokens", "1", "--max-new-tokens", "2", "--no-progress",
                 "--run-dir", str(tmp_path / "run"), "--json", str(tmp_path / "v.json"), *extra])


def test_engine_as_shipped_is_biased_at_the_first_drafted_token(engine, tmp_path, capsys):
    """n = 400, seed 0, alpha 1e-3: the greedy-draft law of token 2 is far from the target's
    (TV about 0.2 on the shipped models at T=1, prompt 'def '), so the audit must say BIAS (exit 1)."""
    code = _audit(tmp_path, "--num-samples", "400", "--seed", "0")
    out = capsys.readouterr().out
    assert code == 1, out
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["verdict"] == "BIAS DETECTED"
    biased = {c["test"] for c in verdict["cells"] if c.get("pvalue") is not None and c["pvalue"] < 1e-4}
    assert "gof@2" in biased, biased
    assert "gof@1" not in biased  # token 1 is a plain target sample: unaffected


@pytest.mark.full  # 12 s; the quick tier keeps the as-shipped finding (and llama-cpp-python's no-bias smoke test)
def test_control_with_the_draft_token_patched_shows_no_bias(engine, tmp_path, capsys):
    """Same setting, control=sampled_draft, n = 400, target TV 0.25 (every cell powered at n = 400):
    PASS; a correct engine fails this with prob <= 1e-3."""
    code = _audit(tmp_path, "--num-samples", "400", "--seed", "0", "--target-tv", "0.25", "--engine-arg", "control=sampled_draft")
    assert code == 0, capsys.readouterr().out


def test_penalties_and_min_p_go_into_the_binarys_chain_in_the_harness_order():
    """Issue 29 kind 3: presence/frequency penalties first (llama-speculative's window is the generated tokens, the
    harness's), min-p after top-p; none of them silently dropped (no binary needed)."""
    from verifier.engines._llama_cpp_run import LlamaCppDecoder
    from verifier.sampling import SamplingConfig

    args = LlamaCppDecoder.sampling_args(None, SamplingConfig(temperature=0.7, top_k=8, presence_penalty=0.5,
                                                              frequency_penalty=0.25, min_p=0.1))
    flags = dict(zip(args[::2], args[1::2]))
    assert flags["--samplers"] == "penalties;top_k;temperature;top_p;min_p"
    assert (flags["--presence-penalty"], flags["--frequency-penalty"], flags["--min-p"]) == ("0.5", "0.25", "0.1")
    assert flags["--repeat-penalty"] == "1.0"
    plain = dict(zip(*[iter(LlamaCppDecoder.sampling_args(None, SamplingConfig()))] * 2))
    assert plain["--samplers"] == "top_k;temperature;top_p" and plain["--min-p"] == "0.0"


@pytest.mark.full  # ~60 s of binary runs
def test_control_with_penalties_shows_no_bias(engine, tmp_path, capsys):
    """control=both (the two speculation defects patched), presence 0.5 + frequency 0.5 at T = 1, n = 400, k = 1,
    3 tokens, target TV 0.25, seed 0: PASS (a correct engine fails with prob <= 1e-3)."""
    code = main(["audit", "--engine", ENGINE, "--num-draft-tokens", "1", "--max-new-tokens", "3", "--no-progress",
                 "--run-dir", str(tmp_path / "run"), "--num-samples", "400", "--seed", "0", "--target-tv", "0.25",
                 "--presence-penalty", "0.5", "--frequency-penalty", "0.5", "--engine-arg", "control=both"])
    assert code == 0, capsys.readouterr().out


def test_bad_options_are_usage_errors(engine, tmp_path, capsys):
    assert _audit(tmp_path, "--engine-arg", "control=bogus") == 2
    assert "control" in capsys.readouterr().err
    assert _audit(tmp_path, "--engine-arg", "processes=0") == 2
    assert main(["audit", "--engine", ENGINE, "--target", "tabular:trigram3", "--run-dir", str(tmp_path / "r2")]) == 2


def test_a_failing_binary_is_a_decoder_error_exit_3(engine, tmp_path):
    """A binary that exits non-zero (here: a target file that is no GGUF) is a DecoderError (exit 3) with its stderr.
    (A too-small ctx_size is no crash: llama.cpp pads the context.)"""
    from verifier.engines.llama_cpp import decoder
    from verifier.errors import DecoderError
    from verifier.sampling import SamplingConfig

    dec = decoder(num_draft_tokens=1)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    dec.target_gguf = bad
    with pytest.raises(DecoderError, match="llama-speculative exited") as info:
        dec.generate([272, 70, 221], 2, 2, SamplingConfig(temperature=1.0), seed=1)
    assert info.value.exit_code == 3


def test_repetition_penalty_is_refused_not_dropped(engine, tmp_path, capsys):
    """Refused inside generate: a usage error (exit 2), not a decoder crash (exit 3, as before the fix)."""
    assert _audit(tmp_path, "--num-samples", "4", "--repetition-penalty", "1.3") == 2
    captured = capsys.readouterr()
    assert "repetition-penalty" in captured.out + captured.err


def test_a_prompt_the_binary_tokenizes_differently_is_refused_in_a_suite_run(engine, tmp_path, capsys):
    """Prompt ids [221, 221] decode to two spaces, which the tokenizer (and the binary) encode as [257]: the
    binary would sample after another prompt, so generate refuses it -- exit 2 also inside a suite run (was
    exit 3, "decoder crashed", before the fix)."""
    from verifier.engines.llama_cpp import decoder
    from verifier.errors import SamplingRefusedError
    from verifier.sampling import SamplingConfig

    with pytest.raises(SamplingRefusedError, match="prompt_ids") as info:
        decoder(num_draft_tokens=1).generate([221, 221], 1, 2, SamplingConfig(temperature=1.0), seed=1)
    assert info.value.exit_code == 2
    suite = tmp_path / "suite.toml"
    suite.write_text("""schema_version = 1
name = "llama-prompt"
seed = 1
[exact]
enabled = false
[models.shipped]
target = "shipped:target"
draft = "shipped:draft"
[prompts.spaces]
ids = [221, 221]
[sampling.t1]
temperature = 1.0
[defaults]
models = "shipped"
prompts = ["spaces"]
sampling = ["t1"]
num_draft_tokens = [1]
max_new_tokens = 2
samples = 4
tests = ["gof"]
[[decoders]]
name = "llama.cpp"
decoder = "verifier.engines.llama_cpp:decoder"
options = { target_model = "shipped:target", draft_model = "shipped:draft" }
expect = "pass"
""")
    assert main(["run", str(suite), "--no-progress", "--run-dir", str(tmp_path / "run")]) == 2
    assert "prompt_ids" in capsys.readouterr().err


def test_engine_statistics_come_from_the_binary(engine):
    from verifier.engines.llama_cpp import decoder
    from verifier.sampling import SamplingConfig

    dec = decoder(num_draft_tokens=3, processes=2)
    out = dec.generate([0], 6, 6, SamplingConfig(temperature=1.0), seed=5)
    again = dec.generate([0], 6, 6, SamplingConfig(temperature=1.0), seed=5)
    assert (out == again).all() and out.shape == (6, 6)
    stats = dec.last_stats
    # per row, the printed n_accept equals the accept flags (generate raises otherwise); rows whose async log lost
    # the totals are counted, not added as 0; completed rounds never exceed the flags
    assert stats.extra["engine_accepted"] <= stats.extra["flagged_accepted"]
    assert stats.extra["rows_without_engine_totals"] < 6 or stats.extra["engine_accepted"] == 0
    assert int(stats.accepted_counts.sum()) <= stats.extra["flagged_accepted"]
    assert set(stats.accepted_counts.tolist()) <= {0, 1, 2, 3}
    if stats.extra["rows_without_engine_totals"] == 0:  # else the drafted total covers fewer rows than the rounds (seen under load)
        assert stats.extra["engine_drafted"] >= stats.rounds
    # per-token origins from the accept flags: token 1 is a plain target sample, drafts accepted = origin 0
    assert stats.origins.shape == out.shape and (stats.origins[:, 0] == 2).all()
    assert int((stats.origins == 0).sum()) <= stats.extra["flagged_accepted"]
