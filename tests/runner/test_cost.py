"""The cost line of every report (issue 27): the measured sampling rate, the rows a certificate still needs and the
hours they take (verifier.runner.cost), from the chunks' generate times in RUN_DIR/timing.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from verifier.cli import main
from verifier.runner.cost import TIMING_FILE, decoder_costs, read_timing

SHARD_SUITE = Path(__file__).resolve().parents[1] / "integration" / "suites" / "shard.toml"


def test_an_underpowered_audit_states_rate_rows_still_needed_and_hours(tmp_path, capsys):
    """500 rows of the reference on bigram4_eos planned for TV 0.03: UNDERPOWERED; the cost names the rate of its
    own chunks, n_needed - 500 more rows and rows / rate hours; a folder without timing says so."""
    run = tmp_path / "a"
    code = main(["audit", "--decoder", "reference", "--target", "tabular:bigram4_eos", "--num-samples", "500",
                 "--target-tv", "0.03", "--run-dir", str(run), "--no-progress", "--no-diagnosis"])
    assert code == 4, capsys.readouterr().out
    report = json.loads((run / "report.json").read_text())
    cost = report["run"]["cost"]["decoder"]
    need = report["decoders"][0]["n_needed"]
    lines = (run / TIMING_FILE).read_text().splitlines()
    assert len(lines) == report["sample_sets"][0]["num_chunks"]  # one line per chunk
    assert cost["timed_samples"] == 500 and cost["rate_samples_per_s"] > 0
    assert cost["rows_still_needed"] == need - 500
    assert abs(cost["hours_still_needed"] - (need - 500) / cost["rate_samples_per_s"] / 3600) < 1e-9
    assert f"{need - 500:,} more rows" in cost["sentence"] and "at that rate" in cost["sentence"]
    assert "- cost: sampled at" in (run / "report.md").read_text()
    bare = decoder_costs(report, {})["decoder"]  # a folder written before timing was recorded
    assert bare["rate_samples_per_s"] is None and "rate not recorded" in bare["sentence"]
    assert "cannot be estimated" in bare["sentence"]


def test_merged_shards_carry_each_chunks_timing_once(tmp_path, capsys):
    """Two shards, then `specverify merge`: the merged folder's timing.jsonl holds every chunk once, so the rate is
    the shards' own; merging again adds nothing."""
    for i in range(2):
        assert main(["run", str(SHARD_SUITE), "--shard", f"{i}/2", "--run-dir", str(tmp_path / f"s{i}"),
                     "--no-progress"]) == 0
    out = tmp_path / "merged"
    main(["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(out)])
    capsys.readouterr()
    timing = read_timing([out])
    chunks = sorted(p for p in (out / "samples").glob("*/chunk-*.npz"))
    assert len(timing) == len(chunks) == len(read_timing([tmp_path / "s0"])) + len(read_timing([tmp_path / "s1"]))
    before = (out / TIMING_FILE).read_text()
    main(["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(out)])
    assert (out / TIMING_FILE).read_text() == before
    report = json.loads((out / "report.json").read_text())
    assert all(c["timed_samples"] > 0 for c in report["run"]["cost"].values())
