"""The engine bridge: a real worker process (this interpreter as the 'engine venv') behind EngineDecoder."""

import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.engines.base import Engine
from verifier.engines.bridge import EngineWorker, hashed_seeds
from verifier.engines.decoder import EngineDecoder, checkpoint_dir
from verifier.errors import DecoderError, InvalidArgumentError
from verifier.sampling import SamplingConfig

HANDLER = Path(__file__).parent / "handlers" / "echo_handler.py"


class _Echo(Engine):
    name = "echo"
    kind = "decoder"
    package = "echo"
    version = "0"

    @classmethod
    def python(cls):
        return Path(sys.executable)


def _decoder(generate_keywords=(), **kw):
    return EngineDecoder(_Echo, HANDLER, init={"vocab_size": 7, **kw}, num_draft_tokens=2, vocab_size=7, eos_token_id=None,
                         supported={"temperature", "top_k"}, generate_keywords=generate_keywords)


def test_generate_roundtrip_stats_and_hashed_seeds():
    dec = _decoder()
    try:
        out = dec.generate([1, 2], 5, 3, SamplingConfig(temperature=0.7), seed=11)
        assert out.shape == (5, 3) and out.dtype == np.int64 and out.max() < 7
        assert dec.last_stats.rounds == 5 and dec.last_stats.extra["engine_drafted"] == 10
        assert dec.last_stats.extra["temperature"] == 0.7
        seeds = dec.last_stats.extra["seeds"]
        assert len(set(seeds)) == 5 and np.all(np.diff(seeds) != 1)  # hashed, not consecutive
        assert np.array_equal(out, dec.generate([1, 2], 5, 3, SamplingConfig(temperature=0.7), seed=11))
        assert dec.target_logits([1]).shape == (7,)
    finally:
        dec.close()


def test_generate_keywords_pass_to_the_worker_and_the_runner_reads_them():
    from verifier.runner.batch import takes_row_temperatures
    from verifier.runner.logprob import takes_return_logprobs

    from verifier.validation import takes_generate_keyword

    plain, full = _decoder(), _decoder(generate_keywords=("return_logprobs", "row_temperatures", "row_prompts"))
    try:
        assert not takes_return_logprobs(plain) and not takes_row_temperatures(plain)  # the signature has them: the
        assert takes_return_logprobs(full) and takes_row_temperatures(full)  # declaration decides
        assert takes_generate_keyword(full, "row_prompts") and not takes_generate_keyword(plain, "row_prompts")
        with pytest.raises(InvalidArgumentError, match="row_prompts.*one prompt per call"):
            plain.generate([1], 2, 3, SamplingConfig(), seed=0, row_prompts=[[1], [2, 3]])
        full.generate([1], 2, 3, SamplingConfig(), seed=0, row_prompts=[[1], [2, 3]])
        assert full.last_stats.extra["row_prompts"] == [[1], [2, 3]]
        with pytest.raises(InvalidArgumentError, match=r"row_prompts\[1\].*0\.\.6"):
            full.generate([1], 2, 3, SamplingConfig(), seed=0, row_prompts=[[1], [7]])
        with pytest.raises(InvalidArgumentError, match="return_logprobs=True.*no per-token logprobs"):
            plain.generate([1], 2, 3, SamplingConfig(), seed=0, return_logprobs=True)
        with pytest.raises(InvalidArgumentError, match="row_temperatures.*one temperature per call"):
            plain.generate([1], 2, 3, SamplingConfig(), seed=0, row_temperatures=[1.0, 0.5])
        tokens, lps = full.generate([1], 4, 3, SamplingConfig(), seed=0, return_logprobs=True, row_temperatures=[1, .5, 1, .5])
        assert tokens.shape == lps.shape == (4, 3) and np.allclose(lps, -np.log(7))
        assert full.last_stats.extra["row_temperatures"] == [1.0, 0.5, 1.0, 0.5]
        with pytest.raises(InvalidArgumentError, match=r"row_temperatures.*4 finite numbers > 0"):
            full.generate([1], 4, 3, SamplingConfig(), seed=0, row_temperatures=[1, 0, 1, 1])
        from verifier.errors import DecoderOutputError
        with pytest.raises(DecoderOutputError, match=r"logprobs of shape \(2, 2\); expected \(2, 3\)"):
            full.generate([1], 2, 3, SamplingConfig(top_k=1), seed=0, return_logprobs=True)
        with pytest.raises(InvalidArgumentError, match="generate_keywords.*a subset of"):
            _decoder(generate_keywords=("stop_ids",))
        with pytest.raises(InvalidArgumentError, match="generate_keywords.*'stop_token_ids' and 'max_tokens' together"):
            _decoder(generate_keywords=("stop_token_ids",))  # half a stop rule: the runner sends both
    finally:
        plain.close()
        full.close()


def test_unsupported_sampling_is_refused_before_the_engine_starts():
    dec = _decoder()
    with pytest.raises(InvalidArgumentError, match="top-p.*cannot express top_p"):
        dec.generate([1], 2, 2, SamplingConfig(top_p=0.9), seed=0)
    assert dec._worker is None


def test_engine_exception_and_death_are_decoder_errors_with_engine_traceback():
    worker = EngineWorker(sys.executable, HANDLER, name="echo", init={"vocab_size": 3})
    with pytest.raises(DecoderError, match=r"(?s)ZeroDivisionError.*engine traceback:.*echo_handler.py"):
        worker.call("crash")
    assert worker.call("target_logits", prompt_ids=np.array([1]))["logits"].shape == (3,)  # still serving
    with pytest.raises(DecoderError, match="(?s)worker died during 'die' \\(exit status 7\\).*banner"):
        worker.call("die")
    with pytest.raises(DecoderError, match="ValueError: model file is corrupt"):
        EngineWorker(sys.executable, HANDLER, name="echo", init={"vocab_size": 3, "fail_init": True})
    with pytest.raises(DecoderError, match="does not exist"):
        EngineWorker("/nonexistent/python", HANDLER, name="echo")


def test_hashed_seeds_and_checkpoint_dir():
    s = hashed_seeds(5, 1000)
    assert s.min() >= 1 and s.max() < 2**31 and len(set(s.tolist())) == 1000
    assert np.array_equal(s[:10], hashed_seeds(5, 10))
    assert (checkpoint_dir("shipped:target") / "config.json").is_file()
    with pytest.raises(InvalidArgumentError, match="tabular"):
        checkpoint_dir("tabular:trigram3")
    with pytest.raises(InvalidArgumentError, match="config.json"):
        checkpoint_dir("/tmp")


def test_adapter_modules_do_not_shadow_engine_packages_in_the_worker():
    """verifier/engines/llama_cpp.py must not be what `import llama_cpp` finds inside an engine worker
    (the worker script's folder was first on sys.path, so the adapter shadowed the engine package)."""
    worker = EngineWorker(sys.executable, HANDLER, name="echo", init={"vocab_size": 7})
    try:
        for name in ("llama_cpp", "llama_cpp_python", "sglang_kernel", "_wire"):
            origin = worker.call("module_origin", name=name)["origin"]
            assert origin is None or "verifier/engines" not in origin, (name, origin)
    finally:
        worker.close()


def test_an_engine_without_target_logits_gets_no_floor_source_not_a_crash():
    """The numeric floor asks for the engine's target logits; a worker without the method must make the
    floor "not measured" (logits_source -> None), not exit 3 at the end of a finished audit."""
    from verifier.engines.floor import logits_source

    plain = EngineDecoder(_Echo, HANDLER.with_name("no_logits_handler.py"), init={"vocab_size": 7}, num_draft_tokens=2,
                          vocab_size=7, eos_token_id=None, supported={"temperature"})
    echo = _decoder()
    try:
        assert logits_source(plain) is None and "generate" in plain.worker.methods
        assert logits_source(echo) is not None and echo.exposes_target_logits
    finally:
        plain.close()
        echo.close()


@pytest.mark.parametrize("stops, max_tokens, match", [
    ([-1], None, r"stop_token_ids=\[-1\].*token ids in 0\.\.6"), ([7], None, r"stop_token_ids=\[7\].*0\.\.6"),
    ([2, 2], None, "each id at most once"), (["a"], None, "stop_token_ids"), (5, None, "stop_token_ids=5"),
    ([], 0, r"max_tokens=0.*1\.\.max_new_tokens=3"), ([1], 4, r"max_tokens=4.*1\.\.max_new_tokens=3"),
    ([1], True, "max_tokens=True")])
def test_a_bad_stop_rule_is_refused_before_the_engine_starts(stops, max_tokens, match):
    """The adapter sent stop ids and max_tokens to the engine unchecked: vLLM ignores an id it never emits (a negative
    one, one past the vocabulary: the stop test then audits a rule that was never applied) and a max_tokens above
    max_new_tokens came back as a reply of the wrong width (exit 3, blamed on the engine)."""
    dec = _decoder(generate_keywords=("stop_token_ids", "max_tokens"))
    with pytest.raises(InvalidArgumentError, match=match):
        dec.generate([1], 2, 3, SamplingConfig(), seed=0, stop_token_ids=stops, max_tokens=max_tokens)
    assert dec._worker is None



def test_the_engine_starts_before_the_first_timed_generate_call():
    """The runner starts an engine decoder's worker before its first timed generate call (runner.run._start_engine):
    the report's sampling rate then counts generate calls only -- vLLM's ~11 s start-up was in the first chunk's time,
    so its reported rate was ~20% low.  start_engine returns the start-up seconds once, then 0.0."""
    import time

    from verifier.runner.run import _start_engine

    from verifier.errors import SamplingRefusedError

    dec = _decoder(startup_sleep=1.0)
    lines: list[str] = []
    try:
        with pytest.raises(SamplingRefusedError, match="top-p"):  # refused before the engine starts (exit 2)
            _start_engine(dec, SamplingConfig(top_p=0.9), "echo", lines.append)
        assert dec._worker is None and not lines
        _start_engine(dec, SamplingConfig(), "echo", lines.append)
        assert len(lines) == 1 and "engine started in" in lines[0] and "not counted in the sampling rate" in lines[0]
        assert float(lines[0].split("started in ")[1].split(" s")[0]) >= 1.0
        called = time.perf_counter()
        dec.generate([1, 2], 3, 2, SamplingConfig(), seed=1)
        assert time.perf_counter() - called < 1.0  # the start-up is not in the call
        assert dec.start_engine() == 0.0
        _start_engine(dec, SamplingConfig(), "echo", lines.append)
        assert len(lines) == 1  # logged once
    finally:
        dec.close()


def test_a_worker_started_ahead_is_adopted_by_the_next_decoder_with_its_arguments():
    """EngineDecoder.start (an engine audit calls it before its own imports, pair load and plan: verifier.cli._prestart):
    the worker starts without waiting for the engine's start-up; the next decoder built with the same arguments adopts
    it (no second process), one with other arguments kills it and starts its own (two engines would share the CPU),
    and a start-up error surfaces at the adopting decoder's first use (exit 3 as before)."""
    import verifier.engines.bridge as bridge

    early = _decoder()
    early.start()
    assert early._worker is None and len(bridge._POOL) == 1
    pooled = next(iter(bridge._POOL.values()))
    dec = _decoder()
    try:
        assert dec.generate([1, 2], 3, 2, SamplingConfig(), seed=1).shape == (3, 2)
        assert dec._worker is pooled and not bridge._POOL  # adopted, removed from the pool
    finally:
        dec.close()
    _decoder().start()
    stale = next(iter(bridge._POOL.values()))
    other = EngineDecoder(_Echo, HANDLER, init={"vocab_size": 5}, num_draft_tokens=2, vocab_size=5, eos_token_id=None)
    try:
        other.generate([1], 2, 2, SamplingConfig(), seed=0)
        assert other._worker is not stale and not bridge._POOL  # other arguments: its own worker, the stale one killed
        assert stale._proc.wait(timeout=30) is not None
    finally:
        other.close()
        bridge.close_pool()
    assert not bridge._POOL
    failing = _decoder(fail_init=True)
    failing.start()  # returns at once: the engine's error is not raised here
    adopting = _decoder(fail_init=True)
    with pytest.raises(DecoderError, match="ValueError: model file is corrupt"):
        adopting.generate([1], 2, 2, SamplingConfig(), seed=0)
    assert not bridge._POOL and adopting._worker is None
    # a second use (an audit's numeric floor after a failed sampling stage) starts afresh and fails again, never
    # waiting on the first worker for a reply it already sent (the session-25 hang)
    with pytest.raises(DecoderError, match="ValueError: model file is corrupt"):
        adopting.exposes_target_logits
    worker = EngineWorker(sys.executable, HANDLER, name="echo", init={"vocab_size": 3, "fail_init": True}, wait=False)
    for _ in range(2):
        with pytest.raises(DecoderError, match="ValueError: model file is corrupt"):
            worker.call("target_logits", prompt_ids=np.array([1]))
    worker.close()


def test_a_second_start_of_one_handler_closes_the_first_worker():
    """At most one worker waits per handler file (an engine holds GBs): starting another closes the first."""
    import verifier.engines.bridge as bridge

    try:
        _decoder().start()
        first = next(iter(bridge._POOL.values()))
        EngineDecoder(_Echo, HANDLER, init={"vocab_size": 5}, num_draft_tokens=2, vocab_size=5, eos_token_id=None).start()
        assert len(bridge._POOL) == 1 and first._proc.wait(timeout=30) is not None
    finally:
        bridge.close_pool()


def test_a_worker_whose_harness_dies_during_its_start_up_exits(tmp_path):
    """Breaker (session 26): the job process killed (SIGTERM it did not survive, SIGKILL) while a prestarted engine was
    still starting left that engine running for its whole start-up (an orphan reading nothing yet).  The worker now
    exits within a poll of its parent's death (_worker_main._exit_when_orphaned)."""
    import os
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "worker.pid"
    script = (f"import sys, time\nsys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
              "from verifier.engines.bridge import EngineWorker\n"
              f"w = EngineWorker(sys.executable, {str(HANDLER)!r}, name='echo', init={{'vocab_size': 3, "
              "'startup_sleep': 60}, wait=False)\n"
              f"open({str(pid_file)!r}, 'w').write(str(w._proc.pid))\ntime.sleep(60)\n")
    harness = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    harness.send_signal(signal.SIGKILL)
    harness.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        try:  # a zombie reaped by init shows as gone once reaped; check its state
            with open(f"/proc/{worker}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.2)
    os.kill(worker, signal.SIGKILL)
    raise AssertionError("the worker outlived its harness by 10 s")


def test_calls_made_ahead_are_taken_only_for_the_same_keywords():
    """EngineDecoder.presample (verifier.cli._presample: the first chunks drawn while the harness plans): the adopting
    decoder's generate takes a reply made ahead only for a call with exactly its keywords -- the same tokens as a call
    made then -- and reports the engine's seconds for it; its first call that differs (another seed) stops the calls
    ahead and is made as usual, and none made ahead is used after that."""
    import verifier.engines.bridge as bridge

    plain = _decoder()
    try:
        expected = [plain.generate([1, 2], 4, 3, SamplingConfig(), seed=s) for s in (10, 11, 12)]
        assert plain.last_presampled_seconds is None
    finally:
        plain.close()
    early = _decoder()
    early.start()
    requests = [early.request([1, 2], 4, 3, SamplingConfig(), seed=s) for s in (10, 11, 12)]
    assert early.presample(requests)
    dec = _decoder()
    try:
        first = dec.generate([1, 2], 4, 3, SamplingConfig(), seed=10)
        assert isinstance(dec.last_presampled_seconds, float) and dec.last_presampled_seconds > 0
        assert np.array_equal(first, expected[0])
        other = dec.generate([1, 2], 4, 3, SamplingConfig(), seed=99)  # not predicted: made now, the rest dropped
        assert dec.last_presampled_seconds is None and other.shape == (4, 3)
        again = dec.generate([1, 2], 4, 3, SamplingConfig(), seed=12)
        assert dec.last_presampled_seconds is None and np.array_equal(again, expected[2])
    finally:
        dec.close()
        bridge.close_pool()


def test_request_digest_tells_calls_apart():
    from verifier.engines.bridge import request_digest

    dec = _decoder()
    a = dec.request([1, 2], 4, 3, SamplingConfig(), seed=1)
    assert request_digest(a) == request_digest(dec.request([1, 2], 4, 3, SamplingConfig(), seed=1))
    for b in (dec.request([1, 2], 4, 3, SamplingConfig(), seed=2), dec.request([1, 3], 4, 3, SamplingConfig(), seed=1),
              dec.request([1, 2], 5, 3, SamplingConfig(), seed=1), dec.request([1, 2], 4, 2, SamplingConfig(), seed=1),
              dec.request([1, 2], 4, 3, SamplingConfig(temperature=0.5), seed=1)):
        assert request_digest(a) != request_digest(b)


def test_calls_guessed_beyond_the_planned_n_are_not_taken():
    """EngineDecoder.limit_presample (verifier.cli._presample.settle_presample, after the plan): of three calls handed
    over, only the first is still taken; the second is made by the adopting decoder itself."""
    import verifier.engines.bridge as bridge

    early = _decoder()
    early.start()
    early.presample([early.request([1, 2], 4, 3, SamplingConfig(), seed=s) for s in (10, 11, 12)])
    early.limit_presample(1)
    dec = _decoder()
    try:
        dec.generate([1, 2], 4, 3, SamplingConfig(), seed=10)
        assert isinstance(dec.last_presampled_seconds, float)
        dec.generate([1, 2], 4, 3, SamplingConfig(), seed=11)
        assert dec.last_presampled_seconds is None
    finally:
        dec.close()
        bridge.close_pool()
