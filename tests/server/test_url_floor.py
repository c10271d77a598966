"""The known-target URL audit's numeric floor (:mod:`verifier.server.floor`) against real ``specverify serve`` processes.

Design (trigram3 tabular pair, k = 2, T = 1, the pair's standard prompt [0, 1], seed 3, target TV 0.2 -> n = 403
planned, 8 floor positions, top-20 rows):

* a server serving the audit's target reports exactly its law: floor ~1e-17 (float64 through JSON), PASS unchanged;
* ``--defect cold-logprobs`` samples the target but reports its law at 0.4x the temperature: the samples PASS the cells
  and the floor (0.225 at the prompt alone, exact: the rows hold the whole vocabulary) is above 0.2, so UNDERPOWERED,
  never PASS;
* a server serving another model (``--target tabular:unigram3``, first-token TV 0.3 from trigram3 at the prompt):
  the floor is above 0.2 and the cells find the bias, which stands (the engine audits' rule) with the floor named.

Each audit takes 8-10 s on 2 shared cores (403 requests + 8 one-token requests).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from tests.server.conftest import audit, start_serve, stop

COMMON = ["--target", "tabular:trigram3", "--num-draft-tokens", "2", "--seed", "3", "--target-tv", "0.2"]


def _report(run_dir):
    return json.loads((run_dir / "report.json").read_text())


@pytest.fixture(scope="module")
def servers():
    started = {}
    try:
        for name, extra in (("same", ()), ("cold", ("--defect", "cold-logprobs")),
                            ("other", ())):
            target = "tabular:unigram3" if name == "other" else "tabular:trigram3"
            started[name] = start_serve("reference", target, 2, *extra)
        yield {name: url for name, (_proc, url) in started.items()}
    finally:
        for proc, _url in started.values():
            stop(proc)


def test_same_target_floor_is_zero_and_the_pass_stands(servers, tmp_path):
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["same"], *COMMON, "--run-dir", str(run_dir)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(run_dir)
    floor = report["numeric_floor"]
    assert report["decoders"][0]["verdict"] == "PASS" and not floor["above_target"]
    assert floor["max_tv"] < 1e-12 and floor["positions"] == len(floor["rows"]) >= 2
    assert {r["how"] for r in floor["rows"]} == {"exact"} and floor["rows"][0]["position"] == 1  # the prompt first
    assert "numeric floor TV" in report["decoders"][0]["reason"] and "target TV + floor" in done.stdout
    lines = (run_dir / "server" / "floor-responses.jsonl").read_text().splitlines()
    assert len(lines) == floor["positions"]
    assert all(json.loads(line)["request"]["max_tokens"] == 1 for line in lines)  # one-token requests: never drafted


def test_reported_law_other_than_the_target_cannot_pass(servers, tmp_path):
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["cold"], "--api", "llama-server", *COMMON, "--run-dir", str(run_dir)])
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(run_dir)
    d, floor = report["decoders"][0], report["numeric_floor"]
    assert report["verdict"] == d["verdict"] == "UNDERPOWERED"
    assert floor["above_target"] and floor["max_tv"] >= 0.22  # 0.225 at the prompt alone (exact)
    assert d["reason"].startswith("numeric floor TV") and "no PASS" in d["reason"] and floor["where"] in d["reason"]
    assert "more samples cannot PASS" in done.stdout and "--num-samples" not in done.stdout.split("UNDERPOWERED:")[-1]
    # the sampling checks alone passed; the time-to-verdict line must not announce that PASS as the verdict
    line = next(x for x in done.stdout.splitlines() if x.startswith("time to verdict:"))
    assert "PASS before the numeric floor (exit 0 unless the numeric floor changes it)" in line, line
    # `specverify report --recompute` rebuilds the statistics from the samples; the floor was measured against the
    # server and no sample holds it: it is carried over, and the verdict stays UNDERPOWERED (it became PASS before)
    again = subprocess.run([sys.executable, "-m", "verifier.cli", "report", str(run_dir), "--recompute", "--no-progress"],
                           capture_output=True, text=True)
    assert again.returncode == 4, again.stdout[-3000:] + again.stderr[-3000:]
    redone = _report(run_dir)
    assert redone["verdict"] == redone["decoders"][0]["verdict"] == "UNDERPOWERED"
    assert redone["numeric_floor"]["max_tv"] == floor["max_tv"] and redone["decoders"][0]["reason"].startswith("numeric floor TV")


def test_server_serving_another_model_is_never_a_pass(servers, tmp_path):
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["other"], *COMMON, "--run-dir", str(run_dir)])
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(run_dir)
    d, floor = report["decoders"][0], report["numeric_floor"]
    assert d["verdict"] == "BIAS DETECTED" and floor["above_target"] and floor["max_tv"] > 0.29  # TV 0.3 at the prompt
    assert "numeric floor TV" in d["reason"] and "bias stands" in d["reason"]


def test_floor_logprobs_sets_the_floor_rows_only(servers, tmp_path):
    """``--floor-logprobs 1`` on trigram3 (3 ids, T = 1): every floor row holds one id, so the floor is the bound with
    the other ids' mass counted as disagreeing (above 0.2: UNDERPOWERED, exit 4), and the sample requests ask for no
    logprobs (the option is the floor's alone; ``--logprobs`` would ask for them in every sample request)."""
    from verifier.server.journal import JOURNAL_NAME

    run_dir = tmp_path / "run"
    done = audit(["--url", servers["same"], *COMMON, "--floor-logprobs", "1", "--run-dir", str(run_dir)])
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    floor = _report(run_dir)["numeric_floor"]
    assert floor["logprobs"] == 1 and floor["above_target"] and {r["how"][:8] for r in floor["rows"]} == {"bounded:"}
    assert "--floor-logprobs at the vocabulary size" in floor["method"]
    requests = [json.loads(line)["request"] for line in (run_dir / JOURNAL_NAME).read_text().splitlines()
                if line.strip() and "request" in json.loads(line)]
    assert requests and not any(r.get("logprobs") for r in requests)


@pytest.mark.parametrize("args", [
    ["--url", "http://127.0.0.1:9", *COMMON, "--floor-logprobs", "0"],
    ["--url", "http://127.0.0.1:9", *COMMON, "--floor-positions", "0", "--floor-logprobs", "5"],  # was silently unused
    ["--url", "http://127.0.0.1:9", *COMMON, "--floor-logprobs", "1000001"],  # was sent: a 32-bit server reads garbage
    ["--url", "http://127.0.0.1:9", *COMMON, "--logprobs", "100000000000000000000000"],
    ["--url", "http://127.0.0.1:9", *COMMON, "--reference-off", "--api", "llama-server", "--floor-logprobs", "4"],
    ["--url", "http://127.0.0.1:9", *COMMON, "--floor-positions", "-1"],
    ["--url", "http://127.0.0.1:9", *COMMON, "--floor-positions", "1001"],
    ["--url", "http://127.0.0.1:9", *COMMON, "--logprobs", "0"],
    ["--url", "http://127.0.0.1:9", "--design", "self-reported", "--vocab-size", "3", "--prompt-ids", "0,1",
     "--logprobs", "3", "--floor-positions", "4"],
    ["--url", "http://127.0.0.1:9", *COMMON, "--reference-off", "--api", "llama-server", "--floor-positions", "4"],
    ["--decoder", "reference", *COMMON, "--floor-positions", "4"],
])
def test_floor_usage_errors_exit_2(args):
    done = audit(args, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert any(f in done.stderr + done.stdout for f in ("--floor-positions", "--logprobs", "--floor-logprobs"))


def test_rows_that_miss_the_kept_set_are_bounded_conservatively():
    from verifier.sampling import SamplingConfig
    from verifier.server.floor import choose_prefixes, compare_row

    p = np.array([0.4, 0.3, 0.2, 0.1])
    top2 = {0: math.log(0.4), 1: math.log(0.3)}
    kept = np.array([4 / 7, 3 / 7, 0.0, 0.0])  # --target's processed law at top-k 2
    exact = compare_row(top2, kept, p, SamplingConfig(top_k=2), "raw", 4)  # top-k <= K: the row defines the law
    assert exact["how"] == "exact" and exact["tv"] < 1e-12
    bounded = compare_row(top2, p, p, SamplingConfig(), "raw", 4)  # no top-k: 0.3 unseen on each side
    assert bounded["how"].startswith("bounded") and bounded["tv_measured"] < 1e-12 and math.isclose(bounded["tv"], 0.3)
    assert compare_row(None, p, p, SamplingConfig(), "raw", 4) == {"undefined": "no reported logprobs at this position"}
    other = compare_row({3: 0.0}, np.array([1.0, 0, 0, 0]), p, SamplingConfig(top_k=1), "raw", 4)  # another argmax
    assert other["how"] == "exact" and math.isclose(other["tv"], 1.0)
    rows = np.array([[1, 2, 0], [1, 2, 0], [2, -1, -1]])
    picks = choose_prefixes([0], rows, 10, seed=5, eos_token_id=2)
    assert picks[0] == (0,) and set(picks[1:]) == {(0, 1)}  # nothing past EOS, duplicates once
    assert choose_prefixes([0], rows, 10, seed=5) == choose_prefixes([0], rows, 10, seed=5)


def test_prefixes_a_text_server_cannot_take_are_skipped_and_the_draw_goes_on():
    """--api mlx-lm takes text: a drawn prefix whose ids do not round-trip is skipped (before, the first one left the
    whole floor "not measured"), and the draw continues so the floor still checks the positions asked for."""
    from verifier.server.floor import choose_prefixes

    rows = np.array([[1, 3, 4], [5, 6, 7]])
    every = choose_prefixes([0], rows, 10, seed=2)
    refused = {p for p in every if 3 in p}  # stand-in for "does not round-trip": any prefix holding id 3
    kept = choose_prefixes([0], rows, 10, seed=2, sendable=lambda p: p not in refused)
    assert refused and not refused & set(kept) and kept == [p for p in every if p not in refused]
    assert len(choose_prefixes([0], rows, 4, seed=2, sendable=lambda p: p not in refused)) == 4  # drawn on to 4
