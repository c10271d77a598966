"""pytest plugin: run spec-verifier checks and suites inside any test suite.

Registered under the ``pytest11`` entry point named after the module,
``"verifier.pytest_plugin" = "verifier.pytest_plugin"``, so ``pytest -p verifier.pytest_plugin`` (the
way to load it without the entry point) stays harmless once it is installed, and
``-p no:verifier.pytest_plugin`` disables it.

Options (group "spec-verifier", also settable as ini keys without the leading dashes, e.g.
``verifier_profile = nightly`` in ``pytest.ini``)::

    --verifier-profile NAME   sample-budget profile: ci, nightly or audit.  Default: ci.
    --verifier-seed INT       root seed of every check and suite.  Default: each call's own seed.
    --verifier-report-dir DIR where suite reports are written.  Default: <rootdir>/reports/pytest.

Fixtures
--------
``verifier_options``
    The resolved options (:class:`VerifierOptions`).
``verifier_check``
    :func:`verifier.api.assert_preserves_target` with the seed from ``--verifier-seed``,
    ``num_samples`` scaled by the profile's ``sample_scale`` (ci 1x, audit 4x, nightly 8x, as in
    suites) and the outcome recorded for the end-of-run summary.
``verifier_suite``
    ``verifier_suite("suites/ci.toml")`` runs a suite TOML through ``specverify run`` with the
    profile, seed and report dir above and returns a :class:`SuiteOutcome`;
    ``outcome.assert_ok()`` fails the test with the failing cells and a reproduce command.

At the end of the run a "spec-verifier" section lists every check and suite with its verdict.

This module imports only the standard library and pytest at import time: torch, numpy and the
harness itself are imported inside the fixtures, so loading the plugin costs nothing and cannot
fail on a broken torch (a broken ``pytest11`` plugin breaks every pytest run on the machine) --
as long as ``verifier/__init__.py`` itself does not import torch eagerly.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

__all__ = ["VerifierOptions", "SuiteOutcome", "PROFILES", "SEED_ENV_VAR"]

PROFILES = ("ci", "nightly", "audit")  # the named sample-budget profiles every suite defines
DEFAULT_PROFILE = "ci"  # cheapest profile: the one a pull-request gate runs
DEFAULT_REPORT_SUBDIR = "reports/pytest"  # under the pytest rootdir; /reports/* is git-ignored
SEED_ENV_VAR = "SPECVERIFY_SEED"  # read by verifier.api when a call passes seed=None
MAX_MESSAGE_CELLS = 12  # cells listed in a failing suite's assertion message

_GOOD_VERDICTS = ("PASS",)  # check: no bias; suite: every expectation met (mutants detected)
_RECORDS = pytest.StashKey[list]()
_OPTIONS = pytest.StashKey["VerifierOptions"]()
_PREVIOUS_SEED_ENV = pytest.StashKey["str | None"]()


@dataclass(frozen=True)
class VerifierOptions:
    """The plugin's resolved options.

    Attributes
    ----------
    profile : str
        One of :data:`PROFILES`.
    seed : int or None
        Root seed forced on every check and suite; ``None`` keeps each call's own seed.
    report_dir : pathlib.Path
        Directory under which suite reports are written.
    """

    profile: str
    seed: int | None
    report_dir: Path


@dataclass
class _Record:
    nodeid: str
    kind: str  # "check" or "suite"
    name: str
    verdict: str
    detail: str = ""


@dataclass
class SuiteOutcome:
    """What one ``specverify run`` through :func:`verifier_suite` produced.

    Attributes
    ----------
    suite : pathlib.Path
        The suite TOML that ran.
    exit_code : int
        The CLI exit code (0 every expectation met, 1 bias, 2 usage, 3 decoder error,
        4 underpowered).
    run_dir : pathlib.Path or None
        The run's report directory (``report.json``, ``report.html``, ``junit.xml``), when one was
        written.
    report : dict
        The parsed ``report.json`` (empty when none was written).
    command : str
        A shell command that reproduces the run, seed included.
    """

    suite: Path
    exit_code: int
    run_dir: Path | None
    report: dict = field(default_factory=dict)
    command: str = ""

    @property
    def ok(self) -> bool:
        """True when every expectation of the suite was met (exit code 0)."""
        return self.exit_code == 0

    @property
    def verdict(self) -> str:
        """The report's overall verdict (``PASS``, ``FAIL``, ``UNDERPOWERED``, ``ERROR``), or
        ``exit <code>`` when no report was written."""
        return str(self.report.get("verdict") or f"exit {self.exit_code}")

    def failing_decoders(self) -> list[dict]:
        """Decoders of ``report.json`` whose expectation was not met (a ``pass`` decoder that is
        biased, underpowered or crashed; a ``detect`` mutant that went undetected)."""
        return [d for d in self.report.get("decoders", []) if not d.get("expectation_met", True)]

    def failing_cells(self) -> list[dict]:
        """Rejected cells of the decoders that failed their expectation."""
        names = {d.get("decoder") for d in self.failing_decoders()}
        return [c for c in self.report.get("cells", []) if c.get("decoder") in names and c.get("verdict") != "PASS"]

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` unless every expectation was met: the message lists each failing
        decoder, its rejected cells (p-value, adjusted p-value, effect with CI) and a reproduce command."""
        if self.ok:
            return
        lines = [f"spec-verifier suite {self.suite}: {self.verdict} (exit code {self.exit_code})"]
        diagnosis = self.report.get("diagnosis") or {}
        diagnosed = {item.get("decoder"): item for item in diagnosis.get("decoders") or []}
        for d in self.failing_decoders():
            lines.append(f"  {d.get('decoder')}: expected {d.get('expect')}, got {d.get('verdict')} -- {d.get('reason', '')}")
            if d.get("decoder") in diagnosed:  # which known mechanism, in plain words (verifier.diagnose.glossary)
                from verifier.diagnose.glossary import mechanism_line

                lines.append(f"    diagnosis: {mechanism_line(diagnosed[d['decoder']])}")
            elif diagnosis.get("skipped") and d.get("verdict") == "BIAS DETECTED":
                lines.append(f"    diagnosis skipped ({diagnosis['skipped']}): {diagnosis.get('command', '')}")
        cells = self.failing_cells()
        for cell in cells[:MAX_MESSAGE_CELLS]:
            lines.append("    " + _describe_cell(cell))
        if len(cells) > MAX_MESSAGE_CELLS:
            lines.append(f"    ... and {len(cells) - MAX_MESSAGE_CELLS} more cells")
        if self.run_dir is not None:
            lines.append(f"report: {self.run_dir / 'report.html'}")
        lines.append(f"reproduce: {self.command}")
        raise AssertionError("\n".join(lines))


# --------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("verifier", "spec-verifier (statistical verification of speculative decoders)")
    group.addoption(
        "--verifier-profile",
        action="store",
        dest="verifier_profile",
        metavar="NAME",
        choices=PROFILES,
        default=None,
        help=f"Sample-budget profile for verifier_suite and verifier_check: {', '.join(PROFILES)}. "
        f"Default: {DEFAULT_PROFILE} (or the verifier_profile ini key).",
    )
    group.addoption(
        "--verifier-seed",
        action="store",
        dest="verifier_seed",
        metavar="INT",
        type=_non_negative_int,
        default=None,
        help="Root seed (an integer >= 0) forced on every spec-verifier check and suite, to "
        "reproduce a failure. Default: each call's own seed.",
    )
    group.addoption(
        "--verifier-report-dir",
        action="store",
        dest="verifier_report_dir",
        metavar="DIR",
        default=None,
        help=f"Directory for suite reports (report.json/.md/.html, junit.xml). "
        f"Default: <rootdir>/{DEFAULT_REPORT_SUBDIR}.",
    )
    parser.addini("verifier_profile", f"Default for --verifier-profile. Default: {DEFAULT_PROFILE}.", default=DEFAULT_PROFILE)
    parser.addini("verifier_report_dir", f"Default for --verifier-report-dir. Default: {DEFAULT_REPORT_SUBDIR}.", default=DEFAULT_REPORT_SUBDIR)


def _non_negative_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--verifier-seed={text!r} is invalid; allowed: an integer >= 0") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--verifier-seed={text!r} is invalid; allowed: an integer >= 0")
    return value


def pytest_configure(config: pytest.Config) -> None:
    profile = config.getoption("verifier_profile") or config.getini("verifier_profile") or DEFAULT_PROFILE
    if profile not in PROFILES:
        raise pytest.UsageError(f"verifier_profile={profile!r} is invalid; allowed: one of {', '.join(PROFILES)}")
    report_dir = Path(config.getoption("verifier_report_dir") or config.getini("verifier_report_dir") or DEFAULT_REPORT_SUBDIR)
    if not report_dir.is_absolute():
        report_dir = Path(config.rootpath) / report_dir
    seed = config.getoption("verifier_seed")
    config.stash[_OPTIONS] = VerifierOptions(profile=profile, seed=seed, report_dir=report_dir)
    config.stash[_RECORDS] = []
    if seed is not None:
        # verifier.api reads it when a call passes seed=None, so plain calls reproduce too;
        # restored at unconfigure (an in-process pytest run must not leak it to its caller).
        config.stash[_PREVIOUS_SEED_ENV] = os.environ.get(SEED_ENV_VAR)
        os.environ[SEED_ENV_VAR] = str(seed)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PREVIOUS_SEED_ENV in config.stash:
        previous = config.stash[_PREVIOUS_SEED_ENV]
        if previous is None:
            os.environ.pop(SEED_ENV_VAR, None)
        else:
            os.environ[SEED_ENV_VAR] = previous


def pytest_report_header(config: pytest.Config) -> str | None:
    opts = config.stash.get(_OPTIONS, None)
    if opts is None:
        return None
    seed = "per call" if opts.seed is None else str(opts.seed)
    return f"spec-verifier: profile={opts.profile} seed={seed} report-dir={opts.report_dir}"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def verifier_options(pytestconfig: pytest.Config) -> VerifierOptions:
    """The plugin options resolved from the command line and ini file."""
    return pytestconfig.stash[_OPTIONS]


@pytest.fixture
def verifier_check(request: pytest.FixtureRequest, verifier_options: VerifierOptions) -> Callable[..., Any]:
    """:func:`verifier.api.assert_preserves_target`, seeded from ``--verifier-seed`` and recorded.

    Call it exactly like the API function; a ``seed`` given on the command line overrides the
    call's own.  Returns the :class:`verifier.api.PreservationResult`; raises ``AssertionError``
    (with the failing cells, p-values, effect estimate and a reproduce command) on bias.
    """
    records = request.config.stash[_RECORDS]

    def check(decoder, target, prompts, sampling, **kwargs):
        __tracebackhide__ = True  # a failure shows the test's line and the failing cells, not this harness
        from verifier import api  # lazy: imports torch and numpy

        from verifier.suite.schema import BUILTIN_PROFILES

        scale = float(BUILTIN_PROFILES[verifier_options.profile].get("sample_scale", 1.0))
        kwargs["num_samples"] = max(1, round(kwargs.get("num_samples", api.DEFAULT_NUM_SAMPLES) * scale))
        if verifier_options.seed is not None:
            kwargs["seed"] = verifier_options.seed
            kwargs.setdefault("reproduce_hint", _pytest_command(request.config, request.node.nodeid, verifier_options.seed))
        name = kwargs.get("name") or getattr(decoder, "name", None) or type(decoder).__name__
        try:
            result = api.assert_preserves_target(decoder, target, prompts, sampling, **kwargs)
        except AssertionError as exc:
            result = getattr(exc, "result", None)
            records.append(_Record(request.node.nodeid, "check", str(name), "BIAS DETECTED", _result_detail(result)))
            raise
        except Exception as exc:
            records.append(_Record(request.node.nodeid, "check", str(name), "ERROR", f"{type(exc).__name__}: {exc}"))
            raise
        records.append(_Record(request.node.nodeid, "check", str(name), result.verdict, _result_detail(result)))
        return result

    return check


@pytest.fixture
def verifier_suite(request: pytest.FixtureRequest, verifier_options: VerifierOptions) -> Callable[..., SuiteOutcome]:
    """Run a suite TOML with ``specverify run`` using the plugin's profile, seed and report dir.

    ``verifier_suite(path, *extra_cli_args)`` returns a :class:`SuiteOutcome`; call
    ``.assert_ok()`` on it to fail the test unless every expectation was met.
    """
    records = request.config.stash[_RECORDS]

    def run_suite(path: str | os.PathLike, *extra_args: str) -> SuiteOutcome:
        outcome = _run_suite(Path(path), verifier_options, list(extra_args))
        bad = outcome.failing_decoders()
        mechanisms = {item.get("decoder"): "+".join(m["name"] for m in item.get("mechanism") or [])
                      for item in (outcome.report.get("diagnosis") or {}).get("decoders") or []}
        names = [f"{d.get('decoder')} (mechanism {mechanisms[d.get('decoder')]})" if mechanisms.get(d.get("decoder"))
                 else str(d.get("decoder")) for d in bad]
        detail = f"expectation failed: {', '.join(names)}" if bad else ""
        if outcome.run_dir is not None:
            detail = (detail + "; " if detail else "") + f"report {outcome.run_dir}"
        records.append(_Record(request.node.nodeid, "suite", str(path), outcome.verdict, detail))
        return outcome

    return run_suite


def _suite_argv(suite: Path, opts: VerifierOptions, extra: list[str]) -> list[str]:
    argv = ["run", str(suite), "--profile", opts.profile, "--report-dir", str(opts.report_dir), "--no-progress"]
    if opts.seed is not None:
        argv += ["--seed", str(opts.seed)]
    return argv + extra


def _run_suite(suite: Path, opts: VerifierOptions, extra: list[str]) -> SuiteOutcome:
    from verifier.cli._isolate import run_in_child  # a job process: plugin code cannot end pytest with 0

    argv = _suite_argv(suite, opts, extra)
    before = set(opts.report_dir.glob("**/report.json")) if opts.report_dir.exists() else set()
    try:
        code = int(run_in_child(argv, "run"))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    after = set(opts.report_dir.glob("**/report.json")) if opts.report_dir.exists() else set()
    new = sorted(after - before, key=lambda p: p.stat().st_mtime)
    run_dir = new[-1].parent if new else None
    report: dict = {}
    if run_dir is not None:
        try:
            report = json.loads((run_dir / "report.json").read_text())
        except (OSError, ValueError):
            report = {}
    command = "specverify " + " ".join(shlex.quote(a) for a in argv)
    return SuiteOutcome(suite=suite, exit_code=code, run_dir=run_dir, report=report, command=command)


# --------------------------------------------------------------------------- summary


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    records = config.stash.get(_RECORDS, [])
    if not records:
        return
    opts = config.stash[_OPTIONS]
    tr = terminalreporter
    tr.write_sep("=", "spec-verifier summary")
    seed = "per call" if opts.seed is None else str(opts.seed)
    tr.write_line(f"profile={opts.profile} seed={seed}")
    for rec in records:
        bad = rec.verdict not in _GOOD_VERDICTS
        line = f"{rec.verdict:<15} {rec.kind:<5} {rec.name}  ({rec.nodeid})"
        if rec.detail:
            line += f"  {rec.detail}"
        tr.write_line(line, red=bad, green=not bad)
    n_bad = sum(r.verdict not in _GOOD_VERDICTS for r in records)
    tr.write_line(f"{len(records)} spec-verifier check(s)/suite(s), {n_bad} not passing")


# --------------------------------------------------------------------------- helpers


def _pytest_command(config: pytest.Config, nodeid: str, seed: int) -> str:
    """``python -m pytest NODE --verifier-seed=S`` (with ``-p verifier.pytest_plugin`` when the plugin
    was loaded that way rather than through its ``pytest11`` entry point)."""
    import sys

    module = sys.modules[__name__]
    # the entry point is named after the module, so the registered name cannot tell the two apart;
    # plugins loaded through an installed distribution's pytest11 entry point are listed with it
    by_entry_point = any(plugin is module for plugin, _ in config.pluginmanager.list_plugin_distinfo())
    plugin = "" if by_entry_point else " -p verifier.pytest_plugin"
    return f"python -m pytest {shlex.quote(nodeid)}{plugin} --verifier-seed={seed}"


def _result_detail(result: Any) -> str:
    if result is None:
        return ""
    parts = []
    n_cells = len(getattr(result, "cells", ()) or ())
    if n_cells:
        parts.append(f"{n_cells} cells")
    p = getattr(result, "min_adjusted_pvalue", None)
    if p is not None:
        parts.append(f"min adj. p={p:.3g}")
    seed = getattr(result, "seed", None)
    if seed is not None:
        parts.append(f"seed={seed}")
    return ", ".join(parts)


def _describe_cell(cell: dict) -> str:
    parts = [str(cell.get("id", "?")), str(cell.get("verdict", "?"))]
    for key, label in (("pvalue", "p"), ("adjusted_pvalue", "adj. p")):
        if isinstance(cell.get(key), (int, float)):
            parts.append(f"{label}={cell[key]:.3g}")
    if isinstance(cell.get("effect"), (int, float)):
        ci = cell.get("effect_ci") or ()
        unit = cell.get("effect_unit") or ""
        text = f"effect {unit} {cell['effect']:.3g}".replace("  ", " ")
        if len(ci) == 2:
            text += f" (CI {ci[0]:.3g}..{ci[1]:.3g})"
        parts.append(text)
    if cell.get("support_violation"):
        parts.append(f"support violation: {cell['support_violation']}")
    return "  ".join(parts)
