"""`specverify audit` as one pipeline with the suite runner: planned n, the misses it used to have,
save-suite / resume, sequential stopping, blind-cell notes, the documented example plugins.

Every statistical check states its seed (0 unless said), the family-wise alpha (1e-3, the audit
default) and the effect it is planned to see (``--target-tv``, power 0.99 per TV cell).  Exact TVs of
the temperature-scaled decoders come from the target's exact laws at both temperatures
(``subtle_plugins.exact_tv``: float64 enumeration of the processed probs, TV by verifier.exact).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_BIAS, EXIT_DECODER, EXIT_OK, EXIT_UNDERPOWERED

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from subtle_plugins import exact_tv  # noqa: E402

PLUGINS = f"{HERE / 'subtle_plugins.py'}"
FAST = ["--target", "tabular:trigram3", "--num-draft-tokens", "2", "--max-new-tokens", "3", "--no-progress"]


def _audit(tmp_path, *args, name="run"):
    out = tmp_path / f"{name}.json"
    code = main(["audit", *args, "--run-dir", str(tmp_path / name), "--json", str(out)])
    return code, json.loads(out.read_text()) if out.exists() else None


def _trigram3():
    from verifier.runner.models import load_pair
    from verifier.suite.schema import ModelPair

    return load_pair(ModelPair("t", "tabular:trigram3", "tabular:trigram3"))


# --------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("target", ["tabular:unigram3", "tabular:bigram4_eos", "tabular:trigram3", "shipped:target"])
def test_default_prompt_is_valid_for_every_shipped_and_tabular_target(target):
    """The old default `--prompt-ids 0` was refused by trigram3 (context 2) and is the shipped EOS."""
    from verifier.audit.suite_builder import AuditSpec, plan_audit

    plan = plan_audit(AuditSpec(decoder="reference", target=target, num_samples=10, plan_n=False))
    (prompt,) = plan.prompts
    eos = 0 if target.startswith("shipped") else None
    assert len(prompt) >= 1 and eos not in prompt
    assert plan.suite.decoders[0].samples == 10


def test_prompt_text_is_tokenized_with_the_target_tokenizer(tmp_path):
    from verifier.audit.suite_builder import AuditSpec, plan_audit

    plan = plan_audit(AuditSpec(decoder="reference", target="shipped:target", prompts=(("text", "def "),),
                                num_samples=10, plan_n=False))
    assert plan.prompts == [(272, 70, 221)] and plan.raw["prompts"]["p0"] == {"text": "def "}
    assert main(["audit", "--decoder", "reference", "--target", "tabular:trigram3", "--prompt", "x", "--num-samples", "5",
                 "--run-dir", str(tmp_path / "r"), "--no-progress"]) == 2  # no tokenizer: a usage error naming ids


# --------------------------------------------------------------------------- test the tester


def test_temperature_scaled_decoders_exact_tvs():
    """trigram3, prompt (0, 1), T = 1: TV of the first 1 / 2 / 3 / 4 tokens at T x scale."""
    from verifier.sampling import SamplingConfig

    ref = _trigram3().reference
    tvs = {s: [round(exact_tv(ref, (0, 1), SamplingConfig(), s, j), 4) for j in (1, 2, 3, 4)] for s in (0.9, 1.05, 1.1)}
    assert tvs == {0.9: [0.0186, 0.0281, 0.0399, 0.046], 1.05: [0.008, 0.0125, 0.0176, 0.0202],
                   1.1: [0.0153, 0.0241, 0.0338, 0.0389]}


@pytest.mark.slow
@pytest.mark.parametrize("scale", [0.9, 1.05, 1.1])
def test_temperature_scaled_decoders_never_get_a_false_pass_at_defaults(tmp_path, scale):
    """Audit defaults (TV 0.05 planned, seed 0) on trigram3 with k = 2, 3 tokens.  A PASS claims "no
    bias >= 0.05 in the first-3-token law": it may only be printed when the exact TV is below that.
    The T x 1.1 decoder (exact 3-token TV 0.034) got PASS, exit 0, from the old audit in this very
    setting (n = 2000, cells gof@1, gof@2|greedy, pit); it must not (issue miss 1)."""
    from verifier.sampling import SamplingConfig

    code, res = _audit(tmp_path, "--decoder", f"{PLUGINS}:make_temperature_scaled", "--option", f"scale={scale}", *FAST)
    tv3 = exact_tv(_trigram3().reference, (0, 1), SamplingConfig(), scale, 3)
    assert res["verdict"] in ("PASS", "BIAS DETECTED", "UNDERPOWERED")
    if res["verdict"] == "PASS":
        assert tv3 < res["plan"]["target_tv"] and code == EXIT_OK
    if scale == 1.1:
        assert res["verdict"] != "PASS" and code in (EXIT_BIAS, EXIT_UNDERPOWERED)


@pytest.mark.full  # 46 s; the other audit pipeline detections stay quick
@pytest.mark.slow
def test_temperature_x1_1_is_detected_at_the_n_planned_for_tv_0_03(tmp_path):
    """--target-tv 0.03 plans n so every TV cell sees TV 0.03 at power 0.99; the decoder's first-3-token
    TV is 0.034 (exact), so it is detected (miss probability <= 0.01 at the joint cell alone)."""
    code, res = _audit(tmp_path, "--decoder", f"{PLUGINS}:make_temperature_scaled", "--option", "scale=1.1",
                       "--target", "tabular:trigram3", "--target-tv", "0.03", "--no-progress")
    assert res["plan"]["num_samples"] == res["plan"]["n_needed"] > 20_000
    assert code == EXIT_BIAS and res["verdict"] == "BIAS DETECTED"


@pytest.mark.slow
@pytest.mark.parametrize("penalty", ["1.6", "3"])
def test_stale_repetition_penalty_is_detected_at_defaults(tmp_path, penalty):
    """Penalty state updated once per round (issue miss 2), trigram3, audit defaults, seed 0.  At
    repetition_penalty 3 its 3-token TV is about 0.054 (200k-sample estimate, +-0.002), above the planned
    0.05 (power >= 0.99).  At 1.6 the old audit (gof@1, gof@2|greedy, pit, n = 2000) printed PASS; the
    planned n (7753) with the joint and later-position cells detects it at this seed (no power claim:
    its TV is below 0.05)."""
    code, res = _audit(tmp_path, "--decoder", f"{PLUGINS}:make_stale_penalty", "--target", "tabular:trigram3",
                       "--repetition-penalty", penalty, "--no-progress")
    assert code == EXIT_BIAS
    rejected = {c["test"] for c in res["cells"] if c["verdict"] == "BIAS"}
    assert "gof@1" not in rejected  # the first token is unaffected: only later positions see the stale state


def test_seed_ignoring_decoder_is_seen_through_chunked_calls(tmp_path, capsys):
    """Issue miss 4: one generate call per prompt hid it; two chunks with distinct seeds show it (exit 3)."""
    code, res = _audit(tmp_path, "--decoder", f"{PLUGINS}:make_seed_ignoring", *FAST, "--num-samples", "1000")
    assert code == EXIT_DECODER and res["verdict"] == "ERROR"
    assert "ignores the seed" in capsys.readouterr().out


def test_gof_cells_are_marginal_laws_not_greedy_prefixes():
    """Issue miss 3: `gof@t|greedy` could be exactly blind; the runner's gof@t tests the whole marginal law."""
    from verifier.audit.suite_builder import AuditSpec, plan_audit

    plan = plan_audit(AuditSpec(decoder="reference", target="tabular:trigram3", num_draft_tokens=2, num_samples=10))
    assert plan.gof_positions == [1, 2, 3] and plan.joint_tokens == 3
    assert not any("greedy" in k for k in plan.needed)


# --------------------------------------------------------------------------- planning, save-suite, resume


def test_underpowered_budget_names_the_n_needed(tmp_path, capsys):
    code, res = _audit(tmp_path, "--decoder", "reference", *FAST, "--num-samples", "500")
    out = capsys.readouterr().out
    need = res["plan"]["n_needed"]
    assert code == EXIT_UNDERPOWERED and res["verdict"] == "UNDERPOWERED" and need > 500
    assert f"n needed: {need}" in out and f"--num-samples {need}" in out
    assert "rerun `specverify audit` with --num-samples" in res["reason"] and "`samples`" not in res["reason"]


def test_planned_n_powers_every_tv_cell(tmp_path, capsys):
    """At the planned n the runner's own MDE of every TV cell is <= --target-tv (same law, level, power)."""
    code, res = _audit(tmp_path, "--decoder", "reference", *FAST, "--target-tv", "0.1")
    assert code == EXIT_OK and res["verdict"] == "PASS"
    tv_cells = [c for c in res["cells"] if c["effect_unit"] == "tv"]
    assert tv_cells and all(c["mde"] <= 0.1 for c in tv_cells) and all(c["n"] == res["plan"]["num_samples"] for c in tv_cells)
    assert "PASS: no bias >= TV 0.1 (total variation" in capsys.readouterr().out  # as the verdict line and report say


def test_save_suite_reruns_the_same_audit_with_specverify_run(tmp_path):
    suite = tmp_path / "audit.toml"
    code, res = _audit(tmp_path, "--decoder", "full_p_fallback", *FAST, "--num-samples", "1200", "--save-suite", str(suite))
    assert code == EXIT_BIAS and suite.is_file()
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "again"), "--no-progress"]) == EXIT_BIAS
    again = json.loads((tmp_path / "again" / "report.json").read_text())
    assert [c["statistic"] for c in again["cells"]] == [c["statistic"] for c in res["cells"]]


def test_resume_keeps_the_shards_and_gives_the_same_report(tmp_path):
    code, res = _audit(tmp_path, "--decoder", "reference", *FAST, "--num-samples", "1500", "--target-tv", "0.2")
    shards = sorted((tmp_path / "run" / "samples").glob("*/chunk-*.npz"))
    assert code == EXIT_OK and len(shards) == 3
    shards[-1].unlink()  # as if interrupted before the last chunk
    assert main(["audit", "--resume", str(tmp_path / "run"), "--no-progress"]) == EXIT_OK
    again = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [c["statistic"] for c in again["cells"]] == [c["statistic"] for c in res["cells"]]


def test_sequential_stops_early_on_a_biased_decoder(tmp_path):
    """full_p_fallback (first-token TV >= 0.07 on trigram3) stops after a few chunks; the fixed-n plan is
    powered for TV 0.05 at alpha/2, the e-processes run at alpha/2 (Bonferroni over the TV cells)."""
    code, res = _audit(tmp_path, "--decoder", "full_p_fallback", *FAST, "--sequential", "--chunk-size", "250")
    seq = res["sequential"]
    assert code == EXIT_BIAS and seq["crossed"] is not None
    assert seq["samples"] < seq["planned_samples"] / 3


# --------------------------------------------------------------------------- blind-cell notes


def test_blind_cell_notes_only_for_the_decoder_under_test(tmp_path, capsys):
    """A plugin audit gets at most one summary note per prompt, not a line per harness mutant."""
    plugin = str(ROOT / "examples" / "plugins" / "speculative_correct.py") + ":make"
    main(["audit", "--decoder", plugin, "--target", "tabular:unigram3", "--num-samples", "20", "--max-new-tokens", "1",
          "--run-dir", str(tmp_path / "a"), "--no-progress"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("blind cell", "note: position"))]
    assert len(lines) <= 1
    main(["audit", "--decoder", "full_p_fallback", "--target", "tabular:unigram3", "--num-samples", "20", "--max-new-tokens", "1",
          "--run-dir", str(tmp_path / "b"), "--no-progress", "--blind-rules", "full_p_fallback,greedy_acceptance"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("blind cell")]
    assert all(re.search(r"(full_p_fallback|greedy_acceptance)", ln) for ln in lines)


# --------------------------------------------------------------------------- the documented example plugins


def test_example_plugins_differ_in_one_code_line():
    def code(name):
        text = (ROOT / "examples" / "plugins" / name).read_text()
        body = text.split('"""', 2)[2]  # after the module docstring
        return [ln for ln in body.splitlines()]

    a, b = code("speculative_correct.py"), code("speculative_buggy.py")
    assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [("speculative_correct.py", EXIT_OK), ("speculative_buggy.py", EXIT_BIAS)])
def test_example_plugins_pass_and_fail(tmp_path, name, expected):
    """README's plugins on trigram3, k = 2, 3 tokens, TV 0.1 planned (seed 0): the buggy twin's
    full-p fallback moves the first token by TV >= 0.07 (exact stage), far above its MDE at this n."""
    code, res = _audit(tmp_path, "--decoder", str(ROOT / "examples" / "plugins" / name) + ":make", *FAST, "--target-tv", "0.1")
    assert code == expected, res["reason"]


def test_the_docstring_plugin_runs_and_passes(tmp_path, monkeypatch):
    """The speculative decoder printed in verifier.audit's docstring is runnable as written (bigram4_eos,
    k = 2, 3 tokens, TV 0.15 planned, seed 0).  The plugin is named by a path relative to the working folder: the
    chunk seeds hash the decoder spec, so an absolute tmp path drew other samples in every run (a correct decoder
    then fails at the family-wise alpha 1e-3 once in ~1,000 runs; it did in a session-17 full run)."""
    import textwrap

    import verifier.audit as audit

    block = audit.__doc__.split("is BIAS DETECTED)::\n", 1)[1].split("\n(The buggy twin", 1)[0]
    path = tmp_path / "doc_plugin.py"
    path.write_text(textwrap.dedent(block))
    monkeypatch.chdir(tmp_path)
    code, res = _audit(tmp_path, "--decoder", "doc_plugin.py:make", "--target", "tabular:bigram4_eos", "--num-draft-tokens", "2",
                       "--max-new-tokens", "3", "--target-tv", "0.15", "--no-progress")
    assert code == EXIT_OK, res["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("decoder, sampling, expected", [
    ("reference", ["--temperature", "0.7", "--top-k", "2"], EXIT_OK),
    ("draft_raw_q", ["--temperature", "0.7", "--top-k", "2"], EXIT_BIAS),  # visible only under processing
    ("bonus_wrong_position", [], EXIT_BIAS),  # position k + 1 = 3 after all drafts accepted
])
def test_audit_gives_the_ci_suite_verdicts(tmp_path, decoder, sampling, expected):
    """A subset of suites/ci.toml audited alone with its settings (trigram3, k = 2, 3 tokens) at TV 0.1
    planned (seed 0): the reference PASSes, the mutants are DETECTED, as in the ci suite.  The full set
    (every ci decoder, both configs, shipped pair, TV 0.05) is `specverify bench audit-zoo --parity`."""
    code, res = _audit(tmp_path, "--decoder", decoder, *FAST, *sampling, "--target-tv", "0.1")
    assert code == expected, res["reason"]
