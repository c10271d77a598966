"""``python -m verifier.diagnose.reproduce ENGINE RUN_DIR``: engine reproductions scored on a run folder's samples.

A synthetic run folder (one sample set, shipped models, top-k 3 so the laws are cheap) stands in for an
engine audit; the scorers' arithmetic is tested in tests/engines/test_reproductions.py."""

import json

import numpy as np
import pytest

from verifier.diagnose import reproduce
from verifier.errors import InvalidArgumentError
from verifier.runner.store import SampleStore, Shard
from verifier.sampling import SamplingConfig

PROMPT = [272, 70, 221]
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)


@pytest.fixture
def run_dir(tmp_path):
    store = SampleStore(tmp_path)
    key = f"decoder=engine|prompt={PROMPT}|sampling={json.dumps(SAMPLING.to_dict(), sort_keys=True)}|k=1"
    rng = np.random.default_rng(0)
    for chunk in range(2):
        tokens = rng.choice([5, 7, 9], size=(20, 3)).astype(np.int64)
        origins = np.zeros((20, 3), dtype=np.int8)
        origins[:, 0] = 2
        store.write_chunk("set0", chunk, Shard(tokens, None, np.ones(20, dtype=np.int64), {"set_key": key, "seed": chunk},
                                               origins))
    return tmp_path


def test_sample_sets_reads_prompt_sampling_and_every_chunk(run_dir):
    [(name, prompt, sampling, shards)] = list(reproduce.sample_sets(run_dir))
    assert (name, prompt, sampling) == ("set0", PROMPT, SAMPLING)
    assert [len(s.tokens) for s in shards] == [20, 20]


@pytest.mark.parametrize("engine, expect", [("llama.cpp", "token-2 counts vs target"),
                                            ("llama-cpp-python", "ACCEPTANCE first round"),
                                            ("openvino-genai", "as shipped, shared seed")])
def test_each_engine_scores_the_run(run_dir, engine, expect, capsys, tmp_path_factory):
    report_dir = tmp_path_factory.mktemp("report")
    assert reproduce.main([engine, f"{run_dir}={report_dir}"]) == 0
    out = capsys.readouterr().out
    assert f"{run_dir}" in out and "n=40" in out and expect in out
    if engine != "openvino-genai":  # the README audit matrix reads acceptance.txt
        assert (report_dir / "acceptance.txt").read_text().startswith("draft position 1 (token 2")


def test_unknown_engine_is_a_usage_error():
    with pytest.raises(InvalidArgumentError, match="llama.cpp"):
        reproduce.main(["vllm-nope", "RUN"])
