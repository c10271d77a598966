"""Old command line ``torchrun ... -m verifier.runner.torchrun SUITE ...``: moved, says where (exit 2).

The launcher is :mod:`verifier.cli.torchrun` (a front end: it calls :func:`verifier.pipeline.merge_runs`, a layer
above the runner), so the runner cannot run it without an upward import; an old job script gets one line naming
the new command instead of a traceback.
"""

import sys

if __name__ == "__main__":
    print("error: verifier.runner.torchrun moved to verifier.cli.torchrun; run "
          "`torchrun --nproc-per-node=N -m verifier.cli.torchrun SUITE --run-dir DIR` (same arguments)", file=sys.stderr)
    sys.exit(2)
