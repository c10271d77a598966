"""``llama-cpp-python``: ``Llama(draft_model=...)`` + ``Llama.generate``, the real library on the shipped models.

Its speculative path keeps a proposal while it equals a fresh target sample (lossless for any
proposals), so the known verdict is no bias; the draft here is the library's own
``LlamaPromptLookupDecoding`` on a prompt with repeats (so it proposes tokens).

Run time: about 60 s in all on 2 loaded cores (model load ~1 s, a few hundred samples/s... measured in the README).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.errors import InvalidArgumentError

ENGINE = "llama-cpp-python"
PROMPT = "def f(x):\n    return x\ndef f("  # the prompt-lookup draft finds 'def f(' earlier and proposes 'x):...'


@pytest.fixture
def engine(require_engine):
    return require_engine(ENGINE)


def _audit(tmp_path, *extra):
    return main(["audit", "--engine", ENGINE, "--prompt", PROMPT, "--num-draft-tokens", "3", "--max-new-tokens", "3",
                 "--no-progress", "--run-dir", str(tmp_path / "run"), *extra])


def test_prompt_lookup_speculation_shows_no_bias(engine, tmp_path, capsys):
    """n = 300, seed 0, target TV 0.3 (every cell powered at n = 300): PASS; a correct engine
    fails this with prob <= 1e-3.  Drafts are proposed and accepted (engine statistics)."""
    code = _audit(tmp_path, "--num-samples", "300", "--seed", "0", "--target-tv", "0.3")
    assert code == 0, capsys.readouterr().out


def test_engine_logits_match_the_reference(engine):
    """The numeric floor: the engine's f32 target logits after the prompt vs the Hugging Face target (float64)."""
    import torch

    from verifier.engines.llama_cpp_python import decoder
    from verifier.models.loading import load_model, load_tokenizer

    ids = load_tokenizer("shipped:target")(PROMPT)["input_ids"]
    dec = decoder(num_draft_tokens=2)
    try:
        engine_logits = dec.target_logits(ids)
        tokens = dec.generate(ids, 8, 3, _sampling(1.0), seed=3)
    finally:
        dec.close()
    model = load_model("shipped:target")
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0, -1].double()
    p_engine = torch.softmax(torch.from_numpy(engine_logits), -1)
    tv = 0.5 * float((p_engine - torch.softmax(ref, -1)).abs().sum())
    assert tv < 1e-3, tv  # measured 1.8e-4 (f32 GGUF through ggml vs f32 torch): the floor, far below the audits' TV 0.03
    assert tokens.shape == (8, 3) and (tokens >= 0).all()
    assert dec.last_stats is not None and dec.last_stats.rounds > 0  # the prompt-lookup draft proposed


def _sampling(t, **kw):
    from verifier.sampling import SamplingConfig

    return SamplingConfig(temperature=t, **kw)


def test_top_p_with_temperature_is_refused(engine, tmp_path, capsys):
    """The library applies top-p before temperature: T=0.7 with top-p is not the Hugging Face law -> refused, not dropped
    (a usage error, exit 2: the refusal raised inside generate used to be reported as a decoder crash, exit 3)."""
    assert _audit(tmp_path, "--num-samples", "4", "--temperature", "0.7", "--top-p", "0.9") == 2
    captured = capsys.readouterr()
    assert "top-p" in captured.out + captured.err


def test_bad_option_is_a_usage_error(engine, tmp_path, capsys):
    assert _audit(tmp_path, "--engine-arg", "draft=medusa") == 2
    assert "draft" in capsys.readouterr().err


def test_engine_error_is_a_crash_exit_3(engine, tmp_path, capsys):
    """n_ctx=8 is shorter than the prompt: the library raises (ValueError) inside the worker -> exit 3."""
    assert _audit(tmp_path, "--num-samples", "4", "--engine-arg", "n_ctx=8") == 3
    captured = capsys.readouterr()
    assert "raised" in captured.out + captured.err


def test_same_seed_same_rows(engine):
    from verifier.engines.llama_cpp_python import decoder

    dec = decoder(num_draft_tokens=2)
    try:
        a = dec.generate([5, 6, 7, 5, 6], 5, 4, _sampling(1.0), seed=11)
        b = dec.generate([5, 6, 7, 5, 6], 5, 4, _sampling(1.0), seed=11)
    finally:
        dec.close()
    assert np.array_equal(a, b)


def test_model_draft_origins_follow_the_target_match_rule(engine):
    """draft=model (k greedy tokens of the draft GGUF behind the library's LlamaDraftModel extension point): token 1 is
    a plain target sample (origin 2); a token with origin 0 equals the draft's greedy proposal, so an accepted token
    at position 2 is the same token in every row with the same token 1 (the draft is deterministic given the context)."""
    from verifier.engines.llama_cpp_python import decoder

    dec = decoder(num_draft_tokens=2, draft="model")
    try:
        rows = dec.generate([272, 70, 221], 12, 3, _sampling(1.0), seed=3)
        origins = dec.last_stats.origins
    finally:
        dec.close()
    assert origins.shape == rows.shape and (origins[:, 0] == 2).all()
    assert set(np.unique(origins[rows >= 0]).tolist()) <= {0, 1, 2}
    proposal = {}
    for row, orig in zip(rows, origins):
        if orig[1] == 0:
            assert proposal.setdefault(int(row[0]), int(row[1])) == int(row[1])


# one-character stop string "s": the 11 tokens whose text holds an "s" (verifier/engines/_stop_strings.py)
S_TOKENS = (83, 262, 274, 287, 304, 307, 321, 323, 350, 359, 369)


def test_stop_rule_goes_through_create_completion_and_rows_come_back_uncut(engine):
    """Issue 29, kind 5: stop tokens S_TOKENS go to ``create_completion(stop=["s"], max_tokens=6)`` (draft=model,
    k = 3, T = 1, 60 rows, seed 5); every row ends right after its first stop token or EOS, none is longer than 6, and
    it is the row ``generate`` yields without the stop rule, cut there (same seeds).  Can fail: those uncut rows --
    what a stop-ignoring engine returns -- break the deterministic stop-rule cell's check (about half the rows run past)."""
    from tests.engines.stop_rows import rows_are_the_uncut_rows_stopped, rows_ended_at_stops
    from verifier.engines.llama_cpp_python import decoder
    from verifier.runner.stop import stop_ends, takes_stop_rule

    dec = decoder(num_draft_tokens=3, draft="model")
    try:
        assert takes_stop_rule(dec)
        rows = dec.generate([272, 70, 221], 60, 8, _sampling(1.0), seed=5, stop_token_ids=S_TOKENS, max_tokens=6)
        extra = dec.last_stats.extra
        free = dec.generate([272, 70, 221], 60, 8, _sampling(1.0), seed=5)
    finally:
        dec.close()
    assert extra["stop_strings"] == ["s"] and sum(extra["finish_reasons"].values()) == 60
    assert rows.shape == (60, 8) and (rows[:, 6:] == -1).all()
    assert rows_ended_at_stops(rows, S_TOKENS + (0,), max_tokens=6) >= 15
    assert rows_are_the_uncut_rows_stopped(rows, free, stop_ends(S_TOKENS, 0), 6) >= 15


def test_stop_ids_a_string_cannot_express_are_refused_before_the_engine_starts(engine):
    """Stop id 83 ('s') alone: the string "s" would also stop at the 10 other tokens holding an "s" -- exit-2 error
    naming them; id 272 ('de', two characters): refused; the worker never starts."""
    from verifier.engines.llama_cpp_python import decoder

    dec = decoder(num_draft_tokens=3, draft="model")
    with pytest.raises(InvalidArgumentError, match=r"stop_token_ids=\[83\].*missing \[262, 274"):
        dec.generate([272, 70, 221], 4, 8, _sampling(1.0), seed=1, stop_token_ids=(83,), max_tokens=6)
    with pytest.raises(InvalidArgumentError, match=r"stop_token_ids=\[272\].*one ASCII character"):
        dec.generate([272, 70, 221], 4, 8, _sampling(1.0), seed=1, stop_token_ids=(272,), max_tokens=6)
    assert dec._worker is None


def test_a_utf8_lead_byte_makes_create_completion_skip_its_stop_checks(engine):
    """Engine defect (llama_cpp/llama.py 1421-1431, ``multibyte_fix``): after a token that ends in an incomplete UTF-8
    lead byte (0xE2, a 3-byte character's first byte) ``_create_completion`` ``continue``s over the stop-string and
    ``max_tokens`` checks for the next token too, so a stop token right after it is followed by one more token, and
    ``max_tokens = 6`` yields 7.  Forced tokens (logits processor), prompt "def "; the controls without the lead byte
    stop at the stop token and at 6.  The harness's stop-rule check flags both rows, passes the controls."""
    from verifier.engines._llama_common import gguf_path
    from verifier.engines.bridge import EngineWorker
    from verifier.runner.stop import stop_ends, stop_violations

    root = engine.require_installed()
    worker = EngineWorker(engine.python(), Path(__file__).parent / "handlers" / "llama_forced_completion.py",
                          name="llama-forced", init={"target_gguf": str(gguf_path(root, "shipped:target", "target_model"))},
                          env={"LLAMA_CPP_LIB_PATH": str(root / "build" / "bin")})
    try:
        lead = int(worker.call("byte_token", value=0xE2)["id"])
        f, s = 70, 83  # 'f', 's'
        runs = {name: worker.call("completion", prompt_ids=[272, 70, 221], forced=forced, stop=stop, max_tokens=6, seed=3)
                for name, forced, stop in (("stop", [f, f, lead, s], ["s"]), ("stop control", [f, f, f, s], ["s"]),
                                           ("limit", [f, f, f, f, lead, f], []), ("limit control", [f] * 6, []))}
    finally:
        worker.close()
    pulled = {name: np.asarray(r["pulled"]).tolist() for name, r in runs.items()}
    assert pulled["stop"][:4] == [f, f, lead, s] and len(pulled["stop"]) == 5  # one token after the stop token
    assert pulled["stop control"] == [f, f, f, s]
    assert len(pulled["limit"]) == 7 and runs["limit"]["completion_tokens"] == 7  # max_tokens = 6 overshot
    assert pulled["limit control"] == [f] * 6 and runs["limit control"]["completion_tokens"] == 6
    ends = stop_ends(S_TOKENS, 0)
    for name, row in pulled.items():
        rows = np.full((1, 8), -1, dtype=np.int64)
        rows[0, : len(row)] = row
        assert bool(stop_violations(rows, ends, 6)[0][0]) == ("control" not in name), (name, row)


@pytest.mark.parametrize("n_flags, drawn", [(["--num-samples", "300"], "3 of 3 chunks"), ([], "chunks")])
def test_chunks_drawn_while_the_harness_plans_are_the_samples_it_would_draw(engine, tmp_path, capsys, monkeypatch,
                                                                           n_flags, drawn):
    """verifier.cli._presample: the engine's worker draws the audit's chunks while the harness imports, loads its pair
    and plans -- every chunk for a fixed n, the first full chunks for the n the plan chooses (TV 0.3 here; cut to the
    plan's n afterwards). The same seed gives bit-identical samples with it and without it (SPECVERIFY_PRESAMPLE=0),
    chunks are taken from the calls made ahead (logged), and the verdict is the same."""
    import glob

    def tokens(run):
        return np.concatenate([np.load(f)["tokens"] for f in sorted(glob.glob(str(run / "samples" / "*" / "chunk-*.npz")))])

    runs, floors = {}, {}
    for flag in ("0", "1"):
        monkeypatch.setenv("SPECVERIFY_PRESAMPLE", flag)
        run = tmp_path / f"presample{flag}"
        code = main(["audit", "--engine", ENGINE, "--prompt", PROMPT, "--num-draft-tokens", "3", "--max-new-tokens", "3",
                     *n_flags, "--chunk-size", "100", "--seed", "0", "--target-tv", "0.3", "--no-progress",
                     "--no-diagnosis", "--run-dir", str(run)])
        out = capsys.readouterr().out
        assert code == 0, out
        if flag == "1":
            assert f"{drawn} drawn by the engine while the harness planned" in out, out
        else:
            assert "while the harness planned" not in out, out
        runs[flag] = tokens(run)
        floors[flag] = json.loads((run / "report.json").read_text())["numeric_floor"]["max_tv"]
    assert runs["0"].shape[1] == 3 and np.array_equal(runs["0"], runs["1"])
    assert floors["0"] is not None and floors["0"] == floors["1"]  # the same numeric floor, measured after the chunks
