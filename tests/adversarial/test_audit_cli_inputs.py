"""`specverify audit` inputs that used to end in a traceback (exit 1) or blame the decoder (exit 3):
out-of-vocabulary or too-short --prompt-ids, an empty imported prompt, unwritable --json/--export
(found only after the whole audit ran), --num-draft-tokens 0.  All are usage errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from verifier.cli import main
from verifier.errors import EXIT_USAGE

PLUGIN = '''
import numpy as np


class Uniform:
    vocab_size, eos_token_id, name = 3, None, "uniform"

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        return np.random.default_rng(seed).integers(0, 3, size=(num_samples, max_new_tokens)).astype(np.int64)


def make():
    return Uniform()
'''


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "adv_uniform_plugin.py"
    path.write_text(PLUGIN)
    return f"{path}:make"


@pytest.mark.parametrize("extra, message", [
    (["--prompt-ids", "0,7"], "--prompt-ids='0,7' is invalid; allowed: token ids in 0..2"),
    (["--prompt-ids", "1"], "--prompt-ids='1' is invalid; allowed: at least 2 ids"),
    (["--prompt-ids", "0,1", "--num-draft-tokens", "0"], "--num-draft-tokens=0 is invalid"),
    (["--prompt-ids", "0,1", "--json", "/nonexistent-dir/out.json"], "--json='/nonexistent-dir/out.json' cannot be written"),
    (["--prompt-ids", "0,1", "--export", "/nonexistent-dir/out.jsonl"], "--export='/nonexistent-dir/out.jsonl' cannot be written"),
])
def test_bad_audit_inputs_are_usage_errors(plugin, capsys, extra, message, tmp_path):
    code = main(["audit", "--decoder", plugin, "--target", "tabular:trigram3", "--num-samples", "20",
                 "--max-new-tokens", "2", "--report-dir", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert message in err and "Traceback" not in err


def test_empty_imported_prompt_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"prompt_id": "p0", "prompt_token_ids": [], "emitted_token_ids": [1, 2]}) + "\n")
    assert main(["audit", "--samples", str(path), "--target", "tabular:bigram4_eos", "--max-new-tokens", "2"]) == EXIT_USAGE
    assert "at least 1 token id" in capsys.readouterr().err


def test_unknown_option_names_the_allowed_ones(tmp_path, capsys):
    """A decoder factory with four parameters and an unknown --option was called 'a VerificationKernel'."""
    path = tmp_path / "adv_four_param_plugin.py"
    path.write_text(PLUGIN.replace("def make():", "def make(target=None, a=1, b=2, c=3):"))
    code = main(["audit", "--decoder", f"{path}:make", "--target", "tabular:trigram3", "--option", "bogus=1",
                 "--report-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "unexpected keyword argument 'bogus'" in err and "allowed options: ['target', 'a', 'b', 'c']" in err
    assert "VerificationKernel" not in err
