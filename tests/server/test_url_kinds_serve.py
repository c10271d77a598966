"""Kinds 3 and 5 through ``specverify audit --url`` end to end on ``specverify serve`` (the OpenAI dialect, real
decoders behind a real HTTP server process; trigram3, k = 2, prompt (0, 1), T = 1).

Power statements (family alpha 0.001, power 0.99 per cell; n planned by the audit from ``--target-tv``):

* stop rule -- stop token 2, ``max_tokens`` 3 in rows of 5: the reference server (the registered ``reference``
  decoder, which ends a row at its first stop token) must PASS at TV 0.2 (false-fail rate <= 0.001);
  ``stop_mid_block`` (verifier/decoders/stop_mutants.py: the stop tokens checked once per round, so a stop accepted
  inside a block of k = 2 drafts runs on) emits a token after a stop token in a fraction of the rows far above the
  stop-rule cell's MDE at the planned n (one violating row is BIAS), so it must be BIAS DETECTED;
* penalties -- presence 0.5, frequency 0.3 and min-p 0.1 sent as vLLM's fields: the reference server applies them as
  the harness computes them and must PASS at TV 0.2.
"""

from __future__ import annotations

import json

import pytest

from tests.server.conftest import audit, start_serve, stop

# 10-20 s each on 2 loaded cores (two server processes, three audits); the quick tier covers the same modules:
# test_url_kinds.py (the hostile server breaking its stop rule, bodies, refusals, the penalised plan) and
# test_llama_server_kinds.py (a stop-rule audit PASS on the real llama-server)
pytestmark = pytest.mark.full

COMMON = ["--target", "tabular:trigram3", "--num-draft-tokens", "2", "--prompt-ids", "0,1", "--seed", "11",
          "--target-tv", "0.2", "--floor-positions", "0"]
STOP = ["--stop-token-ids", "2", "--max-tokens", "3", "--max-new-tokens", "5"]


@pytest.fixture(scope="module")
def servers():
    made = {name: start_serve(name) for name in ("reference", "stop_mid_block")}
    yield {name: url for name, (_proc, url) in made.items()}
    for proc, _url in made.values():
        stop(proc)


def _cells(run) -> dict:
    return {c["test"]: c for c in json.loads((run / "report.json").read_text())["cells"]}


def test_stop_rule_passes_on_the_reference_server(servers, tmp_path):
    run = tmp_path / "run"
    done = audit(["--url", servers["reference"], *COMMON, *STOP, "--run-dir", str(run)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    cells = _cells(run)
    assert cells["stop-rule"]["statistic"] == 0 and cells["stop-position@1..3"]["mde"] <= 0.2
    first = json.loads((run / "server" / "responses.jsonl").read_text().splitlines()[0])["request"]
    assert first["stop_token_ids"] == [2] and first["max_tokens"] == 3


def test_stop_checked_once_per_round_is_caught_by_the_stop_rule_cell(servers, tmp_path):
    run = tmp_path / "run"
    done = audit(["--url", servers["stop_mid_block"], *COMMON, *STOP, "--run-dir", str(run)])
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    rule = _cells(run)["stop-rule"]
    assert rule["pvalue"] == 0.0 and rule["statistic"] >= 1
    assert "after stop token 2" in rule["support_violation"]


def test_penalties_and_min_p_pass_on_the_reference_server(servers, tmp_path):
    run = tmp_path / "run"
    done = audit(["--url", servers["reference"], *COMMON, "--presence-penalty", "0.5", "--frequency-penalty", "0.3",
                  "--min-p", "0.1", "--run-dir", str(run)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    body = json.loads((run / "server" / "responses.jsonl").read_text().splitlines()[0])["request"]
    assert (body["presence_penalty"], body["frequency_penalty"], body["min_p"]) == (0.5, 0.3, 0.1)
