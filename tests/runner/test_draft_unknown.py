"""Drafts the harness cannot score (issue 14): declared unknown, analyses that need q skipped, stated.

Regressions (each failed before the fix):
* a ``Gemma4AssistantForCausalLM`` as ``--draft`` crashed with ``AttributeError: ... no attribute 'vocab_size'``
  (a traceback; exit 3 through the job isolation) -- now exit 2 naming ``--draft unknown``;
* a draft with its own vocabulary was refused without a way out -- now ``--draft unknown`` audits it;
* a plugin that loads its own draft made the harness analyse ``shipped:draft``: blind-cell notes for that draft and
  a false "ACCEPTANCE ABOVE THE COUPLING BOUND" (its draft is the target, so it accepts every draft) -- now skipped.
"""

import json
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.runner.draft import DRAFT_ANALYSES, declared_draft_known, is_unknown

HERE = Path(__file__).parent
PLUGIN = str(HERE / "own_draft_plugin.py")


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory):
    from verifier.engines.hf_local import tiny_gemma4

    return tiny_gemma4(tmp_path_factory.mktemp("gemma4"))


@pytest.fixture(scope="module")
def retokenized(tmp_path_factory):
    from verifier.engines.hf_local import retokenized_draft

    return retokenized_draft(tmp_path_factory.mktemp("retok") / "draft")


def test_declarations():
    assert is_unknown("unknown") and is_unknown(" Unknown ") and not is_unknown("shipped:draft")
    from verifier.plugins import _resolve

    assert declared_draft_known(_resolve(f"{PLUGIN}:OwnDraft")) is False
    assert declared_draft_known(_resolve(f"{PLUGIN}:OwnDraftUndeclared")) is True
    assert set(DRAFT_ANALYSES) == {"blind_cells", "canonical_acceptance", "acceptance_conformance"}


def test_assistant_class_as_draft_is_usage_error_not_traceback(gemma4, tmp_path, capsys):
    code = main(["audit", "--decoder", "reference", "--target", str(gemma4 / "target"), "--draft", str(gemma4 / "assistant"),
                 "--prompt-ids", "2,5,7", "--num-samples", "20", "--no-progress", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no vocab_size" in err and "unknown" in err and "Traceback" not in err


def test_other_vocabulary_refused_with_the_way_out(retokenized, tmp_path, capsys):
    code = main(["audit", "--decoder", "reference", "--target", "shipped:target", "--draft", str(retokenized),
                 "--num-samples", "20", "--no-progress", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "vocab_size=400" in err and "--draft unknown" in err, err


def test_draft_unknown_audits_and_states_what_is_skipped(tmp_path, capsys):
    """``--draft unknown``: nothing loaded for the draft, blind-cell notes and acceptance vs canonical skipped (stated),
    conformance NOT TESTED with the reason; the bias verdict is computed as always (n = 200: UNDERPOWERED, exit 4)."""
    run = tmp_path / "r"
    code = main(["audit", "--decoder", f"{PLUGIN}:OwnDraft", "--target", "shipped:target", "--draft", "unknown",
                 "--num-draft-tokens", "2", "--num-samples", "200", "--acceptance", "canonical", "--blind-rules", "all",
                 "--no-progress", "--run-dir", str(run)])
    out = capsys.readouterr().out
    assert code == 4, out
    assert "blind-cell notes" in out and "skipped, the draft is unknown (--draft unknown)" in out
    assert "blind cell: prompt" not in out
    report = json.loads((run / "report.json").read_text())
    d = report["decoders"][0]
    audit = d["acceptance"][0]
    assert audit["canonical_mean_accepted"] is None and "skipped, the draft is unknown" in audit["note"]
    assert not audit["above_bound"]
    assert d["acceptance_conformance"]["verdict"] == "NOT TESTED"
    assert "draft is unknown" in d["acceptance_conformance"]["reason"]


def test_plugin_declaring_its_own_draft_is_not_analysed_with_the_suite_draft(tmp_path, capsys):
    """Before: blind notes for shipped:draft and 'ACCEPTANCE ABOVE THE COUPLING BOUND' (its draft is the target)."""
    run = tmp_path / "r"
    main(["audit", "--decoder", f"{PLUGIN}:OwnDraft", "--target", "shipped:target", "--num-draft-tokens", "2",
          "--num-samples", "300", "--blind-rules", "all", "--no-progress", "--run-dir", str(run)])
    out = capsys.readouterr().out
    assert "blind cell: prompt" not in out and "declares draft_known = False" in out, out
    audit = json.loads((run / "report.json").read_text())["decoders"][0]["acceptance"][0]
    assert not audit["above_bound"] and "ABOVE THE COUPLING BOUND" not in audit["note"]
    assert "declares draft_known = False" in audit["note"]


def test_undeclared_own_draft_is_what_the_declaration_prevents(tmp_path, capsys):
    """Control: the same decoder without the declaration gets the false coupling-bound flag (draft = target accepts
    every draft; shipped:draft's coupling bound sum min(p, q) is far below 1)."""
    run = tmp_path / "r"
    main(["audit", "--decoder", f"{PLUGIN}:OwnDraftUndeclared", "--target", "shipped:target", "--num-draft-tokens", "2",
          "--num-samples", "300", "--no-progress", "--run-dir", str(run)])
    capsys.readouterr()
    audit = json.loads((run / "report.json").read_text())["decoders"][0]["acceptance"][0]
    assert audit["above_bound"]
