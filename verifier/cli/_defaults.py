"""Default values the ``specverify`` parsers show in ``--help``, importable without torch.

Building a parser must not import :mod:`verifier.audit` (its package imports torch and scipy:
seconds per ``--help``).  These mirror the defined constants; ``tests/cli/test_help_speed.py``
checks that they agree with their sources.
"""

from __future__ import annotations

AUDIT_TARGET_TV = 0.05  # = verifier.audit.suite_builder.DEFAULT_TARGET_TV
AUDIT_CHUNK_SIZE = 500  # = verifier.audit.suite_builder.DEFAULT_CHUNK_SIZE
KERNEL_TARGET_TV = 0.03  # = verifier.audit.kernel_audit.KERNEL_TARGET_TV
