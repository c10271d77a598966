"""Issue 27 (fixed cost): an audit plans its n on the exact laws of its loaded pair, and the run then scores its
cells with the same pair and laws -- one model load and one enumeration per (prompt, sampling), not two (the run used
to load the models again and enumerate the laws again).  Real pipeline, shipped tabular target; the calls are counted
on the real functions.  The audit's verdict is checked too (reference decoder, seed 0, alpha 1e-3: PASS or
UNDERPOWERED, never BIAS)."""

from __future__ import annotations

from verifier.cli import main
from verifier.errors import EXIT_OK, EXIT_UNDERPOWERED


def test_one_load_and_one_enumeration_per_audit(tmp_path, monkeypatch):
    import verifier.runner.context as context
    import verifier.runner.expected as expected
    import verifier.runner.models as models

    loads, laws = [], []
    load_pair, position_laws = models.load_pair, expected.position_laws

    def counted_load(*a, **k):
        loads.append(a[0].name)
        return load_pair(*a, **k)

    def counted_laws(*a, **k):
        laws.append((tuple(a[1]), a[2]))
        return position_laws(*a, **k)

    monkeypatch.setattr(models, "load_pair", counted_load)
    monkeypatch.setattr(context, "load_pair", counted_load)
    monkeypatch.setattr(expected, "position_laws", counted_laws)
    code = main(["audit", "--decoder", "reference", "--target", "tabular:trigram3", "--num-draft-tokens", "2",
                 "--max-new-tokens", "3", "--num-samples", "400", "--no-progress", "--run-dir", str(tmp_path / "r")])
    assert code in (EXIT_OK, EXIT_UNDERPOWERED)
    assert loads == ["audit"], loads
    assert len(laws) == len(set(laws)) >= 1, laws
