"""`specverify exact` pairs a rule's worst-case TV with that case's n (issue 16).

deterministic_acceptance: max TV 119/200 on trigram3 (k=2, N=3) needs n = 80 (alpha 0.01, power
0.99; `specverify exact --rule deterministic_acceptance`); the row showed n = 20, which is
seed_argmax_agree's (TV 1/2, k=1, N=1).
"""

from __future__ import annotations

from verifier.cli import main


def test_worst_case_row_shows_the_worst_cases_n(capsys):
    assert main(["exact", "--rule", "deterministic_acceptance", "--no-search"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("deterministic_acceptance"))
    cols = row.split()
    assert cols[5] == "trigram3" and cols[6] == "80", row
    assert "20 (seed_argmax_agree)" in row


def test_json_names_both_cases(capsys):
    import json

    assert main(["exact", "--rule", "deterministic_acceptance", "--no-search", "--format", "json"]) == 0
    rule = json.loads(capsys.readouterr().out)["rules"][0]
    assert (rule["worst_case"], rule["worst_case_samples_needed"]) == ("trigram3", 80)
    assert (rule["min_samples_case"], rule["min_samples_needed"]) == ("seed_argmax_agree", 20)
