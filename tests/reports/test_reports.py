"""Report writers: report.md ordering, junit.xml structure, HTML escaping, headless-Chromium rendering."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.reports import render_html, render_junit, render_markdown, write_reports

TINY = Path(__file__).resolve().parents[2] / "tests" / "runner" / "suites" / "tiny.toml"
HOSTILE = '<script>alert("x")</script>|`'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("rep") / "run"
    assert main(["run", str(TINY), "--run-dir", str(run_dir), "--no-progress"]) == 0
    return json.loads((run_dir / "report.json").read_text())


def _hostile(report: dict) -> dict:
    """The report with a user-chosen decoder name that is also markup."""
    r = copy.deepcopy(report)
    old = r["decoders"][1]["decoder"]
    r["decoders"][1]["decoder"] = HOSTILE
    for c in r["cells"]:
        if c["decoder"] == old:
            c["decoder"] = HOSTILE
            c["id"] = c["id"].replace(old, HOSTILE)
    return r


def test_markdown_puts_the_verdict_first_then_failing_cells(report):
    md = render_markdown(report)
    first = md.splitlines()[0]
    assert first.startswith("# spec-verifier") and "**PASS** (exit 0)" in first
    failing = md.index("## Failing cells (0)")  # the biased sampler's 4 cells are expected detections
    assert failing < md.index("as expected: 4 cells") < md.index("All 8 cells")
    assert md.index("biased-sampler/zero/t1/k=1/gof@1") > failing


def test_markdown_lists_bias_in_a_pass_decoder_as_failing(report):
    r = copy.deepcopy(report)
    cell = next(c for c in r["cells"] if c["decoder"] == "exact-sampler")
    cell["verdict"] = "BIAS"
    md = render_markdown(r)
    section = md[md.index("## Failing cells (1)"):md.index("as expected: 4 cells")]
    assert cell["id"] in section


def test_markdown_escapes_table_breaking_names(report):
    md = render_markdown(_hostile(report))
    assert "<script>" not in md
    assert "\\|" in md  # a pipe in a name cannot split a table row


def test_junit_has_one_testcase_per_cell(report):
    root = ET.fromstring(render_junit(report))
    cases = root.findall(".//testcase")
    cell_cases = [c for c in cases if c.get("classname").endswith((".exact-sampler", ".biased-sampler"))]
    assert sorted(c.get("name") for c in cell_cases) == sorted(c["id"] for c in report["cells"])
    assert root.get("failures") == "0" and root.get("tests") == str(len(cases))


def test_junit_marks_bias_in_a_pass_decoder_as_failure(report):
    r = copy.deepcopy(report)
    r["cells"][0]["verdict"] = "BIAS"
    root = ET.fromstring(render_junit(r))
    failed = [c.get("name") for c in root.findall(".//testcase") if c.find("failure") is not None]
    assert failed == [r["cells"][0]["id"]]


def test_html_is_self_contained_and_escaped(report):
    html = render_html(_hostile(report))
    assert HOSTILE not in html and "&lt;script&gt;alert(" in html
    assert "src=\"http" not in html and "<link" not in html  # nothing fetched from outside
    assert html.count('<figure class="cell-figure"') == 2  # one per decoder (inline SVG), plus the ranked p-values
    assert html.count("<svg") == 3
    assert html.count("data:image/png;base64,") == 1  # the diagnosis figure of the biased decoder (issue 15)


@pytest.mark.browser
def test_report_html_renders_in_headless_chromium(report, tmp_path):
    """Screenshot report.html with headless Chromium; the PNG must not be blank."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI (the CI script installs the Debian `chromium` package)")
        pytest.skip("chromium not installed (not in CI): apt-get install chromium to run this test")
    paths = write_reports(report, tmp_path / "out")
    shot = tmp_path / "shot.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600", f"--screenshot={shot}",
           paths["report.html"].resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), proc.stderr[-2000:]
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    # non-blank: many distinct colours (text, tables, plots), not a uniform page
    assert pixels.std() > 0.05
    assert len(np.unique((pixels[::4, ::4] * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50


def test_support_violation_is_named_wherever_the_cell_is_listed(report):
    """A support violation rejects a cell whatever its p-value; the reports show it as its reason, never as a
    p-value (issue 12: it was shown as "p = 0.9" with verdict BIAS)."""
    r = copy.deepcopy(report)
    cell = next(c for c in r["cells"] if c["decoder"] != "exact-sampler")
    cell["support_violation"] = "token 2 emitted 7 times at target prob 0"
    cell["pvalue"], cell["statistic"] = 0.0, 0.0
    md = render_markdown(r)
    detected = md[md.index("as expected: 4 cells"):md.index("All 8 cells")]
    row = next(line for line in detected.splitlines() if line.startswith(f"| {cell['id']}"))
    assert "| support violation | support violation |" in row and "token 2 emitted 7 times at target prob 0" in row
    assert md.count("support violation: token 2 emitted 7 times at target prob 0") == 2  # detected + all-cells tables
    html = render_html(r)
    assert html.count("support violation: token 2 emitted 7 times at target prob 0") >= 2
    junit = render_junit(r)
    assert "support violation: token 2 emitted 7 times at target prob 0" in junit and "p=0 " not in junit.split(cell["id"])[1][:300]
