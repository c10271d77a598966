"""Stop token ids as one-character stop strings (``verifier/engines/_stop_strings.py``), on the shipped tokenizer:
the mapping llama-cpp-python's stop rule needs (issue 29, kind 5).  No engine runs."""

import pytest

from verifier.engines._stop_strings import stop_strings, token_texts
from verifier.engines.decoder import checkpoint_dir
from verifier.errors import InvalidArgumentError

# the shipped vocabulary's tokens whose text holds an "s" (83 is "s" itself)
S_TOKENS = [83, 262, 274, 287, 304, 307, 321, 323, 350, 359, 369]


@pytest.fixture(scope="module")
def texts():
    return token_texts(checkpoint_dir("shipped:target", "target_model"))


def test_a_closed_set_maps_to_its_strings(texts):
    assert texts[83] == b"s" and texts[0] == b""  # EOS (special): empty, as llama.cpp's detokenize
    assert stop_strings(S_TOKENS, texts, eos_token_id=0) == ["s"]
    assert stop_strings([0] + S_TOKENS, texts, eos_token_id=0) == ["s"]  # EOS: the engine's own check
    assert stop_strings([0], texts, eos_token_id=0) == []
    assert {t for t, x in enumerate(texts) if b"s" in x} == set(S_TOKENS)


def test_a_set_the_strings_would_outgrow_is_refused_naming_the_missing_ids(texts):
    with pytest.raises(InvalidArgumentError, match=r"stop_token_ids=\[83\] is invalid.*missing \[262, 274, 287"):
        stop_strings([83], texts, eos_token_id=0)
    with pytest.raises(InvalidArgumentError, match=r"not stoppable by a one-character string: \[272\]"):
        stop_strings(S_TOKENS + [272], texts, eos_token_id=0)  # 'de' holds no "s"
    with pytest.raises(InvalidArgumentError, match=r"one ASCII character.*b'de'"):
        stop_strings([272], texts, eos_token_id=0)


def test_a_byte_that_is_not_ascii_is_no_stop_string():
    with pytest.raises(InvalidArgumentError, match="one ASCII character"):
        stop_strings([1], [b"", b"\xe2", b"a"], eos_token_id=0)


def test_a_checkpoint_without_tokenizer_json_is_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="tokenizer.json"):
        token_texts(tmp_path)


def _installed():
    from verifier.engines.base import EngineNotInstalledError
    from verifier.engines.llama_cpp_python import LlamaCppPython

    try:
        LlamaCppPython.require_installed()
    except EngineNotInstalledError as exc:
        pytest.skip(f"llama-cpp-python not installed: {exc}")


def test_a_stop_rule_the_engine_cannot_express_is_a_usage_error_before_its_worker_starts():
    """A stop id whose text is 'se' (262) on llama-cpp-python: the refusal is raised inside ``generate``, where the
    runner called its InvalidArgumentError a crash of the decoder: verdict ERROR, exit 3 ("decoder misbehaving"), for
    what is the suite's usage error.  It must be a SamplingRefusedError (exit 2, let through by the runner) naming
    stop_token_ids, and the engine worker never starts."""
    from verifier.engines.llama_cpp_python import decoder
    from verifier.errors import SamplingRefusedError
    from verifier.sampling import SamplingConfig

    _installed()
    dec = decoder(draft="model", num_draft_tokens=3)
    with pytest.raises(SamplingRefusedError, match=r"stop_token_ids=\[262\] is invalid.*b'se'"):
        dec.generate([272, 70, 221], 4, 8, SamplingConfig(), 0, stop_token_ids=[262], max_tokens=6)
    assert dec._worker is None  # refused before the engine started


@pytest.mark.full  # ~20 s: a suite run's models stage
def test_a_stop_rule_the_engine_cannot_express_is_exit_2_from_specverify_run(tmp_path, capsys):
    """As above, through ``specverify run``: exit 2 naming stop_token_ids (it was verdict ERROR, exit 3)."""
    from pathlib import Path

    from verifier.cli import main

    _installed()
    suite = (Path(__file__).resolve().parents[2] / "suites/engines/llama-cpp-python-field-stop.toml").read_text()
    suite = suite.replace("stop_token_ids = [83, 262, 274, 287, 304, 307, 321, 323, 350, 359, 369]",
                          "stop_token_ids = [262]").replace("samples = 1500", "samples = 20").replace(
                          "chunk_size = 250", "chunk_size = 20")
    assert "stop_token_ids = [262]" in suite
    (tmp_path / "suite.toml").write_text(suite)
    capsys.readouterr()
    assert main(["run", str(tmp_path / "suite.toml"), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "stop_token_ids=[262] is invalid" in capsys.readouterr().err
