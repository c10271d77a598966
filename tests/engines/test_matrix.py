"""`python -m verifier.engines.matrix`: the README audit matrix from committed reports (kernel and known-p)."""

import json
import shutil
from pathlib import Path

from verifier.engines.matrix import END, START, collect, main, render

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "reports" / "audits" / "lmdeploy-sampler-0.18.0" / "draft-probs-given" / "report.json"


def test_kernel_report_row_and_bias_root_cause(tmp_path):
    ok = tmp_path / "eng-1" / "a"
    ok.mkdir(parents=True)
    shutil.copy(KERNEL, ok / "report.json")
    bad = tmp_path / "eng-1" / "b"
    bad.mkdir()
    r = json.loads(KERNEL.read_text())
    r["verdict"] = "BIAS DETECTED"
    (bad / "report.json").write_text(json.dumps(r))
    rows = collect(tmp_path)
    assert [row["verdict"] for row in rows] == ["PASS", "BIAS DETECTED"]
    assert rows[0]["n"] == "2,000,000" and rows[0]["engine"] == "lmdeploy-sampler" and rows[0]["root_cause"] == ""
    # a BIAS is never left without a cause column, and says what the harness said too (here: nothing)
    assert rows[1]["root_cause"] == "harness: no diagnosis in the report. human: not written up"
    (tmp_path / "eng-1" / "FINDINGS.md").write_text("# x\n\n**Root cause:** the residual is not renormalised.\n")
    assert collect(tmp_path)[1]["root_cause"].startswith("harness: no diagnosis in the report. human: the residual is not renormalised.")
    r["diagnosis"] = {"decoders": [{"status": "no known mechanism", "engine_law": {"sets": [{"note": "prefix caching on: mixed"}]}}]}
    (bad / "report.json").write_text(json.dumps(r))  # a diagnosis that named nothing says so, with the engine's reason
    assert collect(tmp_path)[1]["root_cause"].startswith(
        "harness: no known mechanism (engine laws not scored: prefix caching on); the report's Diagnosis says why. human:")
    r["diagnosis"] = {"decoders": [{"status": "consistent", "mechanism": [{"name": "full_p_fallback"}]}]}
    (bad / "report.json").write_text(json.dumps(r))  # the harness's own diagnosis comes first, marked as such
    assert collect(tmp_path)[1]["root_cause"].startswith("harness: `full_p_fallback`. human: the residual is not")
    table = render(collect(tmp_path))
    assert table.count("\n") == 3 and "[BIAS DETECTED](" in table


def test_readme_markers_are_replaced(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nold\n{END}\nafter\n")
    (tmp_path / "a").mkdir()
    shutil.copy(KERNEL, tmp_path / "a" / "report.json")
    assert main([str(tmp_path), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and "lmdeploy-sampler" in text and text.endswith("after\n")
    readme.write_text("no markers")
    assert main([str(tmp_path), "--readme", str(readme)]) == 2


def test_known_p_row_takes_acceptance_from_the_folder_file(tmp_path):
    """A known-p report whose engine reports no first-round acceptance (llama.cpp: its rounds start after token 1)
    shows the first line of the folder's acceptance.txt (written by the folder's script) instead of 'not reported'."""
    src = REPO / "reports" / "audits" / "llama.cpp-0.3.36" / "t07-topk8-k1" / "report.json"
    folder = tmp_path / "llama.cpp-0.3.36" / "t07"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "report.json")
    before = collect(tmp_path)[0]["acceptance"]
    assert "0.603" not in before
    (folder / "acceptance.txt").write_text("position 1: 0.603 [0.570, 0.636] vs canonical 0.521\nmore\n")
    assert collect(tmp_path)[0]["acceptance"] == "position 1: 0.603 [0.570, 0.636] vs canonical 0.521"


def test_known_p_row_shows_engine_options_from_the_report(tmp_path):
    """Report folders hold no run.json: the options that differ from the engine's defaults (control=both) still reach
    the config column, from the decoder identity in report.json (a control must never read as the engine as shipped)."""
    src = REPO / "reports" / "audits" / "llama.cpp-0.3.36" / "control-both" / "t07-topk8-k1" / "report.json"
    folder = tmp_path / "llama.cpp-0.3.36" / "control-both" / "t07"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "report.json")
    assert collect(tmp_path)[0]["config"].startswith("control=both; T=0.7, top-k 8, k=1")


def test_a_row_names_every_sampling_config_of_its_report(tmp_path):
    """One decoder sampled at two configs (the MLX-LM stop suite: T = 1 and T = 0.7 with top-k 8) is one row whose
    config names both; it used to show only the first sample set's, so the T = 0.7 half read as never run."""
    src = REPO / "reports" / "audits" / "mlx-lm-0.32.2" / "field-kinds" / "stop" / "report.json"
    folder = tmp_path / "mlx-lm-0.32.2" / "field-kinds" / "stop"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "report.json")
    assert collect(tmp_path)[0]["config"].endswith("T=1.0, k=3 and T=0.7, top-k 8, k=3")


def test_a_row_planned_for_another_target_tv_says_so(tmp_path):
    """The llama-cpp-python n = 300 audit was planned for TV 0.3 (suite.stats.target_mde, no audit.json): its PASS must
    not read as the TV 0.03 certificates beside it; a URL audit's audit.json target_tv (0.2) is read too, and a 0.03
    audit's verdict is left as it is."""
    src = REPO / "reports" / "audits" / "llama-cpp-python-0.3.36" / "t1-k3-n300" / "report.json"
    folder = tmp_path / "llama-cpp-python-0.3.36" / "t1-k3-n300"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "report.json")
    assert collect(tmp_path)[0]["verdict"] == "PASS at target TV 0.3"
    (folder / "audit.json").write_text('{"target_tv": 0.2}')
    assert collect(tmp_path)[0]["verdict"] == "PASS at target TV 0.2"
    (folder / "audit.json").write_text('{"target_tv": 0.03}')
    assert collect(tmp_path)[0]["verdict"] == "PASS"


SELF_REPORTED = REPO / "reports" / "audits" / "llama-server-0c1e570-self-reported" / "t1-topk20-k1" / "report.json"
MLX = REPO / "reports" / "audits" / "mlx-lm-server-0.32.2" / "t1-k1"


def _copy(src_dir, folder, names=("report.json", "audit.json")):
    folder.mkdir(parents=True)
    for name in names:
        if (src_dir / name).is_file():
            shutil.copy(src_dir / name, folder / name)


def test_self_reported_rows_name_the_server_its_version_and_entry_point(tmp_path):
    """Before the fix a self-reported URL audit's row had its folder's name as the engine and empty version and entry
    point columns (no audit.json).  Reports written before design.server take the server kind and the --api they
    recorded and the version in the published folder's name (written from `llama-server --version`); newer ones what
    the server said it was."""
    folder = tmp_path / "llama-server-0c1e570-self-reported" / "t1-topk20-k1"
    _copy(SELF_REPORTED.parent, folder)
    (row,) = collect(tmp_path)
    assert (row["engine"], row["version"], row["entry_point"]) == ("llama-server (URL)", "0c1e570", "--api llama-server")
    assert row["config"].startswith("URL self-reported, top-20 logprobs; T=1.0, top-k 20, k=1")
    r = json.loads((folder / "report.json").read_text())
    r["design"]["server"] = {"name": "llama-server (URL)", "version": "b1-0c1e570",
                             "entry_point": "POST /completion (llama-server)", "package": "", "options": {}}
    (folder / "report.json").write_text(json.dumps(r))
    assert (collect(tmp_path)[0]["version"], collect(tmp_path)[0]["entry_point"]) == ("b1-0c1e570",
                                                                                   "POST /completion (llama-server)")


def test_a_url_server_without_a_version_endpoint_gets_its_fingerprint_or_folder_version(tmp_path):
    """mlx_lm server has no version endpoint (audit.json engine version ""): the rows' version column was empty.  The
    replies' system_fingerprint, recorded with the samples, gives it; a report without one takes the published
    folder's name (mlx-lm-server-0.32.2)."""
    _copy(MLX, tmp_path / "mlx-lm-server-0.32.2" / "t1-k1")
    assert json.loads((MLX / "audit.json").read_text())["engine"]["version"] == ""
    assert collect(tmp_path)[0]["version"] == "0.32.2"
    other = tmp_path / "elsewhere"
    _copy(MLX, other / "server" / "t1-k1")
    r = json.loads((MLX / "report.json").read_text())
    r["decoders"][0]["speculation"]["server_fingerprints"] = ["0.32.2-0.32.4-Linux-6.18-x86_64-cpu"]
    (other / "server" / "t1-k1" / "report.json").write_text(json.dumps(r))
    assert collect(other)[0]["version"] == "0.32.2"


def test_field_kinds_table_reads_each_kind_from_the_committed_reports(tmp_path):
    """The field-kinds table (issue 29): the MLX-LM server's committed independence cells (as shipped at T = 0.7 its
    serial cell rejects -- the prompt-cache defect of its FINDINGS.md makes a request depend on the ones before; PASS
    with the control server), the self-reported llama-server's logprob consistency
    cell, and an engine with no kind cell shown as "not run" in every column; the README block is replaced."""
    from verifier.engines.kinds_matrix import END as KEND, START as KSTART, collect_kinds, render_kinds

    audits = REPO / "reports" / "audits"
    for rel in ("mlx-lm-server-0.32.2/t07-topk8-k1", "mlx-lm-server-0.32.2/control-prompt-cache-fix-t07-topk8-k1",
                "llama-server-0c1e570-self-reported/t1-topk20-k1", "llama.cpp-0.3.36/t07-topk8-k1"):
        (tmp_path / rel).mkdir(parents=True)
        for name in ("report.json", "audit.json"):  # audit.json: the engine record of a URL audit
            if (audits / rel / name).is_file():
                shutil.copy(audits / rel / name, tmp_path / rel / name)
    groups = {(g["engine"], g["variant"]): g for g in collect_kinds(collect(tmp_path))}
    shipped = groups[("mlx-lm server", "URL, 4 in flight")]["kinds"]
    assert shipped["shared randomness"]["verdict"] == "BIAS" and set(shipped) == {"shared randomness"}
    control = groups[("mlx-lm server", "URL, 4 in flight, control-prompt-cache-fix server")]["kinds"]
    assert control["shared randomness"]["verdict"] == "PASS"
    self_reported = groups[("llama-server (URL)", "URL self-reported, top-20 logprobs")]["kinds"]
    assert self_reported["reported logprobs"]["verdict"] == "PASS"
    assert groups[("llama.cpp", "every variant")]["kinds"] == {}
    table = render_kinds(list(groups.values()))
    assert table.count("\n") == 1 + len(groups) and "| `llama.cpp` | 0.3.36 | every variant | not expressible: one row per speculative step | not run |" in table
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\nold\n{END}\nmid\n{KSTART}\nold kinds\n{KEND}\nend\n")
    assert main([str(tmp_path), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and "| batch shape | shared randomness |" in text and text.endswith("end\n")


def test_a_powered_pass_of_a_batch_level_outranks_an_underpowered_run_of_it(tmp_path):
    """vLLM's control at batch level 4: 300 rows in control-batch-prompts (UNDERPOWERED: MDE 0.22 > TV 0.1) and 2,500
    rows in control-batch-n2500 (PASS, MDE <= 0.098).  Across the variant's reports the conclusive result decides the
    level (the table used to keep the worst, UNDERPOWERED); a level only the small run has stays UNDERPOWERED."""
    from verifier.engines.kinds_matrix import collect_kinds

    audits = REPO / "reports" / "audits" / "vllm-0.32.0" / "field-kinds"
    for name in ("control-batch-n2500", "control-batch-prompts"):
        (tmp_path / "vllm-0.32.0" / name).mkdir(parents=True)
        shutil.copy(audits / name / "report.json", tmp_path / "vllm-0.32.0" / name / "report.json")
    (group,) = [g for g in collect_kinds(collect(tmp_path)) if g["kinds"]]
    levels = group["kinds"]["batch shape"]["levels"]
    assert levels["4"] == "PASS" and levels["2"] == levels["16"] == "PASS"
    assert levels["4,mixed prompts"] == "UNDERPOWERED"


def test_one_engine_configuration_under_several_suite_labels_is_one_variant(tmp_path):
    """vLLM's control (patch_cpu_expand=True) ran as the unlabelled decoder of control-batch-prompts (300 rows: level
    "4,mixed prompts" UNDERPOWERED) and as the suite decoder "control-batch-prompts-n2500" (2,500 rows: PASS).  The
    variant is the engine configuration, not the suite's label: one row, whose level is the powered PASS (the table
    used to show both rows, one of them UNDERPOWERED beside the other's PASS)."""
    from verifier.engines.kinds_matrix import _variant, collect_kinds

    assert _variant("control-batch-mixed-n2500: patch_cpu_expand=True; T=1.0, k=3", "control-batch-mixed-n2500") == \
        "patch_cpu_expand=True"
    assert _variant("shipped-batch; T=1.0, k=3", "shipped-batch") == ""
    assert _variant("patch_cpu_expand=True; T=1.0, k=3", None) == "patch_cpu_expand=True"
    audits = REPO / "reports" / "audits" / "vllm-0.32.0" / "field-kinds"
    for name in ("control-batch-prompts", "control-batch-mixed-n2500"):  # the latter holds control-batch-prompts-n2500
        (tmp_path / "vllm-0.32.0" / name).mkdir(parents=True)
        shutil.copy(audits / name / "report.json", tmp_path / "vllm-0.32.0" / name / "report.json")
    groups = [g for g in collect_kinds(collect(tmp_path)) if g["kinds"]]
    assert [g["variant"] for g in groups] == ["patch_cpu_expand=True"]
    assert groups[0]["kinds"]["batch shape"]["levels"]["4,mixed prompts"] == "PASS"


def test_a_suite_of_several_decoders_gives_one_row_each(tmp_path):
    """A suite report with several decoders (the field-kinds suites) is one row per decoder, each with its own verdict,
    sampling (penalties and min-p shown) and cells -- the first decoder must not speak for the others."""
    src = REPO / "reports" / "audits" / "openvino-genai-2026.4.1.0" / "field-kinds" / "suite" / "report.json"
    folder = tmp_path / "openvino-genai-2026.4.1.0" / "field-kinds" / "suite"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "report.json")
    (folder.parent / "FINDINGS.md").write_text("Root cause: precision.\n")
    rows = collect(tmp_path)
    assert [r["config"].split(";")[0] for r in rows] == ["independence-token1", "penalties-token1",
                                                        "penalties-token1-control-f32: precision=f32"]
    assert [r["verdict"].split(" at ")[0] for r in rows] == ["PASS", "BIAS DETECTED", "PASS"]
    assert "repetition 1.5, min-p 0.1" in rows[1]["config"] and "human: precision." in rows[1]["root_cause"]
    # the report's own diagnosis names the threshold flip (verifier.diagnose.boundary) before the human text
    assert rows[1]["root_cause"].startswith("harness: `min-p threshold flip")
    assert rows[0]["root_cause"] == "" and rows[1]["mde"] == "0.0707"


def test_the_matrix_reads_the_boundary_status_the_diagnosis_writes():
    from verifier.diagnose.boundary import BOUNDARY_STATUS
    from verifier.engines import matrix

    assert matrix.BOUNDARY_STATUS == BOUNDARY_STATUS


def test_a_hand_edited_diagnosis_or_a_non_report_json_is_no_crash(tmp_path):
    """report.json files are read from committed folders; a diagnosis edited into odd shapes (a decoder entry that is
    a string, a boundary entry that is a list, filters that are not a list) or a report.json that is a JSON list
    crashed collect() with AttributeError / TypeError; their malformed parts now name nothing."""
    bad = tmp_path / "eng-1" / "b"
    bad.mkdir(parents=True)
    r = json.loads(KERNEL.read_text())
    r["verdict"] = "BIAS DETECTED"
    r["diagnosis"] = {"decoders": ["x", {"status": "filter boundary (numeric precision)", "boundary": {"s": [1], "t": {
        "filters": "min-p", "rounding": True}}}, {"status": "consistent", "mechanism": ["y", {"name": "full_p_fallback"}]}]}
    (bad / "report.json").write_text(json.dumps(r))
    (tmp_path / "eng-1" / "c").mkdir()
    (tmp_path / "eng-1" / "c" / "report.json").write_text("[1, 2]")
    (row,) = collect(tmp_path)
    assert row["root_cause"].startswith("harness: ` threshold flip (rounding) or full_p_fallback`."), row["root_cause"]


def test_a_url_audit_of_design_factors_is_one_batch_shape_row_with_its_levels(tmp_path):
    """The committed llama-server design-factor audit (1, 4, 16 requests in flight, 4 with a mixed batch, 4 unseeded):
    the audit matrix gives one row per decoder, its label naming the mixed batch / unseeded factor; the field-kinds
    table reads the report once as one variant whose batch-shape entry has a level per concurrency (the unseeded
    decoder is the independence kind's, not a level); the same report read per decoder (one level) would have no
    batch design."""
    from verifier.engines.kinds_matrix import collect_kinds, kind_results

    rel = "llama-server-0c1e570/field-kinds/batch"
    src = REPO / "reports" / "audits" / rel
    (tmp_path / rel).mkdir(parents=True)
    for name in ("report.json", "audit.json"):
        shutil.copy(src / name, tmp_path / rel / name)
    rows = collect(tmp_path)
    labels = sorted(r["config"].split(";")[0] for r in rows)
    assert labels == ["URL, 1 in flight", "URL, 16 in flight", "URL, 4 in flight", "URL, 4 in flight, mixed batch",
                      "URL, 4 in flight, unseeded"], labels
    groups = collect_kinds(rows)
    assert len(groups) == 1 and groups[0]["variant"].startswith("URL, design factors: ")
    batch = groups[0]["kinds"]["batch shape"]
    assert set(batch["levels"]) == {"1 in flight", "4 in flight", "16 in flight", "4 in flight,mixed batch"}
    assert batch["verdict"] == "PASS" and groups[0]["kinds"]["shared randomness"]["verdict"] == "PASS"
    report = json.loads((src / "report.json").read_text())
    assert "batch shape" not in kind_results(report, "c4")  # one decoder alone is one level: no batch design


def test_an_underpowered_row_says_the_n_it_needs_and_the_hours_its_run_rate_gives():
    """Issue 27: an UNDERPOWERED row keeps what the certificate still needs: the decoder's n_needed, and the hours at
    the rate its run measured (report.json run.cost) where that was recorded; nothing when neither is there."""
    from verifier.engines.matrix import _still_needed

    d = {"decoder": "decoder", "n_needed": 53474}
    cost = {"decoder": {"hours_still_needed": 0.25, "rate_samples_per_s": 55.0}}
    assert _still_needed({"run": {"cost": cost}}, d) == ", needs n 53,474 (about 0.25 h more at 55 rows/s)"
    assert _still_needed({}, d) == ", needs n 53,474"
    assert _still_needed({"run": {"cost": {"decoder": {"hours_still_needed": None}}}}, d) == ", needs n 53,474"
    assert _still_needed({}, {"decoder": "decoder", "n_needed": None}) == ""
    assert _still_needed({"run": "damaged"}, {"decoder": "decoder", "n_needed": True}) == ""


OPENVINO = REPO / "reports" / "audits" / "openvino-genai-2026.4.1.0"


def test_an_engines_per_call_figures_read_as_the_engines_not_a_servers(tmp_path):
    """OpenVINO GenAI records per call the draft tokens its main model verified: the acceptance column names the
    engine (not 'server counters'), says in how many calls drafts were verified, and a run where none was says '0 draft
    tokens verified ... SPECULATION NEVER RAN' (it read 'speculation counters not observable' before)."""
    _copy(OPENVINO / "t1-k1", tmp_path / "openvino-genai-2026.4.1.0" / "t1-k1", names=("report.json",))
    _copy(OPENVINO / "t1-topp09-k3", tmp_path / "openvino-genai-2026.4.1.0" / "t1-topp09-k3", names=("report.json",))
    rows = {r["config"].split("; ")[-1]: r["acceptance"] for r in collect(tmp_path)}
    assert rows["T=1.0, k=1"] == ("engine: 0 draft tokens verified; drafts verified in 0 of 1,500 calls -- "
                                  "SPECULATION NEVER RAN"), rows
    assert rows["T=1.0, top-p 0.9, k=3"].startswith("engine: 50.0% of 4 draft tokens accepted; drafts verified in 2 "
                                                   "of 1,500 calls"), rows


def test_malformed_speculation_figures_in_a_report_are_no_crash(tmp_path):
    """Breaker finding 7: a hand-edited report.json whose speculation figures are a list, a string rate or string call
    counts crashed the matrix (rc 1); now such figures are no figures."""
    folder = tmp_path / "openvino-genai-2026.4.1.0" / "t1-topp09-k3"
    _copy(OPENVINO / "t1-topp09-k3", folder, names=("report.json",))
    r = json.loads((folder / "report.json").read_text())
    for bad in ([1, 2], {"per_request": {"source": "x", "draft_tokens": 4, "accepted_tokens": None,
                                          "acceptance_rate": "high"}, "calls_with_drafts": "two", "requests": "many"}):
        r["decoders"][0]["speculation"] = bad
        (folder / "report.json").write_text(json.dumps(r))
        (row,) = collect(tmp_path)
        assert isinstance(row["acceptance"], str)
    assert row["acceptance"].startswith("engine: 4 draft tokens verified")


def test_acceptance_notes_are_cut_at_a_word_never_inside_one():
    """A matrix cell drops a note's parenthesised asides and ends a longer one in " ..." at a word boundary (the
    90-character cut had printed "so its acceptance is n"); what follows an aside is kept."""
    from verifier.engines.matrix import NOTE_WIDTH, _short_note

    note = ("ENGINE REPORTS NO STATISTICS: the decoder reports 5110 rounds' accepted counts but no per-row "
            "first_round_accepted, so its acceptance is not reported or audited (no zeros are assumed; the bias verdict "
            "never needs it). To report them, set `last_stats = ...` after each generate call")
    cut = _short_note(note)
    assert cut == ("ENGINE REPORTS NO STATISTICS: the decoder reports 5110 rounds' accepted counts but no per-row "
                   "first_round_accepted, so its acceptance is not reported or audited ...")
    assert len(cut) <= NOTE_WIDTH + 4
    words = " ".join(["accepted counts"] * 20)
    cut = _short_note(words)
    assert len(cut) <= NOTE_WIDTH and cut.endswith(" ...") and words.startswith(cut[:-4]) and words[len(cut) - 4] == " "
    assert _short_note("in any of its 400 rows (none ran), so its acceptance is not reported") == \
        "in any of its 400 rows, so its acceptance is not reported"
    long_word = "x" * 200
    assert _short_note(long_word) == "x" * (NOTE_WIDTH - 4) + " ..."
    assert _short_note(None) == "" and _short_note(0) == "0" and _short_note("(x) short") == "short"
