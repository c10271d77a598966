"""Settings for the whole test session.

The Monte Carlo null-stream cache (:mod:`verifier.stats.nullcache`) of a test session lives in a fresh
temporary folder, never in the user's ``~/.cache/specverify``: cached and uncached p-values are
bit-identical, but a test run must neither depend on nor fill a user's cache.  A
``SPECVERIFY_CACHE_DIR`` set by the caller is kept (CI may want to reuse one).  Child processes
started by CLI tests inherit it.
"""

import atexit
import os
import shutil
import tempfile

if "SPECVERIFY_CACHE_DIR" not in os.environ:
    _folder = tempfile.mkdtemp(prefix="specverify-test-cache-")
    os.environ["SPECVERIFY_CACHE_DIR"] = _folder
    atexit.register(shutil.rmtree, _folder, True)


# --- test tiers (issue 30) ---------------------------------------------------------------------------------
# The README's test command runs the quick tier: every module, one real-engine smoke test per installed engine,
# the same assertions and statistical guarantees. Tests marked ``full`` (the rest of the engine matrix, the
# slow statistical calibrations, the browser tests, the long server audits) run with ``--full``, as `.ci/run`
# does. Deselected tests are counted in pytest's summary line ("N deselected") and named in the header.
import pytest  # noqa: E402


def pytest_addoption(parser, pluginmanager):
    group = parser.getgroup("specverify", "spec-verifier test tiers")
    if not pluginmanager.has_plugin("xdist"):
        # `-p no:xdist` (README, Tests): pyproject's addopts still pass `-n auto --dist loadfile`, which pytest would
        # refuse as unrecognized arguments without the plugin; take them and run in one process
        group._addoption("-n", "--numprocesses", dest="numprocesses", default=None,  # as xdist registers it (a
                         # lowercase short option: addoption reserves those for pytest itself)
                         help="(pytest-xdist is off: ignored, one process)")
        group.addoption("--dist", dest="dist", default="no", help="(pytest-xdist is off: ignored)")
    group.addoption("--full", action="store_true", default=False,
                    help="run the full tier (tests marked `full` too: every engine test, slow statistical tests, "
                         "browser tests). Default: the quick tier, which deselects them.")


def _full_tier(config) -> bool:
    return bool(config.getoption("--full"))


def _tier_line(config) -> str:
    if _full_tier(config):
        return "spec-verifier: full tier (every test)"
    return "spec-verifier: quick tier (tests marked `full` are deselected; `--full` runs every test)"


def pytest_report_header(config):
    return _tier_line(config)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """``-q`` (the README's command) hides the report header: name the tier anyway, so a quick run never reads as
    a full one (xdist workers print nothing; their controller does)."""
    config = session.config
    if config.get_verbosity() >= 0 or hasattr(config, "workerinput"):
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(_tier_line(config))


def pytest_collection_modifyitems(config, items):
    if _full_tier(config):
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("full") is not None else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
