"""``--diagnose off|auto`` (and its alias ``--no-diagnosis``) of ``specverify run`` and ``audit``.

After BIAS DETECTED the runner diagnoses the biased decoders (which known mechanism, where; 1-2 min in the
ci suite, :mod:`verifier.diagnose.run_dir`).  A CI gate that only needs the exit code can skip it: the
verdict and exit code do not depend on it, and the report then says it was skipped and gives the
``specverify diagnose RUN_DIR`` command that computes it later.
"""

from __future__ import annotations

import argparse
import contextlib
import functools

DIAGNOSE_CHOICES = ("auto", "off")  # = verifier.diagnose.run_dir.DIAGNOSE_MODES (tested), without importing numpy here
DEFAULT_DIAGNOSE = "auto"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--diagnose {auto,off}`` and ``--no-diagnosis`` (= ``--diagnose off``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--diagnose", choices=DIAGNOSE_CHOICES, default=DEFAULT_DIAGNOSE,
                       help="After BIAS DETECTED: 'auto' diagnoses each biased decoder (which known mechanism, where; "
                            "printed and in the report), 'off' skips it (same verdict and exit code; run `specverify "
                            f"diagnose RUN_DIR` later). Default: {DEFAULT_DIAGNOSE}.")
    group.add_argument("--no-diagnosis", dest="diagnose", action="store_const", const="off",
                       help="Same as --diagnose off.")


@contextlib.contextmanager
def applied(args: argparse.Namespace):
    """Run a command with the process's diagnosis mode set from the parsed arguments
    (:func:`verifier._diagnose_mode.set_mode`, read by :mod:`verifier.diagnose.run_dir`), restored afterwards (in-process
    callers of ``main``); imports nothing heavy (an ``audit --engine`` starts its engine first)."""
    from verifier._diagnose_mode import mode, set_mode

    before = mode()
    set_mode(getattr(args, "diagnose", None) or DEFAULT_DIAGNOSE)
    try:
        yield
    finally:
        set_mode(before)


def with_diagnose_mode(command):
    """Decorate a command's ``run(args)`` so it runs under :func:`applied` (``--diagnose`` / ``--no-diagnosis``)."""
    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        with applied(args):
            return command(args)

    return run
