"""A max_new_tokens longer than the model's context is refused up front (exit 2), not run for minutes."""

from verifier.cli import main


def test_max_new_tokens_beyond_max_position_embeddings_is_refused(tmp_path, capsys):
    code = main(["audit", "--decoder", "reference", "--target", "shipped:target", "--max-new-tokens", "100000",
                 "--num-samples", "10", "--no-progress", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "max_new_tokens=100000" in err and "max_position_embeddings=512" in err and "max_new_tokens <= 505" in err
    assert not list((tmp_path / "run").glob("**/*.npz"))  # nothing sampled

