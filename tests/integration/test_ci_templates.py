"""The ready-to-copy CI templates under ci/: valid YAML, the right triggers and runners, artifacts
uploaded even on failure, and every `specverify` command they run parses with the real CLI."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra: pip install -e '.[dev]'")

from verifier.cli import build_parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GITHUB = ROOT / "ci" / "github" / "specverify.yml"
GITLAB = ROOT / "ci" / "gitlab" / "specverify.gitlab-ci.yml"
ARTIFACTS = ("report.html", "junit.xml")


def _load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path} is not a YAML mapping"
    return doc


def _expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), text)


def _specverify_commands(script: str, env: dict[str, str]) -> list[list[str]]:
    out = []
    for line in script.splitlines():
        line = line.strip()
        if line.startswith("specverify "):
            out.append(shlex.split(_expand(line, env))[1:])
    return out


def _check_parses(argv: list[str]) -> None:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse prints the reason to stderr
        pytest.fail(f"`specverify {' '.join(argv)}` does not parse (exit {exc.code})")
    assert getattr(args, "_run", None) is not None, argv
    suite = next((a for a in argv[1:] if a.endswith(".toml")), None)
    if suite is not None:
        assert (ROOT / suite).is_file(), f"the template runs {suite}, which this repository does not ship"


def test_github_workflow_gate_and_nightly():
    doc = _load(GITHUB)
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert {"pull_request", "schedule"} <= set(triggers), triggers
    env = {k: str(v) for k, v in doc["env"].items()}
    jobs = doc["jobs"]
    gate, nightly = jobs["cpu-gate"], jobs["gpu-nightly"]
    assert "pull_request" in gate["if"] and "ubuntu" in gate["runs-on"]
    assert "schedule" in nightly["if"] and {"self-hosted", "gpu"} <= set(nightly["runs-on"])

    profiles = {}
    for name, job in jobs.items():
        commands = [c for step in job["steps"] for c in _specverify_commands(step.get("run", ""), env)]
        assert commands, f"job {name} runs no specverify command"
        for argv in commands:
            _check_parses(argv)
            profiles[name] = argv[argv.index("--profile") + 1]
        uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
        assert len(uploads) == 1, f"job {name} must upload its reports once"
        assert uploads[0]["if"] == "always()", "reports must be uploaded when the gate fails too"
        for artifact in ARTIFACTS:
            assert artifact in uploads[0]["with"]["path"], f"job {name} does not upload {artifact}"
    assert profiles == {"cpu-gate": "ci", "gpu-nightly": "nightly"}
    assert "--device cuda" in " ".join(" ".join(s.get("run", "").split()) for s in nightly["steps"])


def test_gitlab_snippet_gate_and_nightly():
    doc = _load(GITLAB)
    env = {k: str(v) for k, v in doc["variables"].items()}
    gate, nightly = doc["specverify:cpu-gate"], doc["specverify:gpu-nightly"]
    assert any("merge_request_event" in r["if"] for r in gate["rules"])
    assert any("schedule" in r["if"] for r in nightly["rules"]) and "gpu" in nightly["tags"]
    for name, job, profile in (("cpu-gate", gate, "ci"), ("gpu-nightly", nightly, "nightly")):
        assert job["stage"] in doc["stages"]
        commands = [c for line in job["script"] for c in _specverify_commands(line, env)]
        assert len(commands) == 1, f"{name} must run exactly one specverify command"
        _check_parses(commands[0])
        assert commands[0][commands[0].index("--profile") + 1] == profile
        art = job["artifacts"]
        assert art["when"] == "always", "reports must be kept when the gate fails too"
        report_dir = commands[0][commands[0].index("--report-dir") + 1]
        assert any(p.rstrip("/") == report_dir for p in art["paths"]), "report.html lives in the report dir"
        assert art["reports"]["junit"].startswith(report_dir) and art["reports"]["junit"].endswith("junit.xml")


def test_command_extraction_sees_a_broken_command():
    """The checker itself must fail on an option the CLI does not have."""
    with pytest.raises(pytest.fail.Exception):
        _check_parses(["run", "suites/ci.toml", "--no-such-option"])
