"""``specverify audit --url`` against real server processes (``specverify serve``) on the trigram3 tabular pair.

Power statements (k = 2, T = 1, the pair's standard prompt, family alpha 0.001, power 0.99 per cell):
* the audit plans n = 1,922 for TV 0.1 in every TV cell (first token, each position, the first 3
  tokens), so the reference server at n = 2,000 must PASS (false-fail rate <= 0.001);
* ``full_p_fallback`` moves the exact 3-token law by TV 0.184 (``n_token_law`` vs ``target_law``,
  computed below from the exact enumerator); at n = 1,000 the joint cell sees TV >= ~0.14, so the
  mutant server must be BIAS DETECTED (false-pass rate <= 0.01).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction

import pytest

from tests.server.conftest import REPO, audit, requests_served

COMMON = ["--target", "tabular:trigram3", "--num-draft-tokens", "2", "--seed", "3"]


def _report(run_dir):
    return json.loads((run_dir / "report.json").read_text())


def test_exact_effect_of_the_served_mutant_is_visible_at_the_tested_n():
    from verifier.exact import n_token_law, standard_tabular_pairs, target_law, total_variation

    pair = standard_tabular_pairs()["trigram3"]
    tv = total_variation(n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, "full_p_fallback"),
                         target_law(pair.target, pair.prefix, 3))
    assert tv == Fraction(23, 125)  # 0.184 > the joint cell's MDE at n = 1,000 (~0.14)


@pytest.mark.full  # 30-60 s: a full URL audit; test_mutant_server_is_detected_and_diagnosed_through_http stays quick
def test_reference_server_passes_and_speculation_is_verified(reference_server, tmp_path):
    run_dir = tmp_path / "run"
    done = audit(["--url", reference_server, *COMMON, "--num-samples", "2000", "--target-tv", "0.1",
                  "--num-concurrent", "4", "--run-dir", str(run_dir)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    d = _report(run_dir)["decoders"][0]
    assert d["verdict"] == "PASS"
    spec = d["speculation"]
    assert spec["verified"] and spec["counters"]["draft_tokens"] > 0 and spec["requests"] == 2000
    assert "speculation verified" in done.stdout and spec["seed_honoured"] is True
    lines = (run_dir / "server" / "responses.jsonl").read_text().splitlines()
    assert len(lines) == 2000  # every response persisted
    seeds = {json.loads(line)["request"]["seed"] for line in lines}
    assert len(seeds) == 2000  # a distinct derived seed per request


def test_mutant_server_is_detected_and_diagnosed_through_http(mutant_server, tmp_path):
    run_dir = tmp_path / "run"
    done = audit(["--url", mutant_server, "--api", "llama-server", *COMMON, "--draft", "tabular:trigram3",
                  "--num-samples", "1000", "--run-dir", str(run_dir)])
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(run_dir)
    assert report["decoders"][0]["verdict"] == "BIAS DETECTED"
    assert report["decoders"][0]["speculation"]["per_request"]["draft_tokens"] > 0  # llama-server timings.draft_n
    assert "full_p_fallback" in report["diagnosis"]["decoders"][0]["sentence"]


@pytest.mark.full  # 30-60 s: a full URL audit; test_mutant_server_is_detected_and_diagnosed_through_http stays quick
def test_speculation_switched_off_cannot_pass(reference_server, tmp_path):
    """llama-server requests with speculative.n_max = 0: plain target sampling, every cell passes, the
    server's counters do not move -- UNDERPOWERED (exit 4) naming why, never PASS."""
    run_dir = tmp_path / "run"
    done = audit(["--url", reference_server, "--api", "llama-server", "--speculation", "off", *COMMON,
                  "--num-samples", "2000", "--target-tv", "0.1", "--run-dir", str(run_dir)])
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    d = _report(run_dir)["decoders"][0]
    assert d["verdict"] == "UNDERPOWERED" and d["reason"].startswith("speculation never ran")
    assert "SPECULATION NEVER RAN" in done.stdout


@pytest.mark.full  # 30-60 s: a full URL audit; test_mutant_server_is_detected_and_diagnosed_through_http stays quick
def test_two_sample_design_with_per_request_switch(mutant_server, tmp_path):
    """Speculation on vs off on the same llama-server (no local target law needed): the mutant differs."""
    done = audit(["--url", mutant_server, "--api", "llama-server", "--reference-off", "--vocab-size", "3",
                  "--prompt-ids", "1,2", "--num-samples", "1500", "--max-new-tokens", "3", "--num-draft-tokens", "2",
                  "--run-dir", str(tmp_path / "two")])
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "two" / "speculative" / "server" / "responses.jsonl").is_file()
    assert (tmp_path / "two" / "reference" / "server" / "responses.jsonl").is_file()


@pytest.mark.full  # 30-60 s: a full URL audit; test_mutant_server_is_detected_and_diagnosed_through_http stays quick
def test_killed_audit_resumes_without_resampling(reference_server, tmp_path):
    """SIGKILL mid-run, then --resume: every response in the journal is reused; the server answers each
    request once (its own request counter), the journal holds exactly n lines."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = requests_served(reference_server)
    proc = subprocess.Popen([sys.executable, "-m", "verifier.cli", "audit", "--url", reference_server, *COMMON,
                             "--num-samples", "1200", "--chunk-size", "400", "--num-concurrent", "2",
                             "--run-dir", str(run_dir), "--no-progress"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    journal = run_dir / "server" / "responses.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.is_file() and journal.read_text().count("\n") >= 500:  # inside the second chunk
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = journal.read_text().count("\n")
    assert 0 < kept < 1200
    done = audit(["--resume", str(run_dir)])
    assert done.returncode in (0, 4), done.stdout[-3000:] + done.stderr[-3000:]
    assert journal.read_text().count("\n") == 1200
    time.sleep(0.5)
    # + the seed contract's 2 probe requests per session, + requests in flight at the kill (answered, not journaled),
    # + the numeric floor's one-token requests of the resumed run (measured once the samples are complete)
    from verifier.server.floor import DEFAULT_POSITIONS

    assert requests_served(reference_server) - before <= 1200 + 2 * 2 + 2 + DEFAULT_POSITIONS


@pytest.mark.full  # 30-60 s: a full URL audit; test_mutant_server_is_detected_and_diagnosed_through_http stays quick
def test_concurrency_levels_find_a_defect_that_appears_only_under_load(tmp_path):
    """A server correct with one request in flight and deterministic_acceptance when more arrive together (the
    field's "corrupt only when requests are batched"; exact 3-token TV 0.595 on trigram3, k = 2): the level c1
    (one request at a time) must not reject; at c8 about 80% of requests arrive with others in flight (measured
    247 of 300 on this server), so its law moves by TV ~0.48, far above the joint cell's MDE (~0.18) at n = 600:
    BIAS DETECTED (false-pass rate <= 0.01)."""
    from tests.server.conftest import start_serve, stop

    proc, url = start_serve("reference", "tabular:trigram3", 2, "--busy-decoder", "deterministic_acceptance",
                            "--busy-above", "1")
    try:
        run_dir = tmp_path / "run"
        done = audit(["--url", url, *COMMON, "--num-samples", "600", "--concurrency-levels", "1,8",
                      "--run-dir", str(run_dir)])
    finally:
        stop(proc)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    verdicts = {d["decoder"]: d["verdict"] for d in _report(run_dir)["decoders"]}
    assert verdicts["c8"] == "BIAS DETECTED"
    assert verdicts["c1"] != "BIAS DETECTED"  # UNDERPOWERED at n = 600 for TV 0.05, never rejected


@pytest.mark.full  # 40-80 s: two URL audit decoders of 800 requests; tests/runner/test_collision_cell.py is the quick one
def test_unseeded_factor_finds_requests_that_share_a_random_stream(tmp_path):
    """``--unseeded`` against ``specverify serve --defect paired-unseeded`` (unseeded requests 2i and 2i + 1 in
    arrival order get one seed; seeded requests are correct).  One request in flight, so arrival order is send
    order and every one of the 400 pairs of the unseeded decoder is identical, where the exact 3-token law of
    trigram3 (k = 2, T = 1) expects 400 * sum_x P(x)^2 of them: the collision cell rejects far below alpha.
    Each completion still has the target's law, so the seeded decoder (c1) must not be BIAS (false-fail rate
    <= 0.001), and the unseeded one is BIAS DETECTED through its collision and serial cells, diagnosed as rows that
    are not independent."""
    from tests.server.conftest import start_serve, stop

    proc, url = start_serve("reference", "tabular:trigram3", 2, "--defect", "paired-unseeded")
    try:
        run_dir = tmp_path / "run"
        done = audit(["--url", url, *COMMON, "--num-samples", "800", "--num-concurrent", "1", "--unseeded",
                      "--floor-positions", "0", "--run-dir", str(run_dir)])
    finally:
        stop(proc)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(run_dir)
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts["c1-unseeded"] == "BIAS DETECTED" and verdicts["c1"] != "BIAS DETECTED", verdicts
    cells = {(c["decoder"], c["test"]): c for c in report["cells"]}
    bad = cells[("c1-unseeded", "collision@1..3")]
    assert bad["verdict"] == "BIAS" and bad["statistic"] == 400 and bad["pvalue"] < 1e-50
    assert cells[("c1", "collision@1..3")]["verdict"] == "PASS"
    # serial@1 on the rows in request order: a pair's first-token PITs share their interval (lag-1 autocorrelation
    # ~ +0.4 against an MDE of ~0.25 at n = 800); the seeded level's requests are independent
    assert cells[("c1-unseeded", "serial@1")]["verdict"] == "BIAS" and cells[("c1-unseeded", "serial@1")]["effect"] > 0.2
    assert cells[("c1", "serial@1")]["verdict"] == "PASS"
    assert report["diagnosis"]["decoders"][0]["sentence"].startswith("rows are not independent")


def test_url_audit_run_folder_names_audit_resume_and_counts_this_sessions_requests(reference_server, tmp_path):
    """A URL audit's run folder is continued by ``specverify audit --resume`` (its plan: server options, floor), never
    ``specverify run --resume``, which the refusal of a second audit into the same --run-dir named before the fix.
    Then one chunk file is removed and the audit resumed: its 20 requests are read back from the response journal
    and the other chunk is on disk, so this session sends 0 requests -- the summary said "20 sent in this session"
    before the fix (it summed every chunk's figure, whichever process sampled it)."""
    run_dir = tmp_path / "run"
    args = ["--url", reference_server, *COMMON, "--num-samples", "40", "--chunk-size", "20", "--floor-positions", "0",
            "--run-dir", str(run_dir)]
    first = audit(args)
    assert first.returncode in (0, 4), first.stdout[-3000:] + first.stderr[-3000:]
    assert "(40 sent in this session)" in first.stdout, first.stdout[-2000:]
    files = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    served = requests_served(reference_server)
    wrong = subprocess.run([sys.executable, "-m", "verifier.cli", "run", "--resume", str(run_dir), "--no-progress"],
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2, wrong.stdout[-2000:] + wrong.stderr[-2000:]  # it sampled and re-wrote before the fix
    assert f"allowed: `specverify audit --resume {run_dir}`" in wrong.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == files  # the folder untouched
    assert requests_served(reference_server) == served
    again = audit(args)
    assert again.returncode == 2, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"`specverify audit --resume {run_dir}` to continue that run" in again.stderr
    assert "specverify run --resume" not in again.stderr
    (chunk,) = run_dir.glob("samples/*/chunk-000001.npz")
    chunk.unlink()
    before = requests_served(reference_server)
    done = audit(["--resume", str(run_dir)])
    assert done.returncode in (0, 4), done.stdout[-3000:] + done.stderr[-3000:]
    assert requests_served(reference_server) == before  # every reply from the journal
    assert "over 40 requests (0 sent in this session, 40 from the response journal or earlier sessions' samples)" in done.stdout
    report = _report(run_dir)  # a per-session figure: in the volatile `run` section, not beside the samples' figures
    assert report["run"]["requests_sent_session"] == {report["decoders"][0]["decoder"]: 0}
    assert "requests_sent_session" not in report["decoders"][0]["speculation"]
