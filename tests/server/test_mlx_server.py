"""``specverify audit --url --api mlx-lm`` against MLX-LM's real server (mlx-lm 0.32.2, CPU) on the shipped pair.

Needs ``bash ci/engines/mlx-lm.sh``: without it these tests skip naming that command, except under CI (``CI``
set), where a missing install FAILS.  Each audit: known target, k = 1, T = 0.7, top-k 8, prompt "def ", n = 367
planned for TV 0.2 at family alpha 0.001 and power 0.99 per cell, seed 0 (about 30-60 s per audit on 2 cores).

* As shipped (prompt cache on), every request after the first runs the target on a context that lacks one of the
  prompt's tokens (reports/audits/mlx-lm-server-0.32.2/FINDINGS.md): measured TV 0.4-0.5 at the first token and
  tokens outside the top-8 set (support violations), so the audit must say BIAS DETECTED (false-pass rate <= 0.01
  by the cells' power at TV 0.2).
* With the prompt-cache fix (``patches=("prompt_cache",)``, nothing else changed) the server samples the target's
  law: PASS (false-fail rate <= 0.001), with an exact numeric floor (the top-11 rows hold the top-8 set).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.server.conftest import audit
from verifier.engines.base import EngineNotInstalledError

COMMON = ["--api", "mlx-lm", "--target", "shipped:target", "--num-draft-tokens", "1", "--temperature", "0.7",
          "--top-k", "8", "--target-tv", "0.2", "--seed", "0", "--speculation-unverified"]


@pytest.fixture(scope="module")
def mlx_installed():
    from verifier.engines.mlx_lm_engine import MLXLM

    try:
        return MLXLM.require_installed()
    except EngineNotInstalledError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"MLX-LM not installed under CI: {exc}")
        pytest.skip(f"MLX-LM not installed: {exc}")


def _audit(server, run_dir):
    done = audit(["--url", server.base_url, *COMMON, "--run-dir", str(run_dir)])
    return done, json.loads((run_dir / "report.json").read_text())


@pytest.mark.full  # 40-80 s: a server start and one URL audit; the dialect's request/parse tests are quick
def test_mlx_server_as_shipped_is_biased_by_its_prompt_cache(mlx_installed, tmp_path):
    from verifier.server.launch_mlx import launch_mlx_server

    with launch_mlx_server(num_draft_tokens=1) as server:
        done, report = _audit(server, tmp_path / "run")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert report["decoders"][0]["verdict"] == "BIAS DETECTED"
    gof1 = next(c for c in report["cells"] if c["test"] == "gof@1")
    assert gof1["verdict"] == "BIAS" and gof1["effect"] > 0.2


@pytest.mark.full  # 40-80 s: a server start and one URL audit; the dialect's request/parse tests are quick
def test_mlx_server_with_the_prompt_cache_fix_passes(mlx_installed, tmp_path):
    from verifier.server.launch_mlx import launch_mlx_server

    with launch_mlx_server(num_draft_tokens=1, patches=("prompt_cache",)) as server:
        done, report = _audit(server, tmp_path / "run")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert report["decoders"][0]["verdict"] == "PASS"
    assert report["numeric_floor"]["max_tv"] < 1e-3  # exact: the top-11 rows hold the top-8 set


def test_mlx_dialect_writes_text_prompts_and_reads_ids_from_logprobs():
    """The request body and reply parsing of ``--api mlx-lm`` (no server: the shapes of mlx_lm/server.py 0.32.2)."""
    from verifier.errors import InvalidArgumentError
    from verifier.models.loading import load_tokenizer
    from verifier.sampling import SamplingConfig
    from verifier.server.dialects import ServerReplyError, get_dialect

    dialect = get_dialect("mlx-lm").with_text(load_tokenizer("shipped:target"))
    body = dialect.request([272, 70, 221], SamplingConfig(temperature=0.7, top_k=8), 3, 5, draft_tokens=0)
    assert body["prompt"] == "def " and body["logprobs"] is True and "top_logprobs" not in body
    assert body["top_k"] == 8 and body["seed"] == 5 and body["num_draft_tokens"] == 0 and "n" not in body
    with pytest.raises(InvalidArgumentError, match="--logprobs"):
        dialect.request([272, 70, 221], SamplingConfig(), 3, 5, logprobs=5)  # ids would be wrong with top rows
    with pytest.raises(InvalidArgumentError, match="--logprobs"):
        dialect.request([272, 70, 221], SamplingConfig(), 1, 5, logprobs=12)  # the server's cap is 11
    with pytest.raises(InvalidArgumentError, match="--top-p"):
        dialect.request([272, 70, 221], SamplingConfig(temperature=0.7, top_p=0.9), 3, 5)
    reply = {"choices": [{"index": 0, "finish_reason": "stop", "text": "x",
                          "logprobs": {"content": [{"id": 90, "logprob": -0.5}, {"id": 0, "logprob": -1.2}]}}]}
    (c,) = dialect.parse(reply, n=1, max_new_tokens=3, eos_token_id=0, what="r")
    assert c.token_ids == (90, 0) and c.finish == "eos"
    row = {"id": 90, "token": "a", "logprob": -0.1}
    tops = {"choices": [{"index": 0, "finish_reason": "length",
                         "logprobs": {"content": [dict(row, top_logprobs=[row, {"id": 7, "token": "b", "logprob": -2.5}])]}}]}
    (c,) = dialect.parse(tops, n=1, max_new_tokens=1, eos_token_id=0, what="r", logprobs=True)
    assert c.top_logprobs == ({90: -0.1, 7: -2.5},)
    with pytest.raises(ServerReplyError, match="logprobs.content"):
        dialect.parse({"choices": [{"index": 0, "finish_reason": "length", "text": "x"}]}, n=1, max_new_tokens=3,
                      eos_token_id=0, what="r")


def test_mlx_prompt_that_does_not_round_trip_is_refused_before_any_request(reference_server, tmp_path, capsys):
    """``--api mlx-lm`` sends text: ids 68,69 decode to "de", which the shipped tokenizer encodes as [272].  Refused
    as a usage error (exit 2) naming the flag, the prompt and the round trip, before any request (the server's
    request counter does not move); before the fix the audit started and stopped at the first request (exit 3).
    No MLX install needed: nothing reaches the server (a ``specverify serve`` process stands in for it)."""
    from tests.server.conftest import requests_served
    from verifier.cli import main

    before = requests_served(reference_server)
    code = main(["audit", "--url", reference_server, *COMMON, "--prompt-ids", "68,69", "--no-progress",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("--prompt-ids='68,69' is invalid; allowed: token ids that --api mlx-lm can send (it takes text prompts: "
            "the ids [68, 69] are decoded to 'de', which the target's tokenizer encodes as [272])") in err
    assert requests_served(reference_server) == before


def test_mlx_mixed_batch_is_refused_up_front(reference_server, tmp_path, capsys):
    """mlx_lm server with a draft model serves one request at a time, so --mixed-batch can put nothing beside the
    audited rows: refused before any model is loaded or request sent (exit 2, saying why)."""
    from tests.server.conftest import requests_served
    from verifier.cli import main

    before = requests_served(reference_server)
    code = main(["audit", "--url", reference_server, *COMMON, "--mixed-batch", "--no-progress",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--mixed-batch=True is invalid; allowed: not with --api mlx-lm: that server serves one request at a time" in err
    assert requests_served(reference_server) == before and not (tmp_path / "run").exists()


def test_mlx_concurrency_levels_are_refused_up_front(reference_server, tmp_path, capsys):
    """mlx_lm server runs every seeded request (and, with a draft model, every request) alone in its generation
    thread: *measured* on the shipped pair, 24 seeded requests at 4 in flight took 2.1 s against 2.7 s at 1 in flight
    (mean latency 330 ms vs 112 ms: they queue).  Levels of in-flight requests would audit the same one-at-a-time
    server at each level, so the factor is refused (exit 2, saying why) before any model is loaded or request sent;
    before the fix it ran one decoder per level, each labelled with a concurrency the server never had."""
    from tests.server.conftest import requests_served
    from verifier.cli import main

    before = requests_served(reference_server)
    code = main(["audit", "--url", reference_server, *COMMON, "--concurrency-levels", "1,4", "--no-progress",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("--concurrency-levels='1,4' is invalid; allowed: not with --api mlx-lm: that server serves one request at a "
            "time") in err
    assert requests_served(reference_server) == before and not (tmp_path / "run").exists()


def test_a_servers_temp_dirs_are_removed_when_it_stops(tmp_path):
    """``ServerProcess.remove_on_stop``: the folder goes with the server (a real process: ``python -m http.server``),
    and a folder handed over after the stop is removed at once."""
    import sys

    from verifier.server._process import launch_process

    folder, late = tmp_path / "overlay", tmp_path / "late"
    folder.mkdir()
    (folder / "mlx_lm").mkdir()
    server = launch_process("http", lambda port: [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            None, tmp_path / "server.log", None, "/", 60.0)
    with server:
        server.remove_on_stop(folder)
        assert folder.is_dir()
    assert not folder.exists() and (tmp_path / "server.log").is_file()  # the log is kept
    late.mkdir()
    server.remove_on_stop(late)
    assert not late.exists()


def test_mlx_overlay_is_removed_on_stop_and_when_the_server_does_not_start(mlx_installed, tmp_path, monkeypatch):
    """``patches=("prompt_cache",)`` runs a patched copy of mlx_lm from a temporary folder: before the fix it was left
    behind (2.5 MB per server), on stop and when the server failed to start."""
    import tempfile

    from verifier.server._process import ServerStartError
    from verifier.server.launch_mlx import launch_mlx_server

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def overlays():  # the temporary folders that hold a copy of mlx_lm (the server logs' folders stay, by design)
        return sorted(p for p in tmp_path.iterdir() if (p / "mlx_lm").is_dir())

    with pytest.raises(ServerStartError):
        launch_mlx_server(patches=("prompt_cache",), startup_timeout_s=0.01)
    assert overlays() == []
    with launch_mlx_server(patches=("prompt_cache",), prompt_cache_size=0) as server:
        (overlay,) = overlays()
        assert (overlay / "mlx_lm" / "server.py").is_file() and server.is_running()
    assert overlays() == []


@pytest.mark.full  # ~25 s: a server start, one URL audit at TV 0.2 and a 312-request sweep floor
def test_mlx_server_t1_floor_is_exact_by_logit_bias_sweeps(mlx_installed, tmp_path):
    """At T = 1 the top-11 rows hold ~2/3 of the mass, so the default floor is only bounded (0.33 on the committed
    audits: UNDERPOWERED at any target TV below it); ``--floor-logprobs 384`` rebuilds the whole row by logit_bias
    sweeps (39 requests per position) and the fixed server's floor is exact, float32-sized, so the audit PASSes at
    TV 0.2 (seed 0; the control's false-fail rate <= 0.001)."""
    from verifier.server.launch_mlx import launch_mlx_server

    flags = ["--api", "mlx-lm", "--target", "shipped:target", "--num-draft-tokens", "1", "--temperature", "1.0",
             "--target-tv", "0.2", "--seed", "0", "--speculation-unverified"]
    with launch_mlx_server(num_draft_tokens=1, patches=("prompt_cache",)) as server:
        done = audit(["--url", server.base_url, *flags, "--floor-logprobs", "384", "--run-dir", str(tmp_path / "run")])
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    floor = report["numeric_floor"]
    assert floor["max_tv"] < 1e-4 and all("logit_bias sweep" in r["how"] for r in floor["rows"]), floor["where"]
    assert len(floor["rows"]) == 8
    # every swept row is exact, and the method says so (it said "0 exact, 8 bounded": "exact: ..." != "exact")
    assert "8 exact, 0 bounded" in floor["method"], floor["method"]
    assert all(f"{r['unseen']:.2g} outside the sweep" in r["how"] for r in floor["rows"])
