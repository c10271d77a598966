"""verifier.cli._prestart: an ``audit --engine`` starts its worker before the harness's own start-up, with exactly the
arguments the runner's decoder is built with later (so that decoder adopts it; never two engines)."""

from types import SimpleNamespace

import pytest

from verifier.cli._prestart import checkpoint_info, prestart_engine


def test_checkpoint_info_is_what_the_loaded_model_gives():
    """vocab_size / eos_token_id read from the JSON files equal verifier.runner.models._info of the loaded model (the
    values the runner offers an engine factory): the shipped pair, and a folder whose generation config names a list."""
    from verifier.models.loading import load_model
    from verifier.runner.models import _info

    for role in ("target", "draft"):
        assert checkpoint_info(f"shipped:{role}") == _info(load_model(f"shipped:{role}"))


def test_checkpoint_info_reads_the_generation_config_first_and_refuses_odd_folders(tmp_path):
    (tmp_path / "config.json").write_text('{"vocab_size": 10, "eos_token_id": 3}')
    assert checkpoint_info(tmp_path) == (10, 3)
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [5, 6]}')
    assert checkpoint_info(tmp_path) == (10, 5)
    (tmp_path / "config.json").write_text('{"vocab_size": "ten"}')
    assert checkpoint_info(tmp_path) is None
    (tmp_path / "config.json").write_text("not json")
    assert checkpoint_info(tmp_path) is None
    assert checkpoint_info(tmp_path / "missing") is None and checkpoint_info("tabular:trigram3") is None


class _Engine:
    worker_decoder = True


@pytest.mark.parametrize("change", [{"url": "http://x"}, {"resume": "/tmp/run"}, {"engine_class": None},
                                    {"target": "tabular:trigram3"}, {"decoder": "no_colon"}])
def test_nothing_starts_where_the_runner_cannot_be_mirrored(change):
    """--url, --resume, no worker engine, a target that is no checkpoint folder, a decoder that is no factory: no
    worker is started here (the runner starts its own as before)."""
    import verifier.engines.bridge as bridge

    args = SimpleNamespace(engine_class=_Engine(), url=None, resume=None, target="shipped:target", num_draft_tokens=3,
                           decoder="verifier.engines.vllm_engine:decoder",
                           option=[("target_model", "shipped:target"), ("draft_model", "shipped:draft")])
    for key, value in change.items():
        setattr(args, key, value)
    assert prestart_engine(args) is False and not bridge._POOL


def test_a_factory_that_wants_a_loaded_model_is_not_prestarted():
    """A factory whose signature names ``draft_model`` that the options leave out would get the runner's loaded model:
    not mirrored, nothing started."""
    import verifier.engines.bridge as bridge

    args = SimpleNamespace(engine_class=_Engine(), url=None, resume=None, target="shipped:target", num_draft_tokens=3,
                           decoder="verifier.engines.vllm_engine:decoder", option=[("target_model", "shipped:target")])
    assert prestart_engine(args) is False and not bridge._POOL


def test_the_run_file_name_is_the_runners():
    from verifier.cli import _prestart
    from verifier.runner.run import RUN_FILE

    from verifier.models import shipped_checkpoint

    assert _prestart.RUN_FILE == RUN_FILE
    assert _prestart.checkpoint_folder("shipped:target") == shipped_checkpoint("target")
    assert _prestart.checkpoint_folder("shipped:nope") is None


@pytest.mark.parametrize("bad", [{"num_samples": 0}, {"max_new_tokens": 0}, {"chunk_size": -1},
                                 {"prompt_ids": [[999]]}, {"prompt_ids": [[-1]]}, {"run_dir": "HELD"}])
def test_no_engine_starts_for_an_audit_that_will_stop_with_a_usage_error(bad, tmp_path):
    """Breaker (session 26): --num-samples 0, --max-new-tokens 0, a prompt id outside the vocabulary or a run folder
    that already holds a run stop the audit with exit 2 after the pair loads; no engine may be started for them."""
    from verifier.cli._prestart import _worth_starting

    held = tmp_path / "held"
    held.mkdir()
    (held / "run.json").write_text("{}")
    args = SimpleNamespace(num_samples=10, max_new_tokens=None, chunk_size=None, prompt_ids=[[1, 2]], run_dir=None)
    assert _worth_starting(args, 384)
    for key, value in bad.items():
        setattr(args, key, str(held) if value == "HELD" else value)
    assert not _worth_starting(args, 384)


def test_checkpoint_info_refuses_an_eos_the_runner_may_read_otherwise(tmp_path):
    (tmp_path / "config.json").write_text('{"vocab_size": 10}')
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": true}')
    assert checkpoint_info(tmp_path) is None
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": 0.0}')
    assert checkpoint_info(tmp_path) is None


def test_the_sample_set_preview_is_the_plans():
    """verifier.cli._presample draws chunks ahead from sample_set_preview, computed without the models or the plan: its
    sample sets (keys, chunk sizes, chunk seeds) equal those of the suite plan_audit builds (the cells do not enter a
    key), and the shipped tokenizer.json encodes the default prompt as the reference pair's tokenizer does."""
    from verifier.audit.suite_builder import AuditSpec, plan_audit, sample_set_preview
    from verifier.cli._presample import _prompt_ids
    from verifier.runner.plan import plan_sample_sets
    from verifier.sampling import SamplingConfig

    for prompts, sampling in (((), SamplingConfig()), ((("ids", (272, 70)),), SamplingConfig(temperature=0.7, top_k=8))):
        spec = AuditSpec(decoder="reference", target="shipped:target", prompts=prompts, sampling=sampling,
                         num_draft_tokens=2, num_samples=700, target_tv=0.3, options={"a": 1})
        ids = _prompt_ids(spec)
        full = plan_audit(spec)
        assert ids == [tuple(p) for p in full.prompts]
        planned = plan_sample_sets(full.suite, {("audit", f"p{i}"): tuple(p) for i, p in enumerate(full.prompts)},
                                   {"audit": 384})
        preview = sample_set_preview(spec, ids, 384)
        assert [(p.key, p.set_id, p.chunk_size, p.num_chunks, [p.chunk_seed(i) for i in range(p.num_chunks)])
                for p in preview] == [(p.key, p.set_id, p.chunk_size, p.num_chunks,
                                       [p.chunk_seed(i) for i in range(p.num_chunks)]) for p in planned]


def test_no_call_is_made_ahead_under_a_call_timeout(monkeypatch):
    """--call-timeout judges each generate call by the runner's wait; a call made ahead is never waited for, so with a
    limit set nothing is drawn ahead (the breaker found the limit silently off, a timed-out engine passing)."""
    from verifier.audit.suite_builder import AuditSpec
    from verifier.cli import _prestart
    from verifier.cli._presample import start_presample
    from verifier.sampling import SamplingConfig

    class Recording:  # the prestarted decoder's two methods start_presample uses
        handed: list = []

        def request(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            return {"prompt_ids": list(prompt_ids), "rows": num_samples, "seed": seed}

        def presample(self, requests, *, guessed=False):
            self.handed.extend(requests)
            return True

    spec = AuditSpec(decoder="x:y", target="shipped:target", sampling=SamplingConfig(), num_draft_tokens=2,
                     num_samples=1000, chunk_size=250)
    monkeypatch.setattr(_prestart, "_STARTED", [Recording()])
    monkeypatch.delenv("SPECVERIFY_CALL_TIMEOUT", raising=False)
    monkeypatch.delenv("SPECVERIFY_PRESAMPLE", raising=False)
    assert start_presample(SimpleNamespace(call_timeout=5.0), spec) == 0 and not Recording.handed
    assert start_presample(SimpleNamespace(call_timeout=None), spec) == 4 and len(Recording.handed) == 4
    monkeypatch.setenv("SPECVERIFY_CALL_TIMEOUT", "5")
    assert start_presample(SimpleNamespace(call_timeout=None), spec) == 0


def test_the_calls_ahead_are_handed_over_before_the_heavy_imports(tmp_path):
    """A known-p audit reaches start_presample with torch, transformers, scipy and statsmodels not yet imported: the
    worker started first otherwise waits seconds for its calls (session 28: `verifier.pipeline` imported at the top of
    `_run_known_p` held them back 3-4 s).  Run in a fresh interpreter, stopped at that call."""
    import subprocess
    import sys

    probe = (
        "import sys, verifier.cli._presample as p\n"
        "def stop(args, spec):\n"
        "    print('HEAVY', sorted(m for m in ('torch', 'transformers', 'scipy', 'statsmodels') if m in sys.modules))\n"
        "    raise SystemExit(0)\n"
        "p.start_presample = stop\n"
        "from verifier.cli import main\n"
        f"main(['audit', '--decoder', 'reference', '--target', 'shipped:target', '--draft', 'shipped:draft',"
        f" '--prompt-ids', '272,70,221', '--num-samples', '100', '--run-dir', {str(tmp_path / 'run')!r}])\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
