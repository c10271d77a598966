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


def test_a_forged_or_corrupt_timing_file_never_crashes_a_report_or_lends_it_a_rate(tmp_path, capsys):
    """timing.jsonl is advisory: `report --recompute` over garbage lines, ``1e400`` rows (an OverflowError in
    ``int()`` crashed the report: exit 3, "decoder error"), zero / tiny / infinite seconds, a chunk past the plan, a
    line of another set, or a line whose row count is not the chunk's keeps the rate of the honest lines; a folder
    with no valid line says the rate is not recorded."""
    run = tmp_path / "a"
    code = main(["audit", "--decoder", "reference", "--target", "tabular:bigram4_eos", "--num-samples", "300",
                 "--target-tv", "0.03", "--run-dir", str(run), "--no-progress", "--no-diagnosis"])
    assert code == 4, capsys.readouterr().out
    honest = json.loads((run / "report.json").read_text())["run"]["cost"]["decoder"]
    timing = run / TIMING_FILE
    lines = timing.read_text().splitlines()
    first = json.loads(lines[0])
    forged = [
        "not json", "[1, 2]", '"a string"', "{}",
        json.dumps({**first, "rows": 1}).replace('"rows": 1', '"rows": 1e400'),  # OverflowError in int()
        json.dumps({**first, "seconds": 0.0}), json.dumps({**first, "seconds": 1e-300}),
        json.dumps({**first, "seconds": -3.0}), json.dumps({**first, "rows": True}),
        json.dumps({**first, "seconds": 1.0}).replace("1.0}", "Infinity}"),
        json.dumps({**first, "chunk": 99, "seconds": 1e-6}),           # a chunk the plan does not have
        json.dumps({**first, "set_id": "other-set", "seconds": 1e-6}),  # another run's set
        json.dumps({**first, "rows": first["rows"] * 1000, "seconds": 1e-6}),  # not the chunk's row count
    ]
    timing.write_text("\n".join(forged + lines) + "\n")  # the honest lines last (a chunk's last line wins)
    assert main(["report", str(run), "--recompute", "--no-progress"]) == 4
    out = capsys.readouterr()
    assert "Traceback" not in out.err, out.err
    cost = json.loads((run / "report.json").read_text())["run"]["cost"]["decoder"]
    assert cost["timed_samples"] == honest["timed_samples"] == 300
    assert cost["rate_samples_per_s"] == honest["rate_samples_per_s"]
    timing.write_text("\n".join(forged) + "\n")  # nothing valid is left (each line alone would time 300 rows)
    assert main(["report", str(run), "--recompute", "--no-progress"]) == 4
    cost = json.loads((run / "report.json").read_text())["run"]["cost"]["decoder"]
    assert cost["rate_samples_per_s"] is None and "rate not recorded" in cost["sentence"]
    assert "cannot be estimated" in cost["sentence"]
    timing.unlink()  # a missing file: the same
    assert main(["report", str(run), "--recompute", "--no-progress"]) == 4
    assert "rate not recorded" in (run / "report.md").read_text()


def test_a_recompute_without_timing_keeps_the_runs_rate_and_time_to_verdict(tmp_path, capsys):
    """A committed folder keeps no timing.jsonl: `report --recompute` used to drop the rate the run measured (and
    its time to verdict and finish time), so `specverify engines` lost the engine's rate.  Now the recompute takes
    the run's timed rows and seconds from the folder's previous report.json (rows still needed recomputed), and keeps
    the run's time to verdict; a previous report without them still gives "rate not recorded"."""
    run = tmp_path / "a"
    assert main(["audit", "--decoder", "reference", "--target", "tabular:bigram4_eos", "--num-samples", "500",
                 "--target-tv", "0.03", "--run-dir", str(run), "--no-progress", "--no-diagnosis"]) == 4
    before = json.loads((run / "report.json").read_text())["run"]
    (run / TIMING_FILE).unlink()
    assert main(["report", str(run), "--recompute"]) == 4
    after = json.loads((run / "report.json").read_text())["run"]
    assert after["cost"]["decoder"]["rate_samples_per_s"] == before["cost"]["decoder"]["rate_samples_per_s"] > 0
    assert after["cost"]["decoder"]["rows_still_needed"] == before["cost"]["decoder"]["rows_still_needed"]
    assert after["time_to_verdict"] == before["time_to_verdict"] and after["finished_at"] == before["finished_at"]
    forged = json.loads((run / "report.json").read_text())
    forged["run"]["cost"]["decoder"].update(timed_samples=float("nan"), timed_seconds=-1)
    (run / "report.json").write_text(json.dumps(forged))
    assert main(["report", str(run), "--recompute"]) == 4
    again = json.loads((run / "report.json").read_text())["run"]["cost"]["decoder"]
    assert again["rate_samples_per_s"] is None and "rate not recorded" in again["sentence"]
    capsys.readouterr()
