"""Worker handler for the ``openvino-genai`` adapter; runs inside the OpenVINO GenAI venv (stdlib + numpy + openvino).

One ``LLMPipeline.generate(ov.Tensor(input_ids), GenerationConfig(...))`` call per sample on
``LLMPipeline(TARGET_IR, "CPU", draft_model=draft_model(DRAFT_IR, "CPU"))``, with the sample's seed as
``rng_seed``.  Token ids come back as ``EncodedResults.tokens``; engine statistics from
``extended_perf_metrics`` (``SDPerModelsPerfMetrics.get_num_accepted_tokens()``: a per-call total) and
the main model's per-step raw metrics (``m_batch_sizes``: tokens emitted by each main-model step).

About 1 call in 200 raises ``RuntimeError: Check 'content_length <= ...' failed`` (sequence_group.cpp).
Retry policy: the failed call's output is discarded and the sample is drawn again by a *new* call whose
seed is derived from (seed, attempt) by hashing -- an independent draw, never the same seed.  That is
the law of the engine given a call that succeeds; every failure is counted and returned with the
tokens the call had streamed before it raised, so the harness can report whether failures depend on
the emitted tokens (selection bias would show as a different prefix law among failed calls).
"""

from __future__ import annotations

import hashlib

import numpy as np

MAX_ATTEMPTS = 8  # per sample; a sample failing this often is an engine error (exit 3)


def retry_seed(seed: int, attempt: int) -> int:
    """Seed of retry ``attempt`` (>= 1) of a sample: a hash of (seed, attempt) in 1 .. 2**31 - 1."""
    digest = hashlib.sha256(f"{int(seed)}:{int(attempt)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**31 - 1) + 1


class Handler:
    def __init__(self, target_dir: str, draft_dir: str, num_draft_tokens: int, eos_token_id=None,
                 vocab_size: int = 384, prefix_caching: bool = True, failure_log: str = "", precision: str = "engine") -> None:
        import openvino as ov
        import openvino_genai as ovg

        self.ov, self.ovg = ov, ovg
        kwargs = {}
        if not prefix_caching:  # the engine's default is on; the content_length failures come from its block hashing
            sc = ovg.SchedulerConfig()
            sc.enable_prefix_caching = False
            kwargs["scheduler_config"] = sc
        # precision "f32": both models at f32 with an f32 KV cache (the CPU plugin's defaults are bf16 inference on
        # CPUs with native bf16, e.g. AMX, and a u8 KV cache); "engine": the plugin's defaults
        props = {"INFERENCE_PRECISION_HINT": ov.Type.f32, "KV_CACHE_PRECISION": ov.Type.f32} if precision == "f32" else {}
        self.pipe = ovg.LLMPipeline(target_dir, "CPU", draft_model=ovg.draft_model(draft_dir, "CPU", **props), **kwargs, **props)
        core = ov.Core()
        default = core.get_property("CPU", "INFERENCE_PRECISION_HINT")  # what LLMPipeline compiles at without a hint
        self.plugin_precision = {"inference": str(default),
                                 "kv_cache": str(core.get_property("CPU", "KV_CACHE_PRECISION")), "requested": precision,
                                 # the precision the pipeline samples at ("f32", "bf16", ...): the engine laws of a
                                 # diagnosis are computed at it (verifier.engines.reproductions.openvino_genai)
                                 "resolved": "f32" if precision == "f32" else default.get_type_name()}
        self.k = int(num_draft_tokens)
        self.eos = None if eos_token_id is None else int(eos_token_id)
        self.vocab = int(vocab_size)
        self.failure_log = failure_log
        self.target_dir = target_dir
        self.precision = precision  # target_logits (the numeric floor) compiles at the same precision
        self._logits_request = None
        self.calls = 0

        class Collect(ovg.StreamerBase):
            """Collects the streamed token ids (kept when a call raises)."""

            def __init__(self):
                super().__init__()
                self.ids = []

            def write(self, token):
                self.ids.extend(token if isinstance(token, (list, tuple)) else [token])
                return ovg.StreamingStatus.RUNNING

            def end(self):
                pass

        self.Collect = Collect

    def _config(self, sampling: dict, max_new_tokens: int, seed: int, stop_token_ids=None):
        cfg = self.ovg.GenerationConfig()
        cfg.max_new_tokens = int(max_new_tokens)
        if stop_token_ids:  # the request's stop tokens (issue 29 kind 5): the engine stops after emitting one
            cfg.stop_token_ids = {int(t) for t in stop_token_ids}
        cfg.num_assistant_tokens = self.k
        t = sampling.get("temperature")
        t = 1.0 if t is None else float(t)
        if t == 0:
            cfg.do_sample = False
        else:
            cfg.do_sample = True
            cfg.temperature = t
            cfg.top_k = int(sampling["top_k"]) if sampling.get("top_k") is not None else 0
            cfg.top_p = float(sampling["top_p"]) if sampling.get("top_p") is not None else 1.0
            cfg.rng_seed = int(seed)
        if t != 0 and sampling.get("min_p"):
            cfg.min_p = float(sampling["min_p"])
        if sampling.get("repetition_penalty") is not None:
            cfg.repetition_penalty = float(sampling["repetition_penalty"])
        if self.eos is not None:
            cfg.eos_token_id = self.eos
        return cfg

    def _one(self, input_ids, sampling, max_new_tokens, seed, streamer, stop_token_ids=None):
        res = self.pipe.generate(input_ids, self._config(sampling, max_new_tokens, seed, stop_token_ids), streamer)
        toks = list(res.tokens[0])
        steps = None
        accepted = None
        ext = getattr(res, "extended_perf_metrics", None)
        if ext is not None and hasattr(ext, "get_num_accepted_tokens"):
            accepted = int(ext.get_num_accepted_tokens())
            try:
                steps = [int(b) for b in ext.main_model_metrics.raw_metrics.m_batch_sizes]
            except AttributeError:
                steps = None
        return toks, accepted, steps

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds, stop_token_ids=None, max_tokens=None):
        """One call per seed; rows ``max_new_tokens`` wide, -1 after the row's end.  With a stop rule
        (``stop_token_ids`` and / or ``max_tokens``; issue 29 kind 5) the engine gets ``GenerationConfig.stop_token_ids``
        and ``max_new_tokens = max_tokens`` and the row is kept exactly as returned -- never cut here -- so a token
        past a stop (accepted mid-block) or past ``max_tokens`` shows; without one, rows are cut after EOS."""
        ids = np.asarray(prompt_ids, dtype=np.int64)[None, :]
        input_ids = self.ov.Tensor(ids)
        n, T = len(seeds), int(max_new_tokens)
        stop_rule = bool(stop_token_ids) or max_tokens is not None
        limit = int(max_tokens) if max_tokens is not None else T
        tokens = np.full((n, T), -1, dtype=np.int64)
        accepted_total = 0
        drafts_verified = calls_with_drafts = calls_with_steps = 0
        step_sizes: list[int] = []
        failures = []
        rounds = 0
        for row, seed in enumerate(np.asarray(seeds).tolist()):
            self.calls += 1
            for attempt in range(MAX_ATTEMPTS):
                s = int(seed) if attempt == 0 else retry_seed(seed, attempt)
                streamer = self.Collect()
                try:
                    toks, acc, steps = self._one(input_ids, sampling, limit, s, streamer, stop_token_ids)
                    break
                except RuntimeError as exc:
                    if "content_length" not in str(exc) or attempt == MAX_ATTEMPTS - 1:
                        raise
                    failures.append({"row": row, "seed": s, "attempt": attempt, "streamed": [int(t) for t in streamer.ids[:T]],
                                     "message": str(exc).strip().splitlines()[0][:200]})
                    self._log(failures[-1], sampling)
            for j, t in enumerate(toks[:T]):
                tokens[row, j] = int(t)
                if not stop_rule and self.eos is not None and int(t) == self.eos:
                    break
            if acc is not None:
                accepted_total += acc
            if steps:
                step_sizes.extend(steps)
                calls_with_steps += 1
                rounds += len(steps) - 1  # main-model steps after the prompt step
                # a main step of size b > 1 verified b - 1 draft tokens; all 1: the pipeline sampled the target alone
                # (with prefix caching on, every call after its first content_length failure: FINDINGS.md section 1)
                verified = sum(b - 1 for b in steps[1:] if b > 1)
                drafts_verified += verified
                calls_with_drafts += verified > 0
        extra = {"calls": n, "retries": len(failures), "failures": failures[:200], "cpu_plugin_precision": self.plugin_precision,
                 "stats_source": "totals only: accepted = SDPerModelsPerfMetrics.get_num_accepted_tokens() summed over "
                                 "calls; rounds = main-model steps after the prompt step (raw_metrics.m_batch_sizes); "
                                 "the engine reports no per-round or first-round accepted counts"}
        reply = {"tokens": tokens, "accepted": int(accepted_total), "rounds": int(rounds), "extra": extra}
        if step_sizes:
            extra["main_step_sizes_hist"] = np.bincount(np.asarray(step_sizes, dtype=np.int64)).tolist()
            if calls_with_steps == n:  # every call reported its steps: the speculation guard's per-call figures
                extra["speculation"] = {"requests": n, "requests_sent": n, "calls_with_drafts": calls_with_drafts,
                                        "per_request_draft_tokens": drafts_verified,
                                        "per_request_accepted_tokens": int(accepted_total),
                                        "per_request_source": "the pipeline's main-model step sizes per call "
                                                              "(raw_metrics.m_batch_sizes: a step of size b verified "
                                                              "b - 1 draft tokens)"}
        return reply

    def _log(self, failure: dict, sampling: dict) -> None:
        if self.failure_log:
            import json

            with open(self.failure_log, "a") as fh:
                fh.write(json.dumps({**failure, "sampling": sampling, "num_draft_tokens": self.k}) + "\n")

    def target_logits(self, prompt_ids):
        """The target IR's logits after ``prompt_ids`` (float32 -> list, shape (vocab,)), for the numeric floor.

        ``LLMPipeline`` does not expose logits, so this runs the same converted IR (``openvino_model.xml``,
        stateful export) with OpenVINO's CPU plugin in one plain inference request (not through the pipeline's
        paged-attention transformation), at the pipeline's own inference precision: the plugin's default (bf16 on
        CPUs with AMX/AVX512-BF16) unless the adapter's ``precision=f32`` set f32 for both.  Measuring at f32 while
        the pipeline ran bf16 understated the floor (session 15: the min-p BIAS of the field-kinds audit came from
        the precision).  The pipeline's u8 KV cache is not reproduced (one prompt pass reads no cached key).
        """
        if self._logits_request is None:
            core = self.ov.Core()
            hints = {"INFERENCE_PRECISION_HINT": "f32"} if self.precision == "f32" else {}  # the pipeline's precision
            model = core.compile_model(f"{self.target_dir}/openvino_model.xml", "CPU", hints)
            self._logits_request = (model, model.create_infer_request())
        model, request = self._logits_request
        ids = np.asarray(prompt_ids, dtype=np.int64)[None, :]
        request.reset_state()
        out = request.infer({"input_ids": ids, "attention_mask": np.ones_like(ids),
                             "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None, :],
                             "beam_idx": np.zeros(1, dtype=np.int32)})
        return {"logits": np.asarray(out[model.output(0)][0, -1], dtype=np.float32)}

    def probe(self, prompt_ids, max_new_tokens, sampling, seed):
        """One raw call (debugging): tokens, streamed ids, and every perf-metrics field found."""
        ids = self.ov.Tensor(np.asarray(prompt_ids, dtype=np.int64)[None, :])
        streamer = self.Collect()
        res = self.pipe.generate(ids, self._config(sampling, int(max_new_tokens), int(seed)), streamer)
        ext = res.extended_perf_metrics
        out = {"tokens": [list(map(int, t)) for t in res.tokens], "streamed": list(map(int, streamer.ids)),
               "ext_type": type(ext).__name__, "ext_dir": [a for a in dir(ext) if not a.startswith("_")]}
        try:
            out["accepted"] = int(ext.get_num_accepted_tokens())
            rm = ext.main_model_metrics.raw_metrics
            out["main_raw_dir"] = [a for a in dir(rm) if not a.startswith("_")]
            out["main_batch_sizes"] = [int(b) for b in rm.m_batch_sizes]
            out["draft_batch_sizes"] = [int(b) for b in ext.draft_model_metrics.raw_metrics.m_batch_sizes]
        except Exception as exc:  # noqa: BLE001  probing
            out["metrics_error"] = repr(exc)
        return out
