"""Issue 28 item 7: what is stored was trusted too much.

* ``merge ... --out DIR`` into a folder holding another suite's run analysed that other suite and
  exited with its verdict; it is refused as ``run --run-dir`` refuses a folder holding a run.
* ``audit --samples`` on an exact decoder's rows repeated 8 times gave BIAS DETECTED: repeated rows
  are not independent samples; the audit says so (exit 3, the duplicate count), as the runner does
  for a decoder that replays rows.

Every test failed before its fix.  Runs use the trigram3 tabular pair, tiny n.
"""

from __future__ import annotations

import json

from verifier.cli import main
from verifier.errors import EXIT_UNDERPOWERED, EXIT_USAGE  # n = 20: every verdict UNDERPOWERED

from .test_inputs_more import SUITE_TOML


def _suite(tmp_path, name, seed, temperature="1.0"):
    path = tmp_path / f"{name}.toml"
    path.write_text(SUITE_TOML.format(target="tabular:trigram3").replace('name = "inp"', f'name = "{name}"')
                    .replace("seed = 1", f"seed = {seed}").replace("temperature = 1.0", f"temperature = {temperature}"))
    return path


def test_merge_into_a_folder_holding_another_suites_run_is_refused(tmp_path, capsys):
    shard, other = tmp_path / "shard", tmp_path / "other"
    assert main(["run", str(_suite(tmp_path, "mine", 1)), "--shard", "0/1", "--run-dir", str(shard),
                 "--no-progress"]) == 0  # a shard samples; the merge judges
    assert main(["run", str(_suite(tmp_path, "theirs", 2, "0.5")), "--run-dir", str(other), "--no-progress"]) == EXIT_UNDERPOWERED
    before = (other / "report.json").read_bytes()
    capsys.readouterr()
    assert main(["merge", str(shard), "--out", str(other), "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--out={str(other)!r}" in err and "theirs" in err and "mine" in err and "Traceback" not in err
    assert (other / "report.json").read_bytes() == before  # nothing of the other run was touched
    assert json.loads((other / "run.json").read_text())["suite"]["raw"]["name"] == "theirs"
    assert not list((other / "samples").glob("mine*"))


def test_merge_again_into_its_own_earlier_output_still_works(tmp_path, capsys):
    shard, out = tmp_path / "shard", tmp_path / "merged"
    assert main(["run", str(_suite(tmp_path, "mine", 1)), "--shard", "0/1", "--run-dir", str(shard),
                 "--no-progress"]) == 0  # a shard samples; the merge judges
    assert main(["merge", str(shard), "--out", str(out), "--no-progress"]) == EXIT_UNDERPOWERED
    assert main(["merge", str(shard), "--out", str(out), "--no-progress"]) == EXIT_UNDERPOWERED


def test_an_exact_decoders_rows_repeated_8_times_are_not_independent_samples(tmp_path, capsys):
    """Before: ``audit --samples`` on the rows of an exact decoder written 8 times gave BIAS DETECTED
    (exit 1).  Now exit 3 naming the duplicate count; the file written once still passes."""
    from verifier.errors import EXIT_DECODER, EXIT_OK

    common = ["--target", "tabular:bigram4_eos", "--prompt-ids", "0", "--max-new-tokens", "3", "--seed", "4",
              "--target-tv", "0.25", "--num-draft-tokens", "1", "--no-progress"]
    once = tmp_path / "once.jsonl"
    assert main(["audit", "--decoder", "verifier.decoders.speculative:SpeculativeDecoder", "--num-samples", "600",
                 "--run-dir", str(tmp_path / "a"), "--export", str(once), *common]) == EXIT_OK
    eight = tmp_path / "eight.jsonl"
    eight.write_text(once.read_text() * 8)
    capsys.readouterr()
    assert main(["audit", "--samples", str(eight), "--run-dir", str(tmp_path / "b"), *common]) == EXIT_DECODER
    out = capsys.readouterr()
    assert "4200 of 4800 rows are duplicates" in out.err and "eight.jsonl" in out.err, out.err
    assert "BIAS" not in out.out + out.err and "Traceback" not in out.err
    assert main(["audit", "--samples", str(once), "--run-dir", str(tmp_path / "c"), *common]) == EXIT_OK


def test_repeated_block_bound():
    """The replay check flags long repeats of varied rows, never constant (greedy) rows or fresh draws."""
    import numpy as np

    from verifier.validation import REPLAY_NATS, repeated_block, same_rows_nats

    rng = np.random.default_rng(0)
    fresh = rng.integers(0, 3, size=(4000, 3))
    assert repeated_block(fresh) is None
    assert repeated_block(np.zeros((4000, 3), np.int64)) is None  # greedy: every row the same
    assert same_rows_nats([5]) == 0.0
    m, r, nats = repeated_block(np.concatenate([fresh[:500]] * 3))
    assert (m, r) == (500, 3) and nats >= REPLAY_NATS
    assert repeated_block(np.concatenate([fresh[:2]] * 2)) is None  # 2 rows seen twice: chance, not evidence
