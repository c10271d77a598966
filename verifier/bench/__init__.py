"""Benchmarks behind ``specverify bench <name>``.

Each module ``verifier/bench/<name>.py`` defines ``HELP``, ``register(parser)`` and
``run(args) -> int`` and becomes ``specverify bench <name>``; benchmarks print their figures
(never assert on time) and may write them to a file given with ``--out``.
"""
