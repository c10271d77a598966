"""Engine laws predicted beside the whole-row ranking equal the laws predicted in turn (issue 27).

:func:`verifier.diagnose.engine_law_sets.start_engine_laws` starts each sample set's ``module.engine_laws`` in a thread
before the ranking; :func:`~verifier.diagnose.engine_law_sets.add_engine_laws` ranks what it returns.  On a shipped-pair
run folder (reference decoder, T = 1, k = 3, 30 rows, seed 20261206) the vLLM module's laws (torch models only: no
engine needed) started beside must equal, array for array, the same call made in turn; sets whose laws the diagnosis
would not predict (T = 0 here: the module says why) are not started.
"""

import numpy as np

from verifier.diagnose.engine_law_sets import start_engine_laws

SUITE = """
schema_version = 1
name = "lawsbeside"
seed = 20261206
[exact]
enabled = false
[models.shipped]
target = "shipped:target"
draft = "shipped:draft"
[prompts.def]
text = "def "
[sampling.t1]
temperature = 1.0
[sampling.greedy]
temperature = 0.0
[defaults]
num_draft_tokens = [3]
max_new_tokens = 3
samples = 30
tests = ["gof"]
gof_positions = [1]
[[decoders]]
name = "reference"
decoder = "reference"
models = "shipped"
expect = "pass"
[stats]
alpha = 1e-3
target_mde = 0.9
"""


def test_laws_started_beside_equal_the_laws_predicted_in_turn(tmp_path):
    from verifier.diagnose.engine_laws import engine_module
    from verifier.pipeline import run_suite
    from verifier.runner.context import entry_prompt_ids
    from verifier.runner.models import load_pair
    from verifier.runner.plan import plan_sample_sets
    from verifier.runner.run import load_run_suite
    from verifier.runner.store import SampleStore
    from verifier.suite import load_suite

    path = tmp_path / "suite.toml"
    path.write_text(SUITE)
    out = tmp_path / "run"
    run_suite(load_suite(path), out, progress=False, log=lambda _m: None)
    suite, _ = load_run_suite(out)
    pairs = {"shipped": load_pair(suite.models["shipped"], suite.base_dir)}
    plans = plan_sample_sets(suite, entry_prompt_ids(suite, pairs), {"shipped": pairs["shipped"].vocab_size})
    started = start_engine_laws("vllm", plans, pairs, SampleStore(out))
    t1 = [p for p in plans if not p.sampling.greedy]
    assert len(t1) == 1 and set(started) == {t1[0].set_id}  # T = 0: not predicted (law_unsupported says why)
    plan, pair = t1[0], pairs["shipped"]
    alone = engine_module("vllm").engine_laws(list(plan.prompt_ids), plan.sampling, pair.target_model,
                                              pair.draft_model, options=dict(plan.decoder.options))
    beside = started[plan.set_id].result()
    assert set(beside) == set(alone) and len(alone) > 1
    for name, law in alone.items():
        assert np.array_equal(beside[name], law), name
