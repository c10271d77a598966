"""Helpers for the runner tests: write small suites (tabular target, plugin decoders) to tmp dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "runner" / "suites" / "tiny.toml"


def suite_text(decoders: str, *, models: str = 'target = "tabular:bigram4_eos"\ndraft = "tabular:bigram4_eos"',
               prompt: str = "ids = [0]", defaults: str = "", exact: str = "enabled = false",
               stats: str = "target_mde = 0.2", name: str = "t") -> str:
    """A suite TOML whose decoders are plugin samplers from tests/runner/plugins.py."""
    return f"""
schema_version = 1
name = "{name}"
seed = 11
python_path = [{json.dumps(str(REPO))}]

[exact]
{exact}

[models.tab]
{models}

[prompts.p]
{prompt}

[sampling.t1]
temperature = 1.0

[defaults]
max_new_tokens = 3
samples = 600
chunk_size = 200
tests = ["gof", "joint", "pit"]
{defaults}

{decoders}

[stats]
{stats}
"""


EXACT_DECODER = """
[[decoders]]
name = "exact-sampler"
decoder = "tests.runner.plugins:table_sampler"
expect = "pass"
"""


@pytest.fixture
def write_suite(tmp_path):
    def write(text: str, name: str = "suite.toml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def strip_volatile(report: dict) -> dict:
    """report.json without its volatile section (run id, timestamps, wall times)."""
    return {k: v for k, v in report.items() if k != "run"}
