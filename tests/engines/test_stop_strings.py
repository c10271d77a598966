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
