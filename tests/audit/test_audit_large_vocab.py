"""The audit plan keeps the joint window J >= 2 at a vocabulary past the old dense limit (issue 17).

Before, ``plan_audit`` lowered J to 1 above V ~= 1413 (``(V + 1) ** 2 > 2e6`` dense categories), so
a real vocabulary lost its joint and surprisal cells' second token.  The runner's laws pool
data-blind instead (:class:`verifier.runner.expected.PositionLaws`), and the plan says so.
"""

from __future__ import annotations

from verifier.audit.suite_builder import AuditSpec, plan_audit
from verifier.bench.scale import build_pair

from verifier.sampling import SamplingConfig

VOCAB = 2_000  # (V + 1) ** 2 = 4.0M dense joint categories > 2M: the joint law is sparse / pooled
TOP_K = 50  # keeps the test's prefix tree small (50 ** 2 prefixes at depth 3); the old limit ignored it


def test_plan_at_a_large_vocabulary_keeps_J_and_says_how_it_pools(tmp_path):
    target, draft = build_pair(VOCAB, tmp_path)
    spec = AuditSpec(decoder="reference", target=str(target), draft=str(draft), prompts=(("ids", (1, 2, 3)),),
                     sampling=SamplingConfig(top_k=TOP_K), num_draft_tokens=2, max_new_tokens=3, num_samples=500)
    plan = plan_audit(spec, base_dir=tmp_path)
    assert plan.joint_tokens == 3 and plan.gof_positions == [1, 2, 3]  # before: J = 1 above V ~= 1413
    assert plan.raw["defaults"]["joint_tokens"] == 3 and "joint" in plan.raw["defaults"]["tests"]
    assert "joint@1..3" in plan.describe() and "surprisal@1..3" in plan.describe()
    pooled = [n for n in plan.notes if "pooled over" in n]
    assert len(pooled) == 1 and pooled[0].startswith("joint@1..3, surprisal@1..3: expected laws pooled over joint: top ")
    assert "outcomes by mass + 'other'" in pooled[0] and "(2550 extra target passes)" in pooled[0]
    assert plan.needed["p0/joint@1..3"] is not None  # the sparse joint law is planned like any TV cell
