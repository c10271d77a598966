"""Old command line ``torchrun ... -m verifier.runner.torchrun SUITE ...``, kept for existing job scripts.

The launcher is :mod:`verifier.cli.torchrun` (a front end: it calls :func:`verifier.pipeline.merge_runs`,
a layer above the runner).  This file only runs it as ``__main__``; it is declared in
:data:`verifier._layers.COMPAT_SHIMS`, the one place an upward call is allowed.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("verifier.cli.torchrun", run_name="__main__", alter_sys=True)
