"""``specverify bench diagnose-engines`` (issue 26): rows drawn from each registered engine law are named as it, and
target rows name nothing -- the scoring of one outcome, and one run end to end on the shipped models (full tier)."""

import pytest

from verifier.bench.diagnose_engines import _outcome


def test_outcome_scores_right_wrong_and_null():
    law = "as shipped, shared seed"
    named = {"named": [f"engine:openvino-genai/{law}"], "decision": {"status": "consistent", "best": []}}
    assert _outcome(named, law) == (True, False)
    assert _outcome(named, "as shipped, independent") == (False, True)  # another law named: wrong
    family = {"named": None, "decision": {"status": "consistent", "best": ["greedy_draft"]}}
    assert _outcome(family, law) == (False, True)  # a family hypothesis named for an engine law's rows: wrong
    nothing = {"named": None, "decision": {"status": "no known mechanism", "best": []}}
    assert _outcome(nothing, law) == (False, False)
    assert _outcome(nothing, None) == (False, False) and _outcome(named, None) == (False, True)  # null: any name


@pytest.mark.full  # loads the shipped models and computes three engines' laws (~40 s under load)
def test_one_run_names_every_law_and_nothing_on_the_null(capsys):
    from verifier.cli import main

    assert main(["bench", "diagnose-engines", "--runs", "1", "--n", "500"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "n=" not in line and "---" not in line]
    assert len(rows) >= 7  # openvino 2 laws + null, mlx 3 laws + null (transformers' when its draft is built)
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "(null)" in line:
            assert cells[-1].startswith("0 named"), line
        elif "prefix caching on" in line:  # 1% of 500 rows speculating: 5 rows, below its n for 95% (1,000); below
            assert cells[-1] == "0", line
        else:
            assert cells[2] == "1.00" and cells[-1] == "0", line
    # OpenVINO with prefix caching on (the until-failure mixture, 1% of rows speculating) at n = 2,000
    assert main(["bench", "diagnose-engines", "--only", "prefix caching on", "--runs", "1", "--n", "2000"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "prefix caching on" in line]
    assert len(rows) == 2, rows
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[-1].startswith("0 named") if "(null)" in line else (cells[2] == "1.00" and cells[-1] == "0"), line
