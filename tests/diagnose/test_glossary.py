"""Issue 28: one plain sentence per mechanism, in one module, with a pointer to its exact law.

docs/mechanisms.md is generated from verifier.diagnose.glossary (``python -m verifier.diagnose.glossary >
docs/mechanisms.md``); this test fails when the two differ.
"""

from pathlib import Path

from verifier.diagnose.glossary import GLOSSARY, explain, glossary_markdown, mechanism_line
from verifier.diagnose.mechanisms import MECHANISMS
from verifier.exact.rules import RULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "mechanisms.md"


def test_every_mechanism_has_one_plain_sentence():
    assert set(GLOSSARY) == set(MECHANISMS)
    for name, text in GLOSSARY.items():
        assert text.endswith(".") and name not in text, name  # a sentence about the code, not its id


def test_rules_point_at_specverify_exact_and_decoder_bugs_at_their_zoo_decoder():
    for name in MECHANISMS:
        line = explain(name)
        if name in RULES:
            assert line.endswith(f"(exact law and counterexample: specverify exact --rule {name})")
        else:
            assert f'decoder = "{name}"' in line


def test_docs_mechanisms_md_is_generated_from_the_glossary():
    assert DOC.read_text(encoding="utf-8") == glossary_markdown()


def test_mechanism_line_names_tied_mechanisms_and_falls_back_to_the_sentence():
    tied = {"status": "consistent", "decision": {"best": ["draft_raw_q", "canonical"]}}
    assert mechanism_line(tied) == f"{explain('draft_raw_q')} or {explain('canonical')}"
    none = {"status": "no known mechanism", "sentence": "matches no known mechanism (...)"}
    assert mechanism_line(none) == "matches no known mechanism (...)"


def test_mechanism_line_says_when_the_engine_laws_were_not_scored():
    """A family name on an engine whose own laws were not scored (e.g. a bf16 OpenVINO folder on a CPU without bf16)
    carries that caveat on the console line, as the report's Diagnosis section does; a scored engine law adds none."""
    base = {"status": "consistent", "decision": {"best": ["canonical"]}}
    why = "the pipeline sampled at bf16 (recorded in the shards) and this CPU computes the engine's IRs at f32 only"
    unscored = {**base, "engine_law": {"engine": "openvino-genai", "decision": None,
                                       "sets": [{"set": "decoder | p0", "note": why}]}}
    line = mechanism_line(unscored)
    assert line.startswith(explain("canonical"))
    assert line.endswith(f" [the laws openvino-genai's source predicts were not scored: {why}]")
    scored = {**base, "engine_law": {"engine": "openvino-genai", "decision": {"status": "none preferred"},
                                     "sets": [{"set": "decoder | p0"}]}}
    assert mechanism_line(scored) == explain("canonical")
    assert mechanism_line(base) == explain("canonical")
