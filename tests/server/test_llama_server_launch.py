"""``verifier.server.launch``: the real ``llama-server`` on the shipped pair (no mocks).

Needs the llama.cpp install with ``llama-server`` (``bash ci/engines/llama-cpp.sh``).  Without it the
server tests skip naming that command -- except under CI (``CI`` set, as in tests/engines), where
``.ci/run`` installs every engine first, so a missing install FAILS instead of hiding the tests.

Run time: about 10-20 s on 2 loaded cores (each server loads the 2 MB f32 pair in about 1 s).
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from verifier.engines.base import ENGINES_DIR_ENV, EngineNotInstalledError
from verifier.server.launch import ServerStartError, launch_llama_server, llama_server_install

INSTALL_COMMAND = "bash ci/engines/llama-cpp.sh"
PROMPT_IDS = [68, 69, 70, 221]  # any ids of the shipped vocabulary; sent as ids, so no BOS is added
DRAFT_MAX = 3


@pytest.fixture(scope="module")
def install():
    try:
        return llama_server_install()
    except EngineNotInstalledError as exc:
        why = f"llama-server not installed: {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI must install every engine: .ci/run runs ci/engines/*.sh)")
        pytest.skip(why)


def _vocab_size() -> int:
    from verifier.models.loading import shipped_checkpoint

    return int(json.loads((shipped_checkpoint("target") / "config.json").read_text())["vocab_size"])


def _post(base_url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as reply:
        return json.loads(reply.read())


def _counters(base_url: str) -> dict[str, float]:
    """The ``llamacpp:spec_decode_*`` counters of ``/metrics`` (needs ``--metrics``)."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=30) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:spec_decode_num_") and "{" not in line:
            name, value = line.split()
            out[name.removeprefix("llamacpp:")] = float(value)
    return out


def _gone(pgid: int) -> bool:
    """True when no live process of the group ``pgid`` (the server and anything it forked) is left; a
    zombie not yet reaped by whoever adopted it counts as gone (it runs nothing and holds no port)."""
    for stat in os.listdir("/proc"):
        if not stat.isdigit():
            continue
        try:
            with open(f"/proc/{stat}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


def test_token_id_completion_moves_the_draft_counters_and_stop_leaves_no_process(install, tmp_path):
    """One seeded /completion with prompt ids: the ids come back in the vocabulary, /metrics shows
    drafts verified (the guard a URL audit needs), and stop() leaves no process in the group."""
    server = launch_llama_server(install.target_gguf, install.draft_gguf, draft_max=DRAFT_MAX, parallel=2,
                                 threads=1, log_path=tmp_path / "server.log")
    with server:
        assert server.is_running() and server.base_url.startswith("http://127.0.0.1:")
        before = _counters(server.base_url)
        reply = _post(server.base_url, "/completion", {
            "prompt": PROMPT_IDS, "n_predict": 24, "seed": 12345, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "samplers": ["top_k", "temperature", "top_p"], "return_tokens": True, "ignore_eos": True,
            "cache_prompt": False,
        })
        after = _counters(server.base_url)
    tokens = reply["tokens"]
    assert len(tokens) == 24 and reply["stop_type"] == "limit", reply
    assert all(isinstance(t, int) and 0 <= t < _vocab_size() for t in tokens), tokens
    assert reply["timings"]["draft_n"] > 0, reply["timings"]  # present only when the slot drafted
    drafted = after["spec_decode_num_draft_tokens_total"] - before["spec_decode_num_draft_tokens_total"]
    rounds = after["spec_decode_num_drafts_total"] - before["spec_decode_num_drafts_total"]
    accepted = after["spec_decode_num_accepted_tokens_total"] - before["spec_decode_num_accepted_tokens_total"]
    assert drafted == reply["timings"]["draft_n"] and accepted == reply["timings"]["draft_n_accepted"]
    assert rounds >= 1 and 0 <= accepted <= drafted <= DRAFT_MAX * rounds, (before, after)
    assert server.returncode is not None and _gone(server.pid)
    assert server.stop() == server.returncode  # idempotent


def test_same_seed_gives_the_same_ids_with_and_without_the_draft(install, tmp_path):
    """llama-server verifies a draft by sampling the target's own chain at every position and keeping
    the draft token only where it equals that sample (common/sampling.cpp common_sampler_sample_and_accept_n),
    so one seed consumes the same random draws with and without speculation: the ids must agree (up to
    logits that differ in the last float bit between a batched and a single decode -- none on these 24)."""
    body = {"prompt": PROMPT_IDS, "n_predict": 24, "seed": 777, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "samplers": ["top_k", "temperature", "top_p"], "return_tokens": True, "ignore_eos": True,
            "cache_prompt": False}
    with launch_llama_server(install.target_gguf, install.draft_gguf, draft_max=DRAFT_MAX, parallel=1, threads=1,
                             log_path=tmp_path / "spec.log") as spec:
        with_draft = _post(spec.base_url, "/completion", body)
    with launch_llama_server(install.target_gguf, None, parallel=1, threads=1,
                             log_path=tmp_path / "plain.log") as plain:
        without = _post(plain.base_url, "/completion", body)
    assert with_draft["timings"].get("draft_n", 0) > 0 and "draft_n" not in without["timings"]
    assert with_draft["tokens"] == without["tokens"]


def test_a_server_that_cannot_start_raises_with_its_log_tail(install, tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is not a GGUF file")
    with pytest.raises(ServerStartError, match="exited while starting") as info:
        launch_llama_server(bad, None, threads=1, log_path=tmp_path / "bad.log", startup_timeout_s=60)
    message = str(info.value)
    assert "last lines of the log" in message and str(bad) in message and "bad.log" in message


def test_the_server_dies_with_a_killed_parent(install, tmp_path):
    """SIGKILL of the harness (no Python cleanup runs) still takes the server down: PR_SET_PDEATHSIG."""
    code = textwrap.dedent(f"""
        import sys, time
        from verifier.server.launch import launch_llama_server
        s = launch_llama_server({str(install.target_gguf)!r}, None, parallel=1, threads=1,
                                log_path={str(tmp_path / 'orphan.log')!r})
        print(s.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        pid = int(parent.stdout.readline())
        assert not _gone(pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
    deadline = time.monotonic() + 30
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    survived = not _gone(pid)
    if survived:  # do not leave it running for the rest of the session
        os.killpg(pid, signal.SIGKILL)
    assert not survived, f"llama-server pid {pid} outlived its killed parent"


def test_ctrl_c_in_the_harness_stops_the_server(install, tmp_path):
    """SIGINT (Ctrl-C) of a harness inside ``with launch_llama_server(...)``: KeyboardInterrupt unwinds the
    block, which stops the server before the harness exits -- by SIGTERM, which llama-server logs as
    "cleaning up before exit" (the parent-death SIGKILL, the fallback, leaves no such line)."""
    code = textwrap.dedent(f"""
        import signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a test run started in the background ignores it
        from verifier.server.launch import launch_llama_server
        with launch_llama_server({str(install.target_gguf)!r}, None, parallel=1, threads=1,
                                 log_path={str(tmp_path / 'ctrl-c.log')!r}) as s:
            print(s.pid, flush=True)
            time.sleep(600)
    """)
    harness = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    pid = int(harness.stdout.readline())
    assert not _gone(pid)
    harness.send_signal(signal.SIGINT)
    _, err = harness.communicate(timeout=60)
    assert "KeyboardInterrupt" in err and _gone(pid), err[-2000:]
    assert "cleaning up before exit" in (tmp_path / "ctrl-c.log").read_text(errors="replace")


def test_missing_install_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv(ENGINES_DIR_ENV, str(tmp_path / "no-engines"))
    with pytest.raises(EngineNotInstalledError, match=re.escape(INSTALL_COMMAND)):
        llama_server_install()
    with pytest.raises(EngineNotInstalledError, match=re.escape(INSTALL_COMMAND)):
        launch_llama_server()
