"""Known-p audit coverage and power (breakit items 1 and 5, re-checked on main after the audit merge).

* trigram3, k = 2, max_new_tokens = 6: the planner puts a gof cell at every emitted position (1..6;
  3^5 = 243 prefixes at position 6, far below the enumeration cap), so a bias at position 6 has a TV cell.
* A biased mutant at n = 20 per prompt (every TV cell's MDE > .8 >> target TV .05) is UNDERPOWERED
  (exit 4), never PASS.
"""

from verifier.audit.suite_builder import AuditSpec, plan_audit
from verifier.cli import main


def test_gof_cell_at_every_emitted_position_when_enumerable():
    plan = plan_audit(AuditSpec(decoder="reference", target="tabular:trigram3", num_draft_tokens=2, max_new_tokens=6,
                                num_samples=10, prompts=(("ids", (0, 1)),)))
    assert plan.gof_positions == [1, 2, 3, 4, 5, 6]


def test_biased_decoder_at_tiny_n_is_underpowered(tmp_path):
    argv = ["audit", "--decoder", "full_p_fallback", "--target", "tabular:trigram3", "--draft", "tabular:trigram3",
            "--prompt-ids", "0,1", "--num-samples", "20", "--max-new-tokens", "3", "--num-draft-tokens", "2",
            "--no-progress", "--report-dir", str(tmp_path)]
    assert main(argv) == 4
