"""docs/plugins.md (issue 28 item 4): its worked example, run as the guide says, through the real CLI.

The guide's first ``$ specverify audit`` command runs in a subprocess from the repository root; the
output must show what the guide says it shows: the decoder under its ``name``, PASS, exit 0, and the
acceptance figures from its ``DecoderStats`` (not "ENGINE REPORTS NO STATISTICS").
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugins.md"


def _commands() -> list[list[str]]:
    return [shlex.split(m) for m in re.findall(r"^\$ (specverify audit .+)$", GUIDE.read_text(), flags=re.M)]


def test_the_guide_names_its_commands_files_and_stats_fields():
    commands = _commands()
    assert len(commands) == 2
    for cmd in commands:
        spec = cmd[cmd.index("--decoder") + 1]
        assert (ROOT / spec.split(":")[0]).is_file(), spec
    text = GUIDE.read_text()
    for field in ("first_round_accepted", "accepted_counts", "origins", "num_draft_tokens", "vocab_size", "eos_token_id"):
        assert f"`{field}`" in text


def test_the_guides_worked_example_passes_through_the_real_cli(tmp_path):
    cmd = _commands()[0] + ["--report-dir", str(tmp_path / "reports")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "verifier.cli", *cmd[1:]], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert re.search(r"example-speculative\s+expect pass\s+-> PASS", text), text[-3000:]
    assert "acceptance: accepts" in text and "ENGINE REPORTS NO STATISTICS" not in text
    # one claim, one number, one wording: the verdict line, the audit's last line and the report (issue 28 item 5)
    assert "no bias >= TV 0.1 in tokens" in text and "PASS: no bias >= TV 0.1 (total variation" in text
    md = next((tmp_path / "reports").rglob("report.md")).read_text()
    assert "**example-speculative**" in md and "no bias >= TV 0.1 on the first 3 tokens" in md
