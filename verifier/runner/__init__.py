"""The runner: the stages of a run -- exact stage, models, sampling into resumable shards, statistics, verdict.

The order the stages run in (and the diagnosis and reports after them) is :mod:`verifier.pipeline`.
Stages in :mod:`verifier.runner.run` (``RunOutcome``, ``load_run_suite``, ``new_run_dir``, ...); seeds
in :mod:`verifier.runner.seeds`, shards in :mod:`verifier.runner.store`, scale-out in
:mod:`verifier.runner.shard`.  Importing this package imports none of them (``specverify report``
reads :mod:`verifier.runner.inputs_key` before anything heavy).
"""
