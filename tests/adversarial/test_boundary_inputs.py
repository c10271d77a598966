"""Adversarial inputs to the filter-boundary finding (``verifier.diagnose.boundary``, wired in
``verifier.diagnose.boundary.add_boundary_finding``).

The run: trigram3, prompt (0, 1), k = 2, 3 tokens, 3,000 rows per set, a plugin decoder (``_flip_plug.py``) that runs
the reference decoder at min-p x 1.03 (token 0, kept by min-p 0.396 at a margin of 0.0101 nats, dropped: a threshold
flip) and, on the set without min-p, at 0.7 x the temperature (a bias no threshold explains).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.diagnose.boundary import boundary_set_finding
from verifier.diagnose.boundary import NO_FILTER
from verifier.errors import EXIT_OK

HERE = Path(__file__).resolve().parent
SUITE = """
schema_version = 1
name = "boundary-adv"
seed = 3
[exact]
enabled = false
[models.tab]
target = "tabular:trigram3"
draft = "tabular:trigram3"
[prompts.p]
ids = [0, 1]
[sampling.mp]
temperature = 1.0
min_p = 0.396
[sampling.t1]
temperature = 1.0
[defaults]
max_new_tokens = 3
samples = 3000
chunk_size = 500
tests = ["gof", "pit"]
gof_positions = [1, 2]
[[decoders]]
name = "bad"
decoder = "flip.py:make"
expect = "detect"
sampling = [SETS]
num_draft_tokens = [2]
"""


def _run(tmp_path: Path, sets: str) -> dict:
    shutil.copy(HERE / "_flip_plug.py", tmp_path / "flip.py")
    (tmp_path / "suite.toml").write_text(SUITE.replace("SETS", sets))
    assert main(["run", str(tmp_path / "suite.toml"), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == EXIT_OK
    (item,) = json.loads((tmp_path / "run" / "report.json").read_text())["diagnosis"]["decoders"]
    return item


def test_a_flip_on_one_set_and_an_unfiltered_bias_on_another_says_why_it_is_not_named(tmp_path):
    """Before: the unfiltered set ended the run-level finding silently -- no ``boundary`` entry, nothing said about the
    min-p set's flip; now each rejected set has its finding and the sentence says why the run is not named."""
    item = _run(tmp_path, '"mp", "t1"')
    assert item["status"] != "filter boundary (numeric precision)"
    named = {label: f["named"] for label, f in item["boundary"].items()}
    assert sorted(named.values()) == [False, True], named
    assert f"not a filter-boundary effect: bad | p | T=1 | k=2: {NO_FILTER}" in item["sentence"]


def test_a_flip_alone_is_still_named(tmp_path):
    item = _run(tmp_path, '"mp"')
    assert item["status"] == "filter boundary (numeric precision)", item["sentence"]
    assert "not a filter-boundary effect" not in item["sentence"]


def test_why_it_does_not_apply_when_nothing_is_near_a_threshold_or_nothing_was_emitted():
    """top-k 3 on a vocabulary of 3 keeps every token (no decision near a threshold); rows all -1 emit nothing: the
    sentence said "the band tokens are emitted as often as expected" for both."""
    from dataclasses import replace

    from tests.diagnose._helpers import trigram3
    from verifier.diagnose.inputs import sequence_probs
    from verifier.sampling import SamplingConfig

    _, tr, dr = trigram3()
    sampling = SamplingConfig(temperature=1.0, top_k=3)
    rows = np.array([[0, 1, 2], [2, 2, 1]])
    f = boundary_set_finding(sequence_probs(tr, dr, (0, 1), rows, sampling), sampling, 3)
    assert not f["named"] and "no token's top-k decision lies within 0.05 nats" in f["sentence"], f["sentence"]
    sampling = replace(sampling, top_k=2)
    f = boundary_set_finding(sequence_probs(tr, dr, (0, 1), np.full((2, 3), -1), sampling), sampling, 3)
    assert not f["named"] and "no emitted token in positions 1-3 to analyse" in f["sentence"], f["sentence"]


@pytest.mark.parametrize("positions", [0, 1, 99])
def test_a_single_row_with_eos_padding_never_crashes_or_names(positions):
    from tests.diagnose._helpers import trigram3
    from verifier.diagnose.inputs import sequence_probs
    from verifier.sampling import SamplingConfig

    _, tr, dr = trigram3()
    sampling = SamplingConfig(temperature=1.0, top_p=0.5, min_p=0.2, top_k=2, repetition_penalty=1.3,
                              presence_penalty=0.4, frequency_penalty=0.2)
    f = boundary_set_finding(sequence_probs(tr, dr, (0, 1), np.array([[1, -1, -1]]), sampling), sampling, positions)
    assert not f["named"] and f["sentence"].startswith("not a top-k/top-p/min-p boundary effect")
