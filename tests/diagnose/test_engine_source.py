"""Engine hypotheses (issue 26): an engine registers the family hypotheses its source predicts
(:data:`verifier.engines.reproductions.PREDICTED`), and the diagnosis of that engine's audit names the root cause in
the engine's terms -- only when exactly that hypothesis is named alone."""

import json
from types import SimpleNamespace

from verifier.diagnose.family import hypothesis
from verifier.diagnose.run_dir import _engine_name, _engine_source
from verifier.engines.reproductions import PREDICTED


def test_every_registered_hypothesis_is_in_the_family():
    for engine, laws in PREDICTED.items():
        for name in laws:
            assert hypothesis(name).declared == "biased", (engine, name)


def test_the_audited_engine_is_read_from_audit_json_and_only_a_sole_name_is_explained(tmp_path):
    store = SimpleNamespace(run_dir=tmp_path)
    assert _engine_source(_engine_name(store), ["greedy_draft@prefill"]) is None  # no audit.json: not an engine audit
    (tmp_path / "audit.json").write_text(json.dumps({"engine": {"name": "llama.cpp"}}))
    text = _engine_source(_engine_name(store), ["greedy_draft+residual_by_index@prefill"])
    assert "speculative.cpp" in text and "by array index" in text
    assert _engine_source(_engine_name(store), ["greedy_draft@prefill", "greedy_draft"]) is None  # a class: no single root cause
    assert _engine_source(_engine_name(store), ["full_p_fallback"]) is None  # not what llama.cpp's source predicts
    (tmp_path / "audit.json").write_text("{not json")
    assert _engine_source(_engine_name(store), ["greedy_draft@prefill"]) is None
    for odd in ('{"engine": "llama.cpp"}', '{"engine": {"name": ["x"]}}', "[1]"):  # never a crash
        (tmp_path / "audit.json").write_text(odd)
        assert _engine_name(store) is None
