"""`specverify audit --engine NAME` for a decoder-kind engine runs the known-p audit on the engine's decoder.

The engine here is a real worker process (this interpreter standing in for an engine venv) whose
handler emits uniform tokens: the shipped target is far from uniform, so the audit must say BIAS
DETECTED (exit 1) -- which shows the route reaches the engine and the statistics, not just the parser.
"""

import sys
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.engines import ENGINE_REGISTRY
from verifier.engines.base import Engine, EngineOption
from verifier.engines.decoder import EngineDecoder, checkpoint_dir

HANDLER = Path(__file__).parent / "handlers" / "echo_handler.py"


class UniformEngine(Engine):
    name = "uniform-test"
    kind = "decoder"
    package = "uniform"
    version = "0"
    entry_point = "tests/engines/handlers/echo_handler.py::Handler.generate"
    options = (EngineOption("flavour", "plain", ("plain", "salty"), "unused"),)

    @classmethod
    def python(cls):
        return Path(sys.executable)

    @classmethod
    def is_installed(cls):
        return True


def decoder(target_model="shipped:target", draft_model="shipped:draft", num_draft_tokens=2, vocab_size=384,
            eos_token_id=None, flavour="plain"):
    checkpoint_dir(target_model, "target_model")
    return EngineDecoder(UniformEngine, HANDLER, init={"vocab_size": vocab_size}, num_draft_tokens=num_draft_tokens,
                         vocab_size=vocab_size, eos_token_id=eos_token_id)


@pytest.fixture
def registered():
    ENGINE_REGISTRY["uniform-test"] = UniformEngine
    yield
    ENGINE_REGISTRY.pop("uniform-test", None)


def test_decoder_engine_audit_detects_a_uniform_engine(registered, tmp_path, capsys):
    code = main(["audit", "--engine", "uniform-test", "--num-draft-tokens", "2", "--num-samples", "300",
                 "--max-new-tokens", "1", "--no-progress", "--run-dir", str(tmp_path / "run"), "--engine-arg", "flavour=salty"])
    out = capsys.readouterr().out
    assert "engine uniform-test" in out
    assert code == 1, out


def test_decoder_engine_bad_option_is_usage_error(registered, tmp_path, capsys):
    assert main(["audit", "--engine", "uniform-test", "--engine-arg", "flavour=sweet", "--run-dir", str(tmp_path / "r")]) == 2
    assert "flavour" in capsys.readouterr().err
    assert main(["audit", "--engine", "uniform-test", "--target", "tabular:trigram3", "--run-dir", str(tmp_path / "r2")]) == 2


def refusing_decoder(target_model="shipped:target", draft_model="shipped:draft", num_draft_tokens=2, vocab_size=384,
                     eos_token_id=None):
    """The uniform engine, able to express the temperature only: top-k is refused inside ``generate``."""
    return EngineDecoder(UniformEngine, HANDLER, init={"vocab_size": vocab_size}, num_draft_tokens=num_draft_tokens,
                         vocab_size=vocab_size, eos_token_id=eos_token_id, supported={"temperature"})


def test_sampling_refused_inside_generate_is_usage_error_in_a_suite_run(tmp_path, capsys):
    """Regression: a refusal raised by EngineDecoder.check_sampling inside ``generate`` during ``specverify run SUITE``
    was wrapped as a decoder crash (exit 3); it is a usage error (exit 2) that names the setting and the decoder."""
    suite = tmp_path / "suite.toml"
    suite.write_text(f'''schema_version = 1
name = "refusal"
seed = 1
[exact]
enabled = false
[models.shipped]
target = "shipped:target"
draft = "shipped:draft"
[prompts.def]
text = "def "
[sampling.topk]
temperature = 1.0
top_k = 8
[defaults]
models = "shipped"
prompts = ["def"]
sampling = ["topk"]
num_draft_tokens = [2]
max_new_tokens = 1
samples = 50
tests = ["gof"]
[[decoders]]
name = "uniform-refusing"
decoder = "{Path(__file__).resolve()}:refusing_decoder"
expect = "pass"
''')
    code = main(["run", str(suite), "--no-progress", "--run-dir", str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert "top-k=8 is invalid" in captured.err and "uniform-refusing" in captured.err, captured.err
