"""JSONL sample files: schema errors name the line and field, files are streamed, and a round
trip (export the reference decoder's samples, import, audit) gives the same verdict and p-values."""

import gzip
import json

import numpy as np
import pytest

from verifier.api import check_preserves_target
from verifier.audit.jsonl import ReplayDecoder, SampleFileError, export_jsonl, import_jsonl, iter_jsonl_samples
from verifier.decoders.kernels import full_p_fallback_kernel
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.errors import EXIT_DECODER, EXIT_USAGE, DecoderOutputError
from verifier.exact import standard_tabular_pairs, step_law
from verifier.models.tabular import TabularCausalLM
from verifier.sampling import SamplingConfig
from verifier.stats import samples_needed

PAIR = standard_tabular_pairs()["bigram4_eos"]  # vocab 4, EOS = 3, draft rows far from the target rows
T1 = SamplingConfig()


class Recording:
    """Keeps what a decoder returned, so exactly the audited samples can be exported."""

    def __init__(self, decoder):
        self.inner, self.calls, self.name = decoder, [], decoder.name

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        rows = self.inner.generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)
        self.calls.append((list(prompt_ids), rows))
        return rows


def _write(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("kernel, expected", [(None, "PASS"),
                                              pytest.param(full_p_fallback_kernel, "BIAS DETECTED", marks=pytest.mark.full)])
def test_round_trip_export_import_same_verdict_and_pvalues(tmp_path, kernel, expected):
    """Reference speculative decoder (k=1) and its full-p-fallback mutant on the bigram4_eos
    tabular pair, 2000 samples of 3 tokens from prompts [0] and [1] (seed 21, alpha 1e-3).  The
    imported samples must give the identical verdict and identical cell p-values."""
    target, draft = TabularCausalLM(PAIR.target), TabularCausalLM(PAIR.draft)
    options = {} if kernel is None else {"kernel": kernel, "name": "full-p-fallback"}
    decoder = Recording(SpeculativeDecoder(target, draft, 1, **options))
    prompts = [[0], [1]]
    p, q = PAIR.target.probs((0,)), PAIR.draft.probs((0,))
    biased = [float(v) for v in step_law(p, q, "full_p_fallback").output_law]
    assert 2000 >= samples_needed([float(v) for v in p], biased, alpha=1e-3 / (2 * 12))  # 2 prompts x (gof@1..3, joint, surprisal, pit)
    direct = check_preserves_target(decoder, PAIR.target, prompts, T1, num_samples=2000, max_new_tokens=3, alpha=1e-3, seed=21)
    path = tmp_path / "samples.jsonl.gz"
    for i, (prompt, rows) in enumerate(decoder.calls):  # the runner's chunks, in order
        export_jsonl(path, rows, prompt_id=f"p{prompt[0]}", prompt_token_ids=prompt, sampling=T1, decoder=decoder.name,
                     append=i > 0)
    groups = import_jsonl(path, max_new_tokens=3, vocab_size=4, eos_token_id=3)
    assert [g.prompt_token_ids for g in groups.values()] == [(0,), (1,)]
    for prompt, group in zip(prompts, groups.values()):
        assert np.array_equal(np.concatenate([rows for p, rows in decoder.calls if p == prompt]), group.emitted)
    replay = ReplayDecoder(groups, vocab_size=4, eos_token_id=3)
    imported = check_preserves_target(replay, PAIR.target, prompts, T1, num_samples=2000, max_new_tokens=3, alpha=1e-3, seed=21)
    assert direct.verdict == imported.verdict == expected
    assert [c.pvalue for c in direct.cells] == [c.pvalue for c in imported.cells]


def test_reported_logprobs_are_checked_against_the_harness_target(tmp_path):
    from verifier.audit.jsonl import compare_target_logprobs
    from verifier.runner.models import ReferenceModel

    reference = ReferenceModel(PAIR.target, 4, 3)
    rows = SpeculativeDecoder(TabularCausalLM(PAIR.target), TabularCausalLM(PAIR.draft), 1).generate([0], 50, 3, T1, 1)
    (_, probs), = reference.teacher_forced((0,), rows, T1)
    with np.errstate(divide="ignore"):
        logprobs = np.log(np.take_along_axis(probs, np.where(rows < 0, 0, rows)[..., None], axis=-1)[..., 0])
    logprobs[rows < 0] = np.nan
    export_jsonl(tmp_path / "ok.jsonl", rows, prompt_id="p0", prompt_token_ids=[0], target_logprobs=logprobs)
    export_jsonl(tmp_path / "hot.jsonl", rows, prompt_id="p0", prompt_token_ids=[0], target_logprobs=logprobs * 0.7)
    ok = compare_target_logprobs(next(iter(import_jsonl(tmp_path / "ok.jsonl", eos_token_id=3).values())), reference)
    hot = compare_target_logprobs(next(iter(import_jsonl(tmp_path / "hot.jsonl", eos_token_id=3).values())), reference)
    assert ok.agrees and ok.num_tokens == int((rows >= 0).sum()) and ok.max_abs_diff < 1e-12
    assert not hot.agrees and "line 1 position 0" in hot.summary()


def test_logprobs_and_provenance_survive_the_round_trip(tmp_path):
    rows = np.array([[0, 3, -1], [2, 1, 0]], dtype=np.int64)
    logprobs = np.array([[-0.5, -1.0, np.nan], [-0.1, np.nan, -2.0]])
    export_jsonl(tmp_path / "s.jsonl", rows, prompt_id="p", target_logprobs=logprobs, seed=3, decoder="engine")
    first = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert first == {"prompt_id": "p", "seed": 3, "decoder": "engine", "emitted_token_ids": [0, 3], "target_logprobs": [-0.5, -1.0]}
    (group,) = import_jsonl(tmp_path / "s.jsonl", eos_token_id=3).values()
    assert np.array_equal(group.emitted, rows) and group.decoders == ["engine"]
    np.testing.assert_array_equal(group.target_logprobs, logprobs)


GOOD = {"prompt_id": "p0", "emitted_token_ids": [1, 2]}


@pytest.mark.parametrize(
    "bad, error, message",
    [
        ("{not json", SampleFileError, "line 2: not valid JSON"),
        ("[1, 2]", SampleFileError, "line 2: a list is invalid"),
        ({**GOOD, "tokens": [1]}, SampleFileError, "line 2: unknown field 'tokens'"),
        ({"emitted_token_ids": [1]}, SampleFileError, "line 2: required field 'prompt_id' is missing"),
        ({**GOOD, "emitted_token_ids": []}, SampleFileError, "line 2: field 'emitted_token_ids'=[] is invalid"),
        ({**GOOD, "emitted_token_ids": [1, -4]}, SampleFileError, "line 2: field 'emitted_token_ids'[1]=-4"),
        ({**GOOD, "target_logprobs": [-0.1]}, SampleFileError, "line 2: field 'target_logprobs' is invalid; allowed: a list of 2"),
        ({**GOOD, "target_logprobs": [-0.1, 0.5]}, SampleFileError, "line 2: field 'target_logprobs'[1]=0.5"),
        ({**GOOD, "sampling": {"temperature": -1}}, SampleFileError, "line 2: field 'sampling': temperature=-1"),
        ({**GOOD, "sampling": {"temp": 1}}, SampleFileError, "line 2: field 'sampling' has ['temp']"),
        ({**GOOD, "prompt_token_ids": [9]}, SampleFileError, "line 2: field 'prompt_token_ids' differs from line 1"),
        ({**GOOD, "emitted_token_ids": [1, 7]}, DecoderOutputError, "line 2: emitted_token_ids[1]=7 is outside 0..3"),
        ({**GOOD, "emitted_token_ids": [3, 1]}, DecoderOutputError, "line 2: emitted_token_ids[1]=1 comes after EOS"),
        ({**GOOD, "emitted_token_ids": [1, 1, 1, 1]}, DecoderOutputError, "line 2: 4 emitted tokens > max_new_tokens=3"),
        ({**GOOD, "emitted_token_ids": [1]}, DecoderOutputError, "line 2: 1 emitted tokens without EOS"),
    ],
)
def test_schema_errors_name_the_line_and_field(tmp_path, bad, error, message):
    path = _write(tmp_path / "s.jsonl", [{**GOOD, "emitted_token_ids": [1, 2, 0], "prompt_token_ids": [0]}, bad])
    with pytest.raises(error) as info:
        import_jsonl(path, max_new_tokens=3, vocab_size=4, eos_token_id=3)
    assert message in str(info.value)
    assert info.value.exit_code == (EXIT_DECODER if error is DecoderOutputError else EXIT_USAGE)


def test_files_are_streamed_line_by_line(tmp_path):
    """The first samples are yielded before a malformed later line is even read."""
    path = tmp_path / "big.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps(GOOD) + "\n\n" + json.dumps(GOOD) + "\n{broken\n")
    stream = iter_jsonl_samples(path)
    assert next(stream).line == 1 and next(stream).line == 3
    with pytest.raises(SampleFileError, match="line 4: not valid JSON"):
        next(stream)


def test_cli_export_then_import_gives_the_same_verdict(tmp_path, capsys):
    from verifier.cli import main

    common = ["--target", "tabular:bigram4_eos", "--prompt-ids", "0", "--num-samples", "600", "--max-new-tokens", "3", "--seed", "4",
              "--target-tv", "0.25", "--num-draft-tokens", "1", "--no-progress"]
    code = main(["audit", "--decoder", "verifier.decoders.speculative:SpeculativeDecoder", "--run-dir", str(tmp_path / "a"),
                 "--export", str(tmp_path / "s.jsonl"), "--json", str(tmp_path / "a.json"), *common])
    code2 = main(["audit", "--samples", str(tmp_path / "s.jsonl"), "--json", str(tmp_path / "b.json"),
                  "--run-dir", str(tmp_path / "b"), *common])
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert code == code2 == 0 and a["verdict"] == b["verdict"] == "PASS"
    # the same rows: every count-based statistic is identical (Monte Carlo / PIT streams are keyed by the decoder spec)
    same = [c["statistic"] for c in a["cells"] if c["test"] not in ("pit", "accepted")]  # replayed rows report no last_stats
    assert same == [c["statistic"] for c in b["cells"] if c["test"] not in ("pit", "accepted")]
