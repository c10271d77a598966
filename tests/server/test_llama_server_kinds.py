"""Issue 29's kinds 3 (min-p) and 5 (stop rules) on the real ``llama-server`` (build 0c1e570, shipped pair, k = 3).

Needs the llama.cpp install with ``llama-server`` (``bash ci/engines/llama-cpp.sh``); skipped without it, failed under
CI (as tests/server/test_llama_server_launch.py).  One server for the module, started in about 1-2 s.

* min-p: the dialect puts ``min_p`` after ``top_p`` in the server's sampler chain, i.e. after the temperature.  The
  server's own post-sampling row at T = 0.7 must then keep exactly the ids with ``(p / max p) ** (1 / 0.7) >= 0.1``,
  ``p`` its own T = 1 row -- a check of the source reading (``llama_sampler_min_p_apply``: ``logit >= max logit +
  log(min_p)`` on the divided logits) that can fail: at this prefix min-p before the temperature keeps another set.
* stop rule: the audit of the 11 shipped ids whose text holds "s" (stop string "s"), max_tokens 6 in rows of 8, at
  TV 0.2 (n planned by the audit, alpha 0.001, power 0.99 on the stop-position cell; the stop-rule cell is
  deterministic) must PASS: the server checks its stop strings per token, also inside an accepted draft block
  (``server-context.cpp`` ``process_token``).  A server that breaks the rule fails the stop-rule cell
  (tests/server/test_url_kinds.py, the hostile server).
"""

from __future__ import annotations

import json
import os
import urllib.request

import numpy as np
import pytest

from verifier.engines.base import EngineNotInstalledError
from verifier.server.launch import launch_llama_server, llama_server_install

from tests.server.conftest import audit

STOP_S = "83,262,274,287,304,307,321,323,350,359,369"
PREFIX = [272, 70, 221]  # "def "


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        install = llama_server_install()
    except EngineNotInstalledError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"llama-server not installed: {exc} (CI must install every engine)")
        pytest.skip(f"llama-server not installed: {exc}")
    with launch_llama_server(install.target_gguf, install.draft_gguf, draft_max=3, parallel=4, threads=1,
                             log_path=tmp_path_factory.mktemp("llama") / "server.log") as s:
        yield s.base_url


def _row(url: str, temperature: float, min_p: float) -> dict[int, float]:
    """The server's post-sampling probabilities after PREFIX (one-token request, all 384 ids asked for)."""
    body = {"prompt": PREFIX, "n_predict": 1, "temperature": temperature, "top_k": 0, "top_p": 1.0, "min_p": min_p,
            "samplers": ["top_k", "temperature", "top_p", "min_p"], "n_probs": 384, "post_sampling_probs": True,
            "return_tokens": True, "seed": 1}
    req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as reply:
        top = json.loads(reply.read())["completion_probabilities"][0]["top_probs"]
    return {int(e["id"]): float(e["prob"]) for e in top if e["prob"] > 0}


def test_min_p_in_the_chain_after_the_temperature_keeps_the_harness_set(server):
    raw = _row(server, 1.0, 0.0)
    ids = np.array(sorted(raw))
    p = np.array([raw[t] for t in ids])
    ratio = (p / p.max()) ** (1 / 0.7)  # the T = 0.7 law's ratio to its largest prob
    after = set(ids[ratio >= 0.1].tolist())  # the harness: min-p after temperature
    before = set(ids[p / p.max() >= 0.1].tolist())  # min-p on the T = 1 law: the order the test must tell apart
    assert after != before  # at this prefix the order matters (else the test could not fail)
    kept = _row(server, 0.7, 0.1)
    assert set(kept) == after
    law = p[np.isin(ids, sorted(after))] ** (1 / 0.7)
    assert np.allclose(sorted(kept.values()), sorted(law / law.sum()), atol=1e-5)


def test_stop_rule_audit_passes_on_the_real_server(server, tmp_path):
    run = tmp_path / "run"
    done = audit(["--url", server, "--api", "llama-server", "--target", "shipped:target", "--num-draft-tokens", "3",
                  "--stop-token-ids", STOP_S, "--max-tokens", "6", "--max-new-tokens", "8", "--target-tv", "0.2",
                  "--floor-positions", "2", "--floor-logprobs", "384", "--seed", "5", "--run-dir", str(run)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((run / "report.json").read_text())
    cells = {c["test"]: c for c in report["cells"]}
    assert cells["stop-rule"]["statistic"] == 0 and cells["stop-position@1..6"]["mde"] <= 0.2
    assert report["decoders"][0]["speculation"]["counters"]["draft_tokens"] > 0  # the server drafted
    first = json.loads((run / "server" / "responses.jsonl").read_text().splitlines()[0])["request"]
    assert first["stop"] == ["s"] and first["n_predict"] == 6
