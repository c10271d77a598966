"""``llama-cpp-python``: ``Llama(draft_model=...)`` + ``Llama.generate``, the real library on the shipped models.

Its speculative path keeps a proposal while it equals a fresh target sample (lossless for any
proposals), so the known verdict is no bias; the draft here is the library's own
``LlamaPromptLookupDecoding`` on a prompt with repeats (so it proposes tokens).

Run time: about 60 s in all on 2 loaded cores (model load ~1 s, a few hundred samples/s... measured in the README).
"""

import numpy as np
import pytest

from verifier.cli import main

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
