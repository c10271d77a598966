"""A max_new_tokens longer than the model's context is refused up front (exit 2), not run for minutes."""

from verifier.cli import main


def test_max_new_tokens_beyond_max_position_embeddings_is_refused(tmp_path, capsys):
    code = main(["audit", "--decoder", "reference", "--target", "shipped:target", "--max-new-tokens", "100000",
                 "--num-samples", "10", "--no-progress", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "max_new_tokens=100000" in err and "max_position_embeddings=512" in err and "max_new_tokens <= 505" in err
    assert not list((tmp_path / "run").glob("**/*.npz"))  # nothing sampled



def test_plan_audit_refuses_before_laws_and_power(monkeypatch):
    """The refusal comes before the expected laws and the power calculation (these took 46 s under load)."""
    import pytest

    from verifier.audit import suite_builder
    from verifier.errors import ConfigError
    from verifier.sampling import SamplingConfig

    def boom(*a, **k):
        raise AssertionError("expected laws computed before the context-length refusal")

    monkeypatch.setattr(suite_builder, "_laws", boom)
    spec = suite_builder.AuditSpec(decoder="reference", target="shipped:target", draft=None, prompts=(("ids", (1, 2, 3)),),
                                   sampling=SamplingConfig(), num_draft_tokens=2, max_new_tokens=600)
    with pytest.raises(ConfigError, match="max_new_tokens <= 507"):
        suite_builder.plan_audit(spec)
