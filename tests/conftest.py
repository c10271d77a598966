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
