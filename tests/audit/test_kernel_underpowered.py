"""Kernel and tree-kernel audits at tiny n are UNDERPOWERED (exit 4 with the draws needed), never PASS.

Regression for breakit items 2 and 3: at n = 20 (10) draws every cell's minimum detectable TV (power
.99, alpha 1e-3) is far above the kernel target TV 0.03, so no PASS may be claimed.
"""

import pytest

from verifier.audit.kernel_audit import audit_kernel, standard_kernel_cases
from verifier.audit.kernel_report import render_kernel_markdown
from verifier.audit.tree_kernel_audit import audit_tree_kernel, standard_tree_kernel_cases
from verifier.cli import main
from verifier.decoders.kernels import full_p_fallback_kernel
from verifier.decoders.tree_kernels import TREE_KERNELS


def test_kernel_audit_tiny_n_is_underpowered():
    r = audit_kernel(full_p_fallback_kernel, standard_kernel_cases()[0], num_draws=20, seed=0, alpha=1e-3)
    assert r.verdict == "UNDERPOWERED"
    assert r.draws_needed() > 20 and "n needed" in r.power_note()


def test_kernel_audit_cli_tiny_n_exits_4(capsys):
    rc = main(["audit", "--kernel", "verifier.decoders.kernels:full_p_fallback_kernel", "--num-draws", "20", "--case", "seed-3token"])
    out = capsys.readouterr().out
    assert rc == 4 and "PASS" not in out and "UNDERPOWERED" in out


def test_tree_kernel_audit_tiny_n_is_underpowered_without_tv_claim(capsys):
    case = standard_tree_kernel_cases()[0]
    r = audit_tree_kernel(TREE_KERNELS["residual_not_updated"], case, num_draws=10, seed=0, alpha=1e-3)
    assert r.verdict == "UNDERPOWERED" and "TV~" not in r.summary()
    rc = main(["audit-tree", "--kernel", "residual_not_updated", "--num-draws", "10", "--case", case.name])
    out = capsys.readouterr().out
    assert rc == 4 and "PASS" not in out and "TV~" not in out


def test_an_underpowered_case_says_how_many_draws_and_hours_it_needs():
    """MDE ~ 1 / sqrt(n): a case of 10,000 draws in 100 s whose least reached cell has MDE 0.06 needs 4x the draws
    for TV 0.03 (40,000; 400 s = 0.11 h); a PASS case needs none."""
    from verifier.audit.kernel_report import draws_needed

    case = {"verdict": "UNDERPOWERED", "num_draws": 10_000, "seconds": 100.0,
            "cells": [{"mde_tv": 0.01}, {"mde_tv": 0.06}, {"mde_tv": None}]}
    need = draws_needed(case, 0.03)
    assert need["draws"] == 40_000 and need["rate"] == 100.0 and abs(need["hours"] - 400 / 3600) < 1e-12
    assert draws_needed({**case, "verdict": "PASS"}, 0.03) is None


def test_the_hours_scale_the_drawing_rate_not_the_statistics():
    """A case whose 100 s were 1 s of drawing and 99 s of statistics (the vllm-sampler kernel at 200,000 draws: 31.7 s
    of wall time, 33M draws then took 93 s) needs 40,000 draws = 4 s of drawing + the 99 s once, not 400 s."""
    from verifier.audit.kernel_report import draws_needed

    case = {"verdict": "UNDERPOWERED", "num_draws": 10_000, "seconds": 100.0, "draw_seconds": 1.0,
            "cells": [{"mde_tv": 0.01}, {"mde_tv": 0.06}]}
    need = draws_needed(case, 0.03)
    assert need["draws"] == 40_000 and need["rate"] == 10_000.0 and need["rate_of"] == "drawing"
    assert abs(need["hours"] - (4 + 99) / 3600) < 1e-12


def test_a_kernel_audit_records_its_drawing_time():
    """The kernel report's case carries draw_seconds (the kernel's own time), at most the case's wall time, and an
    UNDERPOWERED case scales that rate."""
    import time

    from verifier.audit.kernel_report import kernel_audit_report
    from verifier.decoders.kernels import verify_chain

    case = next(c for c in standard_kernel_cases() if c.name == "chain-k4")
    start = time.perf_counter()
    r = audit_kernel(verify_chain, case, num_draws=2000, seed=0)
    wall = time.perf_counter() - start
    report = kernel_audit_report([r], kernel="verify_chain", seconds=[wall])
    c = report["cases"][0]
    assert 0 < c["draw_seconds"] <= wall and c["verdict"] == "UNDERPOWERED"  # 2,000 draws reach position 4 ~70 times
    assert "(drawing)" in render_kernel_markdown(report)
    # report.md's figure is the console's (the power calculation per cell), not a second estimate
    from verifier.audit.kernel_report import draws_needed

    assert c["draws_needed_power"] == r.draws_needed() > 2000
    assert draws_needed(c, report["target_tv"])["draws"] == r.draws_needed()
    assert f"about {r.draws_needed():,} (the power calculation" in render_kernel_markdown(report)



def test_a_cell_with_no_finite_mde_is_named_not_scaled_past():
    """A cell whose MDE is infinite at this n (stored as "inf") was skipped, so the draws came from the finite cells
    and understated what the case needs; now no number is given and the cell is named."""
    from verifier.audit.kernel_report import draws_needed

    case = {"verdict": "UNDERPOWERED", "num_draws": 10_000, "seconds": 100.0,
            "cells": [{"name": "gof@1", "mde_tv": 0.06}, {"name": "gof@3", "mde_tv": "inf"}]}
    assert draws_needed(case, 0.03) == {"draws": None, "rate": None, "hours": None, "blind": ["gof@3"]}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0.0, True, "1.0"])
def test_a_duration_that_is_no_measured_time_gives_no_rate_from_it(bad):
    """draw_seconds / seconds of an edited or corrupted report.json: an infinite draw_seconds used to give rate 0 and no
    hours while claiming the drawing rate, an infinite seconds "inf h", True one second; now such a value is absent."""
    from verifier.audit.kernel_report import draws_needed

    case = {"verdict": "UNDERPOWERED", "num_draws": 10_000, "seconds": 100.0, "cells": [{"mde_tv": 0.06}]}
    need = draws_needed({**case, "draw_seconds": bad}, 0.03)
    assert need["rate"] == 100.0 and need["rate_of"] == "case wall time" and abs(need["hours"] - 400 / 3600) < 1e-12
    need = draws_needed({**case, "seconds": bad, "draw_seconds": 1.0}, 0.03)
    assert need["rate"] == 10_000.0 and abs(need["hours"] - 4 / 3600) < 1e-12  # no fixed part from a bad wall time
    need = draws_needed({**case, "seconds": bad}, 0.03)
    assert need["rate"] is None and need["hours"] is None


def test_an_edited_report_without_draws_or_with_target_tv_0_gives_no_estimate():
    """A hand-edited report.json (no num_draws, a target TV of 0, cells not a list) gets no estimate, not a crash."""
    from verifier.audit.kernel_report import draws_needed

    case = {"verdict": "UNDERPOWERED", "num_draws": 10_000, "seconds": 100.0, "cells": [{"mde_tv": 0.06}]}
    assert draws_needed(case, 0.03)["draws"] == 40_000
    assert draws_needed({k: v for k, v in case.items() if k != "num_draws"}, 0.03) is None
    assert draws_needed(case, 0) is None and draws_needed({**case, "cells": None}, 0.03) is None
