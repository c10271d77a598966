"""Errors, output validation, the public API list and the CLI entry point."""

import subprocess
import sys

import numpy as np
import pytest

import verifier
from verifier.errors import EXIT_DECODER, EXIT_USAGE, DecoderOutputError, VerifierError, invalid_argument
from verifier.validation import check_emitted_tokens

CHECK = dict(num_samples=2, max_new_tokens=3, vocab_size=4, eos_token_id=3)


def test_all_names_exist_and_are_public():
    assert len(verifier.__all__) == len(set(verifier.__all__))
    for name in verifier.__all__:
        assert hasattr(verifier, name), name
        assert not name.startswith("_")


def test_error_hierarchy_and_exit_codes():
    err = invalid_argument("num_draft_tokens", 0, "an integer >= 1")
    assert isinstance(err, VerifierError) and isinstance(err, ValueError)
    assert "num_draft_tokens=0" in str(err) and err.exit_code == EXIT_USAGE
    assert DecoderOutputError("x").exit_code == EXIT_DECODER


def test_valid_output_passes_through():
    arr = np.array([[1, 3, -1], [0, 1, 2]], dtype=np.int64)
    assert check_emitted_tokens(arr, **CHECK) is arr


@pytest.mark.parametrize(
    "arr, message",
    [
        (np.array([[1, 3, 1], [0, 0, 0]]), "row 0: token 1 at position 2 comes after EOS"),
        (np.array([[1, 2, 0], [0, -1, -1]]), "row 1: padding -1 at position 1 with no EOS"),
        (np.array([[1, 2, 0], [0, 7, 1]]), "row 1: token id 7 at position 1 is outside 0..3"),
        (np.full((2, 3), np.nan), "dtype=float64"),
        (np.zeros((3, 3), dtype=np.int64), r"shape=\(3, 3\)"),
        ([[0, 0, 0], [0, 0, 0]], "returned list"),
    ],
)
def test_invalid_output_names_first_bad_row(arr, message):
    with pytest.raises(DecoderOutputError, match=message):
        check_emitted_tokens(arr, **CHECK)


def test_cli_help_lists_exit_codes():
    out = subprocess.run([sys.executable, "-m", "verifier.cli", "--help"], capture_output=True, text=True, check=True)
    assert "Exit codes" in out.stdout


def test_cli_without_command_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "verifier.cli"], capture_output=True, text=True)
    assert out.returncode == EXIT_USAGE


def test_import_is_torch_free_until_used():
    # SamplingConfig is a plain dataclass (torch only where probs are computed); a decoder needs torch
    code = ("import sys, verifier, verifier.pytest_plugin; assert 'torch' not in sys.modules; verifier.SamplingConfig; "
            "assert 'torch' not in sys.modules; verifier.SpeculativeDecoder; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
