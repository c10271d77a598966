"""``specverify serve``: the harness's own decoders behind a real HTTP completion server.

A small threaded HTTP server (standard library) that answers the two dialects a URL audit speaks
(:mod:`verifier.server.dialects`) with any registered decoder of the harness -- the reference
speculative decoder or a mutant of the bug zoo -- on a model pair.  Uses:

* try ``specverify audit --url`` end to end in a minute, without an engine install
  (``specverify serve --decoder reference`` in one terminal, the audit in another);
* a server whose defect is known (``--decoder full_p_fallback``), so a URL audit can be shown to
  catch it through HTTP, concurrency, retries and the journal;
* the test suite's real server for the URL audit's PASS and BIAS tests.

Endpoints: ``GET /health``, ``GET /v1/models``, ``GET /metrics`` (Prometheus counters in vLLM's and
llama.cpp's spellings), ``POST /v1/completions`` (token-id prompts, ``n``, ``seed``,
``return_token_ids``) and ``POST /completion`` (llama-server: ``return_tokens``, ``timings.draft_n``,
per-request ``speculative.n_max``; 0 samples plainly from the target).  Min-p, presence / frequency
penalties and (OpenAI dialect) ``stop_token_ids`` go to the decoder (``SamplingConfig``; ``generate(...,
stop_token_ids=, max_tokens=)`` with rows ``k + 1`` wider than ``max_tokens``, returned uncut, so a decoder that
overshoots its stop rule shows it, with ``finish_reason: "stop"`` and ``stop_reason`` = the row's first stop id as vLLM
writes them).  A knob the decoder cannot honour (a stop string, the other llama.cpp samplers) is refused with HTTP
400 naming it, never ignored.

Logprobs, honestly: ``logprobs: K`` (OpenAI) or ``n_probs: K`` (llama-server) returns, at every
emitted position, the target's law at that prefix in the dialect's convention -- vLLM's raw
log-softmax at temperature 1 (``token_logprobs``, ``top_logprobs`` keyed ``"token_id:N"``, the top K
plus the emitted token, a log prob of 0 floored at :data:`LOGPROB_FLOOR` as vLLM does), llama-server's
post-sampling probabilities with ``post_sampling_probs`` (``prob``, ``top_probs``: the processed law,
zero probs left out) and its raw ``logprob`` / ``top_logprobs`` without.

Defects on purpose (:data:`DEFECTS`, ``specverify serve --defect NAME``), each a bug seen in servers:
``shared-seed`` samples every request with one seed (the request's ``seed`` ignored, unseeded requests
too), so independent requests return the same completion; ``spec-logprobs`` reports the draft's law
instead of the target's for requests served with speculation on (speculation-off requests report the
target's), so the reported logprobs change with speculation; ``cold-logprobs`` reports every law at
:data:`COLD_SCALE` times the temperature (logits / (0.4 T)) while sampling at T -- the reported law is
not the sampled one, as when a server's logprob path runs other weights or numerics than its sampler
(the known-target floor, :mod:`verifier.server.floor`, must then refuse a PASS); ``paired-unseeded`` gives
the unseeded requests ``2i`` and ``2i + 1`` (in arrival order) one seed, so each completion has the target's
law and only pairs repeat -- the field's "unseeded requests share one random stream", which every
marginal cell misses and the collision cell sees (seeded requests are served correctly).
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import numpy as np

__all__ = ["DecoderServer", "serve_decoder", "NEUTRAL_KNOBS", "DEFECTS", "LOGPROB_FLOOR"]

DEFECTS = {
    "shared-seed": "every request is sampled with one seed (the request's seed ignored; unseeded requests too)",
    "spec-logprobs": "logprobs are the draft's law when the request is served with speculation on",
    "cold-logprobs": "logprobs are the target's at COLD_SCALE x the temperature (sampling unchanged): another numeric path",
    "paired-unseeded": "requests without a seed share one random stream per two arrivals (seeded requests are correct)",
}
COLD_SCALE = 0.4  # cold-logprobs: the reported law's temperature factor (trigram3 at the standard prompt: TV 0.225)
SHARED_SEED = 0  # the one seed of the shared-seed defect
LOGPROB_FLOOR = -9999.0  # vLLM's floor for a reported logprob (-inf is not JSON)

# knobs a request may carry only at their neutral value (the harness's decoders do not implement them)
NEUTRAL_KNOBS = {"typical_p": 1.0, "dry_multiplier": 0.0, "xtc_probability": 0.0, "mirostat": 0, "dynatemp_range": 0.0,
                 "top_n_sigma": -1.0}
IGNORED_FIELDS = {"model", "stream", "echo", "skip_special_tokens", "ignore_eos", "return_tokens_as_token_ids",
                  "return_token_ids", "cache_prompt", "return_tokens", "samplers", "n_probs", "post_sampling_probs",
                  "logprobs", "repeat_last_n"}


class _BadRequest(Exception):
    pass


class DecoderServer:
    """Serve ``make(num_draft_tokens)`` decoders over HTTP on ``host:port`` (port 0: a free one).

    Parameters
    ----------
    make_decoder : callable
        ``make_decoder(k)`` returns a :class:`~verifier.protocols.Decoder` for ``k`` draft tokens
        (``k = 0``: plain target sampling, for requests with speculation off).
    num_draft_tokens : int
        k used unless a llama-server request sets ``speculative.n_max``.
    vocab_size : int
    eos_token_id : int or None
    name : str
        The model id ``/v1/models`` lists.
    host : str, default "127.0.0.1"
    port : int, default 0
    scorer : _Scorer or None
        The target's (and draft's) law at every prefix, for logprobs; None: a request asking for
        logprobs is refused (HTTP 400).
    defects : tuple of str
        Names from :data:`DEFECTS` (module docstring).
    """

    def __init__(self, make_decoder: Callable[[int], Any], num_draft_tokens: int, vocab_size: int,
                 eos_token_id: int | None, name: str, host: str = "127.0.0.1", port: int = 0,
                 make_busy_decoder: Callable[[int], Any] | None = None, busy_above: int | None = None,
                 scorer: "_Scorer | None" = None, defects: tuple[str, ...] = ()) -> None:
        self.make_decoder, self.k, self.vocab_size, self.eos, self.name = make_decoder, num_draft_tokens, vocab_size, eos_token_id, name
        unknown = [d for d in defects if d not in DEFECTS]
        if unknown:
            raise ValueError(f"defect {unknown[0]!r} is unknown; allowed: {', '.join(DEFECTS)}")
        self.scorer, self.defects = scorer, frozenset(defects)
        self._decoders: dict[int, Any] = {}
        # a concurrency-dependent defect on purpose: with more than `busy_above` requests in flight, requests are
        # served by `make_busy_decoder(k)` (e.g. a mutant) -- corruption that appears only under load
        self.make_busy_decoder, self.busy_above = make_busy_decoder, busy_above
        self._busy: dict[int, Any] = {}
        self.in_flight = 0
        self._unseeded, self._pair_seed = -1, 0  # paired-unseeded: unseeded arrivals so far, the current pair's seed
        self._lock = threading.Lock()
        self._lock_flight = threading.Lock()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "requests": 0}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: the audit reports what matters
                pass

            def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path == "/health":
                    self._send(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.name, "object": "model"}]})
                elif self.path == "/metrics":
                    self._send(200, server.metrics_text(), "text/plain; version=0.0.4")
                else:
                    self._send(404, {"error": f"no route GET {self.path}"})

            def do_POST(self):  # noqa: N802
                with server._lock_flight:
                    server.in_flight += 1
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if self.path in ("/v1/completions", "/completions"):
                        self._send(200, server.openai_completion(body))
                    elif self.path == "/completion":
                        self._send(200, server.llama_completion(body))
                    else:
                        self._send(404, {"error": f"no route POST {self.path}"})
                except (_BadRequest, ValueError) as exc:
                    self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                finally:
                    with server._lock_flight:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ sampling
    def _decoder(self, k: int):
        if k not in self._decoders:
            self._decoders[k] = self.make_decoder(k)
        return self._decoders[k]

    def _sample(self, body: dict[str, Any], prompt_key: str, max_key: str, k: int, n: int):
        from verifier.sampling import SamplingConfig

        for key, neutral in NEUTRAL_KNOBS.items():
            if key in body and body[key] is not None and float(body[key]) != float(neutral):
                raise _BadRequest(f"{key}={body[key]!r} is not supported by this server (only {neutral!r})")
        if body.get("stop"):
            raise _BadRequest(f"stop={body['stop']!r} is not supported by this server")
        prompt = body.get(prompt_key)
        if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in prompt):
            raise _BadRequest(f"{prompt_key} must be a non-empty list of token ids in 0..{self.vocab_size - 1}")
        top_k = body.get("top_k")
        top_p = body.get("top_p")
        rep = body.get("repetition_penalty", body.get("repeat_penalty"))
        extra = {key: float(body[key]) for key in ("min_p", "presence_penalty", "frequency_penalty")
                 if body.get(key) not in (None, 0, 0.0)}
        try:
            sampling = SamplingConfig(temperature=float(body.get("temperature", 1.0)),
                                      top_k=int(top_k) if top_k not in (None, -1, 0) else None,
                                      top_p=float(top_p) if top_p not in (None, 1, 1.0) else None,
                                      repetition_penalty=float(rep) if rep not in (None, 1, 1.0) else None, **extra)
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None
        max_new = int(body.get(max_key) or 16)
        stops = body.get("stop_token_ids") or []
        if not isinstance(stops, list) or not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in stops):
            raise _BadRequest(f"stop_token_ids must be a list of token ids in 0..{self.vocab_size - 1}")
        rule = {"stop_token_ids": stops, "max_tokens": max_new} if stops else {}
        seed = int(body["seed"]) if body.get("seed") is not None else int(np.random.SeedSequence().entropy % (1 << 31))
        if "paired-unseeded" in self.defects and body.get("seed") is None:
            with self._lock:
                self._unseeded += 1
                if self._unseeded % 2 == 0:
                    self._pair_seed = seed
                seed = self._pair_seed
        if "shared-seed" in self.defects:
            seed = SHARED_SEED
        busy = self.busy_above is not None and k > 0 and self.in_flight > self.busy_above
        with self._lock:
            if busy:
                self.counters["busy_requests"] = self.counters.get("busy_requests", 0) + 1
                if k not in self._busy:
                    self._busy[k] = self.make_busy_decoder(k)
                decoder = self._busy[k]
            else:
                decoder = self._decoder(k)
            # with a stop rule: k + 1 more columns than max_tokens, so a row past the limit comes back as emitted
            rows = np.asarray(decoder.generate(prompt, n, max_new + (k + 1 if rule else 0), sampling, seed, **rule))
            stats = getattr(decoder, "last_stats", None)
            drafted = accepted = 0
            if k > 0 and stats is not None:
                drafted = int(stats.num_draft_tokens * len(stats.accepted_counts))
                accepted = int(np.sum(stats.accepted_counts))
                self.counters["drafts"] += int(len(stats.accepted_counts))
                self.counters["draft_tokens"] += drafted
                self.counters["accepted_tokens"] += accepted
            self.counters["requests"] += 1
        return [[int(t) for t in row if t >= 0] for row in rows], max_new, drafted, accepted, sampling

    def _probs(self, prompt: list[int], rows: list[list[int]], sampling, top: int, k: int, post_sampling: bool):
        """Per row, per emitted position: ``(prob of the emitted token, [(id, prob)] top `top` by prob)`` of the
        law the reply reports (the target's; the draft's under the spec-logprobs defect when ``k > 0``)."""
        if self.scorer is None:
            raise _BadRequest("logprobs are not available from this server")
        source = "draft" if "spec-logprobs" in self.defects and k > 0 else "target"
        scale = COLD_SCALE if "cold-logprobs" in self.defects else 1.0
        return self.scorer.rows(prompt, rows, sampling, top, processed=post_sampling, source=source, scale=scale)

    def openai_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        n = int(body.get("n") or 1)
        if not 1 <= n <= 1024:
            raise _BadRequest(f"n={n} must be in 1..1024")
        rows, _max_new, _d, _a, sampling = self._sample(body, "prompt", "max_tokens", self.k, n)
        stops = set(body.get("stop_token_ids") or [])
        choices = []
        for i, row in enumerate(rows):  # vLLM: finish_reason "stop" with stop_reason None at EOS, the stop id at a stop
            at = next((t for t in row if t in stops), None)
            ended = self.eos is not None and row and row[-1] == self.eos
            choices.append({"index": i, "text": "", "token_ids": row, "finish_reason": "stop" if ended or at is not None
                            else "length", "stop_reason": at})
        top = body.get("logprobs")
        if top:  # vLLM: raw log-softmax (T = 1), the top K plus the emitted token, keyed "token_id:N"
            probs = self._probs(body["prompt"], rows, sampling, int(top), self.k, post_sampling=False)
            for choice, row, per_position in zip(choices, rows, probs):
                choice["logprobs"] = {
                    "tokens": [f"token_id:{t}" for t in row], "text_offset": [0] * len(row),
                    "token_logprobs": [_log(p) for p, _tops in per_position],
                    "top_logprobs": [{**{f"token_id:{i}": _log(q) for i, q in tops}, f"token_id:{t}": _log(p)}
                                     for t, (p, tops) in zip(row, per_position)]}
        return {"id": "cmpl-specverify", "object": "text_completion", "model": self.name, "choices": choices}

    def llama_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        n_max = body.get("speculative.n_max")
        k = self.k if n_max is None else int(n_max)
        if k not in (0, self.k):
            raise _BadRequest(f"speculative.n_max={n_max!r}: this server has k={self.k} (or 0 to switch speculation off)")
        rows, _max_new, drafted, accepted, sampling = self._sample(body, "prompt", "n_predict", k, 1)
        row = rows[0]
        eos = self.eos is not None and row and row[-1] == self.eos
        tokens = row[:-1] if eos else row  # llama-server does not return the EOS token
        reply = {"content": "", "tokens": tokens, "stop_type": "eos" if eos else "limit",
                 "timings": {"draft_n": drafted, "draft_n_accepted": accepted}}
        top = body.get("n_probs")
        if top and tokens:  # one row per returned token; post_sampling_probs: the processed law as probabilities
            post = bool(body.get("post_sampling_probs"))
            per_position = self._probs(body["prompt"], [tokens], sampling, int(top), k, post_sampling=post)[0]
            if post:
                reply["completion_probabilities"] = [
                    {"id": t, "token": "", "bytes": [], "prob": p,
                     "top_probs": [{"id": i, "token": "", "bytes": [], "prob": q} for i, q in tops if q > 0]}
                    for t, (p, tops) in zip(tokens, per_position)]
            else:
                reply["completion_probabilities"] = [
                    {"id": t, "token": "", "bytes": [], "logprob": _log(p),
                     "top_logprobs": [{"id": i, "token": "", "bytes": [], "logprob": _log(q)} for i, q in tops if q > 0]}
                    for t, (p, tops) in zip(tokens, per_position)]
        return reply

    def metrics_text(self) -> str:
        c = self.counters
        lines = []
        for prefix, names in (("vllm:spec_decode_", ("num_drafts", "num_draft_tokens", "num_accepted_tokens")),
                              ("llamacpp:spec_decode_", ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))):
            for name, value in zip(names, (c["drafts"], c["draft_tokens"], c["accepted_tokens"])):
                lines += [f"# TYPE {prefix}{name} counter", f"{prefix}{name}_total {float(value)}"]
        lines += ["# TYPE specverify:requests counter", f"specverify:requests_total {float(c['requests'])}",
                  "# TYPE specverify:busy_requests counter", f"specverify:busy_requests_total {float(c.get('busy_requests', 0))}"]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "DecoderServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="specverify-serve", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "DecoderServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _log(p: float) -> float:
    return math.log(p) if p > 0 else LOGPROB_FLOOR


class _Scorer:
    """The target's (or the draft's) law at every emitted prefix, for the logprobs of a reply."""

    def __init__(self, target, draft=None) -> None:
        self.refs = {"target": target, "draft": draft}

    def rows(self, prompt: list[int], rows: list[list[int]], sampling, top: int, *, processed: bool, source: str,
             scale: float = 1.0):
        """For each row and emitted position j: ``(p(row[j]), [(id, p)] the `top` largest, prob descending, ties
        by id)`` under the law at ``prompt + row[:j]`` -- processed at ``sampling`` or raw (temperature 1); the
        temperature times ``scale`` (the cold-logprobs defect)."""
        import dataclasses

        from verifier.sampling import SamplingConfig

        ref = self.refs[source] or self.refs["target"]
        use = sampling if processed else SamplingConfig()
        if scale != 1.0 and use.temperature > 0:
            use = dataclasses.replace(use, temperature=use.temperature * scale)
        out: list[list] = [[] for _ in rows]
        for j in range(max((len(r) for r in rows), default=0)):  # rows reaching position j share its prefix length
            live = [i for i, r in enumerate(rows) if len(r) > j]
            probs = ref.next_probs(np.asarray([list(prompt) + rows[i][:j] for i in live], dtype=np.int64), use,
                                   len(prompt))
            for i, law in zip(live, probs):
                order = np.lexsort((np.arange(law.size), -law))[:top]
                out[i].append((float(law[rows[i][j]]), [(int(t), float(law[t])) for t in order]))
        return out


def serve_decoder(decoder: str, target: str, draft: str | None = None, *, num_draft_tokens: int = 3,
                  host: str = "127.0.0.1", port: int = 0, device: str = "cpu", dtype: str = "float32",
                  busy_decoder: str | None = None, busy_above: int | None = None,
                  defects: tuple[str, ...] = ()) -> DecoderServer:
    """A :class:`DecoderServer` for the registered ``decoder`` (``reference`` or a mutant) on ``target``/``draft``
    (model specs as in suites: ``shipped:target``, ``tabular:NAME``, a checkpoint folder); not started.
    ``busy_decoder`` (a registered name) serves the requests that arrive with more than ``busy_above`` in flight;
    ``num_draft_tokens`` 0 serves plain target sampling (a speculation-off reference server); ``defects``:
    names from :data:`DEFECTS`."""
    from verifier.decoders import make_decoder
    from verifier.decoders.speculative import AncestralDecoder
    from verifier.runner.models import load_pair
    from verifier.suite.schema import ModelPair

    if draft is None:
        draft = target.replace("target", "draft") if target.startswith("shipped:") else target
    pair = load_pair(ModelPair(name="serve", target=target, draft=draft, device=device, dtype=dtype))

    def maker(name: str):
        def make(k: int):
            if k == 0:
                return AncestralDecoder(pair.target, eos_token_id=pair.eos_token_id)
            return make_decoder(name, target=pair.target, draft=pair.draft, num_draft_tokens=k)
        return make

    first = maker(decoder)(num_draft_tokens)  # an unknown decoder name fails here, before the port is opened
    busy = None
    if busy_decoder is not None:
        maker(busy_decoder)(num_draft_tokens)
        busy = maker(busy_decoder)
    server = DecoderServer(maker(decoder), num_draft_tokens, pair.vocab_size, pair.eos_token_id, f"specverify-{decoder}",
                           host, port, make_busy_decoder=busy, busy_above=busy_above,
                           scorer=_Scorer(pair.reference, pair.draft_reference), defects=tuple(defects))
    server._decoders[num_draft_tokens] = first
    return server
