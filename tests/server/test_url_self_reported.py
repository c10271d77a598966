"""``specverify audit --url --design self-reported`` against real ``specverify serve`` processes (trigram3 pair, k = 2).

No local model in the audit: every law comes from the logprobs the server reports.  Settings shared
by the audits below: prompt ``0,1``, T = 1, top-3 logprobs (the whole vocabulary of 3), 4 tokens per
completion, family alpha 0.001 (gate: Holm + Cauchy over gof@1, pit and the two collision cells),
power 0.99, seed 3 (the audit's request seeds, PIT draws and consistency positions).  Effects and
power, measured on these servers (reports/benchmarks-style numbers are in each test's docstring):

* correct server, n = 600, ``--target-tv 0.15``: gof@1 states MDE <= 0.15 TV, so PASS unless a cell
  falsely rejects (family false-fail rate <= 0.001);
* ``full_p_fallback``: the PIT's KS distance is ~0.11 over 1,600 positions (n = 400), above its
  MDE 0.084 at the per-cell alpha 1.25e-4 and power 0.99: BIAS DETECTED (false-pass rate <= 0.01);
* ``--defect spec-logprobs``: the reported law (the draft's) is TV ~0.6 from the speculation-off
  one at the worst of 32 positions, far above the target TV 0.05: UNDERPOWERED, never PASS;
* ``--defect shared-seed``: every pair of the 100 collision completions is identical (50 pairs
  against an expected ~4; the cells reject from ~12), seeded and unseeded: BIAS DETECTED.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.server.conftest import audit, start_serve, stop

COMMON = ["--vocab-size", "3", "--prompt-ids", "0,1", "--logprobs", "3", "--num-draft-tokens", "2", "--seed", "3"]
SERVERS = {"reference": ("reference",), "k0": ("reference", "tabular:trigram3", 0), "mutant": ("full_p_fallback",),
           "shared_seed": ("reference", "tabular:trigram3", 2, "--defect", "shared-seed"),
           "spec_logprobs": ("reference", "tabular:trigram3", 2, "--defect", "spec-logprobs")}


@pytest.fixture(scope="module")
def servers():
    """The five servers, started at once (each loads torch: ~10 s apiece on 2 cores)."""
    with ThreadPoolExecutor(len(SERVERS)) as pool:
        started = dict(zip(SERVERS, pool.map(lambda args: start_serve(*args), SERVERS.values())))
    yield {name: url for name, (_proc, url) in started.items()}
    for proc, _url in started.values():
        stop(proc)


def _cells(run_dir):
    report = json.loads((run_dir / "report.json").read_text())
    return report, {c["test"]: c for c in report["cells"]}


def test_correct_server_passes_design2_and_its_collision_cells(servers, tmp_path):
    """OpenAI dialect (raw logprobs), speculation-off reference server for the prompt law and the consistency cell."""
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["reference"], "--reference-url", servers["k0"], "--design", "self-reported", *COMMON,
                  "--num-samples", "600", "--target-tv", "0.15", "--collisions", "100", "--run-dir", str(run_dir)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report, cells = _cells(run_dir)
    d = report["decoders"][0]
    assert d["verdict"] == "PASS" and d["speculation"]["verified"]
    assert cells["gof@1"]["mde"] <= 0.15 and cells["pit"]["verdict"] == "PASS"
    assert cells["collision (seeded)"]["verdict"] == cells["collision (unseeded)"]["verdict"] == "PASS"
    assert cells["consistency"]["effect"] < 1e-9  # the same target law with speculation on and off
    assert report["sample_sets"][0]["reported_positions"]["undefined"] == 0
    assert (run_dir / "junit.xml").is_file() and (run_dir / "server" / "responses.jsonl").is_file()
    assert (run_dir / "server" / "reference-responses.jsonl").is_file()


def test_mutant_is_bias_detected_by_the_pit(servers, tmp_path):
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["mutant"], "--api", "llama-server", *COMMON, "--num-samples", "400",
                  "--collisions", "0", "--run-dir", str(run_dir)])
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report, cells = _cells(run_dir)
    assert report["decoders"][0]["verdict"] == "BIAS DETECTED"
    assert cells["pit"]["verdict"] == "BIAS" and cells["consistency"]["verdict"] == "PASS"


@pytest.mark.full  # 6-15 s: an audit through HTTP; the correct-server test runs these cells in the quick tier
def test_consistency_cell_flags_logprobs_reported_from_the_draft(servers, tmp_path):
    """llama-server dialect: the per-request switch (speculative.n_max = 0) gives the speculation-off rows."""
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["spec_logprobs"], "--api", "llama-server", *COMMON, "--num-samples", "300",
                  "--collisions", "0", "--run-dir", str(run_dir)])
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    report, cells = _cells(run_dir)
    d = report["decoders"][0]
    assert d["verdict"] == "UNDERPOWERED" and d["reason"].startswith("reported logprobs differ with speculation on")
    assert cells["consistency"]["effect"] > 0.3 and cells["consistency"]["extra"]["finding"]


@pytest.mark.full  # 6-15 s: an audit through HTTP; the correct-server test runs these cells in the quick tier
def test_collision_cells_flag_a_shared_seed_seeded_and_unseeded(servers, tmp_path):
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["shared_seed"], "--api", "llama-server", *COMMON, "--num-samples", "200",
                  "--collisions", "100", "--run-dir", str(run_dir)])
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    _report, cells = _cells(run_dir)
    for kind in ("seeded", "unseeded"):
        cell = cells[f"collision ({kind})"]
        assert cell["verdict"] == "BIAS" and cell["extra"]["identical_pairs"] == 50
        assert cell["extra"]["distinct_completions"] == 1


@pytest.mark.full  # 6-15 s: an audit through HTTP; the correct-server test runs these cells in the quick tier
def test_openai_server_without_a_reference_cannot_pass(servers, tmp_path):
    """No per-request switch and no --reference-url: the reported logprobs are never checked, so no PASS."""
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["reference"], *COMMON, "--num-samples", "200", "--target-tv", "0.3",
                  "--collisions", "0", "--run-dir", str(run_dir)])
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    report, cells = _cells(run_dir)
    assert "not checked against speculation off" in report["decoders"][0]["reason"]
    assert cells["consistency"]["verdict"] == "UNDERPOWERED" and cells["consistency"]["n"] == 0


def test_served_logprobs_are_the_targets_law(servers):
    """Both dialects, speculation on: the reported law at each emitted position is the target's at that prefix."""
    import math

    import httpx
    import numpy as np

    from verifier.exact import standard_tabular_pairs
    from verifier.runner.models import ReferenceModel

    pair = standard_tabular_pairs()["trigram3"]
    ref = ReferenceModel(pair.target, 3, None)
    from verifier.sampling import SamplingConfig

    body = {"prompt": [0, 1], "max_tokens": 4, "n": 3, "seed": 9, "logprobs": 3, "temperature": 1.0}
    for choice in httpx.post(servers["reference"] + "/v1/completions", json=body, timeout=30).json()["choices"]:
        ids = choice["token_ids"]
        for j, row in enumerate(choice["logprobs"]["top_logprobs"]):
            law = ref.next_probs(np.array([[0, 1] + ids[:j]]), SamplingConfig())[0]
            got = {int(k.split(":")[1]): math.exp(v) for k, v in row.items()}
            assert all(abs(got.get(t, 0.0) - law[t]) < 1e-12 for t in range(3))
    body = {"prompt": [0, 1], "n_predict": 4, "seed": 9, "n_probs": 3, "post_sampling_probs": True, "temperature": 0.7,
            "top_k": 2}
    reply = httpx.post(servers["reference"] + "/completion", json=body, timeout=30).json()
    for j, row in enumerate(reply["completion_probabilities"]):
        law = ref.next_probs(np.array([[0, 1] + reply["tokens"][:j]]), SamplingConfig(temperature=0.7, top_k=2))[0]
        assert {e["id"]: e["prob"] for e in row["top_probs"]} == pytest.approx({t: p for t, p in enumerate(law) if p > 0})


BAD = [
    (["--top-k", "5", "--logprobs", "2"], "--top-k=5 is invalid; allowed: <= --logprobs 2"),
    (["--logprobs", None], "--logprobs is missing"),
    (["--vocab-size", None], "--vocab-size"),
    (["--collisions", "1"], "--collisions=1 is invalid"),
    (["--temperature", "0"], "--temperature=0.0 is invalid"),
    (["--target", "tabular:trigram3", "--design", "self-reported"], "--target='tabular:trigram3' is invalid"),
]


# quick tier: the first bad input; the rest (about 3 s each, a CLI process apiece) in the full tier
@pytest.mark.parametrize("change, message", [pytest.param(*b, marks=[pytest.mark.full] if i else []) for i, b in enumerate(BAD)],
                         ids=[b[1].split()[0] for b in BAD])
def test_bad_inputs_are_usage_errors_before_any_request(change, message, tmp_path):
    """Exit 2 with a message naming the flag and what is allowed; the URL is never contacted (port 9)."""
    args = list(COMMON)
    for flag, value in zip(change[::2], change[1::2]):
        if flag in args:
            i = args.index(flag)
            del args[i:i + 2]
        if value is not None:
            args += [flag, value]
    done = audit(["--url", "http://127.0.0.1:9", "--api", "llama-server", *args, "--run-dir", str(tmp_path / "r")],
                 timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert message in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "r").exists()


@pytest.mark.full  # ~10 s: an audit through HTTP
def test_a_bias_that_rests_on_the_logprob_convention_says_so(servers, tmp_path):
    """A lossless server whose raw rows (OpenAI dialect) are read as processed ones at T = 0.7: the
    rebuilt law misses the temperature, so the cells reject (TV between the T = 1 and T = 0.7 laws), and the BIAS
    reason must name the assumed convention and the flag that changes it -- the verdict is about the rows' meaning,
    which the audit cannot check by itself when only the temperature differs."""
    run_dir = tmp_path / "run"
    done = audit(["--url", servers["reference"], "--reference-url", servers["k0"], "--design", "self-reported", *COMMON,
                  "--temperature", "0.7", "--reported-logprobs", "processed", "--num-samples", "1000", "--collisions", "0",
                  "--run-dir", str(run_dir)])  # OpenAI dialect: `specverify serve` reports raw rows there
    report, _cells_ = _cells(run_dir)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    reason = report["decoders"][0]["reason"]
    assert "assumes the server reports processed logprobs" in reason and "--reported-logprobs raw" in reason, reason


@pytest.mark.full  # ~15 s: one more server and an audit through HTTP; the correct-server test runs the matching check
def test_a_reference_serving_another_model_is_no_accusation(servers, tmp_path):
    """The correct server audited with a --reference-url that serves ``tabular:unigram3`` (speculation off; first-token
    TV ~0.3 from trigram3 at the prompt).  gof@1 tests the samples against the reference's prompt law, so before the
    reference guard it rejected (a false BIAS, the break-it finding of session 9).  The audited server's own one-token row
    now shows the two servers disagree: UNDERPOWERED naming the mismatch, never BIAS.  Seed 3, family alpha 0.001,
    n = 600: gof@1 alone rejects a 0.3 TV with power ~1."""
    proc, other = start_serve("reference", "tabular:unigram3", 0)
    try:
        run_dir = tmp_path / "run"
        done = audit(["--url", servers["reference"], "--reference-url", other, "--design", "self-reported", *COMMON,
                      "--num-samples", "600", "--target-tv", "0.15", "--collisions", "0", "--run-dir", str(run_dir)])
    finally:
        stop(proc)
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    report, cells = _cells(run_dir)
    assert cells["gof@1"]["verdict"] == "BIAS"  # the cell itself still sees the difference
    assert "reports another law than the audited server" in report["decoders"][0]["reason"]
    assert report["design"]["reference_prompt_law_tv"][0]["tv"] > 0.15


def test_a_rerun_from_the_journal_keeps_the_earlier_counter_evidence(servers, tmp_path):
    """Issue 25: the second audit in the same folder reads every reply back (sends nothing: its own /metrics delta
    is 0); the first session's counter deltas (server/speculation.json) still show that drafts were verified."""
    run_dir = tmp_path / "run"
    args = ["--url", servers["reference"], "--reference-url", servers["k0"], "--design", "self-reported", *COMMON,
            "--num-samples", "200", "--target-tv", "0.3", "--collisions", "0", "--run-dir", str(run_dir)]
    first = audit(args)
    assert first.returncode in (0, 4), first.stdout[-3000:] + first.stderr[-3000:]
    spec1 = json.loads((run_dir / "report.json").read_text())["decoders"][0]["speculation"]
    assert spec1["verified"] and spec1["counters"]["draft_tokens"] > 0
    again = audit(args)
    assert again.returncode == first.returncode, again.stdout[-3000:] + again.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    spec2 = report["decoders"][0]["speculation"]
    assert spec2["verified"] and spec2["counters"] == spec1["counters"]  # the first session's deltas, not 0
    assert spec2["requests"] == spec1["requests"] and set(report["run"]["requests_sent_session"].values()) == {0}
    ledger = run_dir / "server" / "speculation.json"
    forged = json.loads(ledger.read_text())
    for entries in forged.values():  # an edit by hand (ten times the drafts) breaks the entry's seal
        for e in entries:
            e["counters"]["draft_tokens"] *= 10
    ledger.write_text(json.dumps(forged))
    third = audit(args)
    spec3 = json.loads((run_dir / "report.json").read_text())["decoders"][0]["speculation"]
    assert "not sealed" in third.stdout and not spec3["verified"]  # the forged evidence is not used


@pytest.mark.full  # two servers in turn on one port and two audits (~100 s on the shared machine)
def test_a_second_audit_of_other_requests_does_not_borrow_the_first_audits_drafts(tmp_path):
    """Review 2026-12-03: the ledger kept entries per set id (``<api>_prompt<i>``) only.  A first audit against a
    speculating server (k = 2), then one in the same folder with another --seed (every request new) against a server
    at the same URL with speculation off (k = 0, its counters do not move): the second report said speculation was
    verified, from the first audit's drafts.  Entries are now kept per set and phase (its request bodies)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    run_dir = tmp_path / "run"
    base = ["--design", "self-reported", *COMMON[:-2], "--num-samples", "100",
            "--target-tv", "0.3", "--collisions", "0", "--run-dir", str(run_dir)]
    proc, url = start_serve("reference", "tabular:trigram3", 2, "--port", port)
    try:
        first = audit(["--url", url, *base, "--seed", "3"])
    finally:
        stop(proc)
    spec1 = json.loads((run_dir / "report.json").read_text())["decoders"][0]["speculation"]
    assert spec1["verified"] and spec1["counters"]["draft_tokens"] > 0, first.stdout[-2000:] + first.stderr[-2000:]
    proc, url2 = start_serve("reference", "tabular:trigram3", 0, "--port", port)
    try:
        assert url2 == url
        second = audit(["--url", url, *base, "--seed", "4"])
    finally:
        stop(proc)
    spec2 = json.loads((run_dir / "report.json").read_text())["decoders"][0]["speculation"]
    assert not spec2["verified"], (spec2, second.stdout[-2000:] + second.stderr[-2000:])
    assert second.returncode != 0
