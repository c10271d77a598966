"""Issue 28 item 5: text that leaked internals or disagreed with itself.

Each test failed before its fix: "Suite `&lt;audit ...>`, profile `None`" in an audit's report.md;
"installed (None s install)" in `specverify engines`; "under every sampling config (s)"; "--target=None is
invalid" when --target is missing; "no bias >= TV 0.1" on the CLI but "no bias larger than TV 0.09" in
the report; no progress bar on a terminal without a size, COLUMNS ignored.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verifier.cli import main

TINY = Path(__file__).resolve().parents[2] / "tests" / "runner" / "suites" / "tiny.toml"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("leaks") / "run"
    assert main(["run", str(TINY), "--run-dir", str(run), "--no-progress"]) == 0
    return run


def test_the_report_states_the_pass_claim_as_the_cli_does(tiny_run, capsys):
    assert main(["report", str(tiny_run), "--no-progress"]) == 0
    cli = re.search(r"exact-sampler .*?(no bias >= TV [0-9.]+)", capsys.readouterr().out).group(1)
    md = (tiny_run / "report.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("- **exact-sampler**"))
    assert cli == "no bias >= TV 0.2" and cli in line, line
    assert "larger than TV" not in md
