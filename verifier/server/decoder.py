"""A running completion server as a :class:`~verifier.protocols.Decoder` (``specverify audit --url``).

:class:`ServerDecoder` turns each ``generate`` call of the suite runner into HTTP requests: row
``i`` of a call with chunk seed ``s`` is request ``i // n`` (``n`` completions per request) with
the request seed ``hash(s, prompt, sampling, i // n)`` -- distinct, reproducible seeds, so the same
run asks the same questions.  Every reply is written to the run folder's response journal
(:mod:`verifier.server.journal`) before the next is awaited; on ``--resume`` a request already in
the journal is not sent again.  The server's speculation counters (:mod:`verifier.server.metrics`)
are read around each call and recorded with the chunk (``DecoderStats.extra["speculation"]``): a
run in which the server verified no draft cannot PASS (:mod:`verifier.runner.speculation`).

The harness never sees the server's processed probs, so every sampler knob is sent explicitly
(:mod:`verifier.server.dialects`) and the audited law is the one the harness computes from
``--target`` at the same settings (known-target design), or speculation off (two-sample design).
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verifier.errors import DecoderOutputError, invalid_argument
from verifier.protocols import PADDING_TOKEN_ID, DecoderStats
from verifier.server.client import ServerSettings, ServerUsageError, get_text, post_all
from verifier.server.dialects import Completion, check_logprobs, get_dialect, request_limit
from verifier.server.journal import JOURNAL_NAME, Journal, request_key
from verifier.server.metrics import SpecCounters, counter_delta, read_counters

__all__ = ["ServerDecoder", "decoder", "request_seed"]

BACKGROUND_EXTRA = 7  # extra prompt tokens of the mixed batch's background requests (another prompt length)
BACKGROUND_TEMPERATURES = (0.0, 0.5)  # greedy rows and rows at another temperature beside the audited ones
SEED_BITS = 31  # request seeds fit a signed 32-bit int (llama.cpp takes uint32, some servers int32)


def request_seed(chunk_seed: int, prompt_ids: Sequence[int], sampling_label: str, request_index: int) -> int:
    """The seed of one request: sha256 of the runner's chunk seed, the prompt, the sampling label and
    the request's index, reduced to 31 bits (distinct requests get independent-looking seeds)."""
    text = f"{int(chunk_seed)}|{','.join(map(str, prompt_ids))}|{sampling_label}|{int(request_index)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % (1 << SEED_BITS)


class ServerDecoder:
    """Samples from a completion server over HTTP (one instance per ``num_draft_tokens``).

    Parameters
    ----------
    base_url : str
        The server, ``http://HOST:PORT`` (``--url``).
    api : str, default "openai-completions"
        The dialect (:data:`verifier.server.dialects.DIALECTS`; ``--api``).
    vocab_size, eos_token_id : int
        Of the target the server claims to serve (ids outside ``0..vocab_size - 1`` are invalid output).
    num_draft_tokens : int
        k the server was started with (recorded; sent per request where the dialect has a knob).
    model : str or None
        The ``model`` field of requests (``--model``; servers serving one model ignore it).
    num_concurrent, max_retries, request_timeout_s, api_key_env
        See :class:`verifier.server.client.ServerSettings`.
    n_per_request : int, default 1
        Completions asked per request (``n``; 1 where the dialect has no ``n``).
    speculative : bool or None, default None
        Per-request speculation switch (llama-server: ``speculative.n_max`` = k or 0); None sends none.
    logprobs : int or None, default None
        Ask for the top-``logprobs`` logprobs of each emitted token (journaled for the logprob checks).
    name : str or None
        Report name; default ``"<api>@<base_url>"``.
    background : dict or None, default None
        Mixed-batch factor: ``{"concurrent": C}`` keeps C other requests in flight while the audited ones
        run -- alternately greedy and T = 0.5, on the prompt with :data:`BACKGROUND_EXTRA` more tokens -- so
        they share the server's batches; their replies are discarded (counted in the chunk's figures).
    require_speculation : bool, default True
        A PASS needs the server's own figures to show drafts (:mod:`verifier.runner.speculation`); False
        (``--speculation-unverified``) accepts a server that exposes none, and the report says so.
    tokenizer : str or None
        The target's tokenizer (a checkpoint folder or ``shipped:NAME``), for dialects that take text prompts
        (``mlx-lm``; required there) and for stop rules sent as stop strings (``llama-server``,
        :mod:`verifier.server.stop_rule`).
    seeded : bool, default True
        Send each request's hashed seed; False (``--unseeded``) sends no seed field, so the server's own
        randomness decides -- the collision cell then sees requests that share one random stream.  An
        unseeded request's journal key holds the chunk seed and request index (identical bodies stay
        distinct requests), and the seed contract is not probed.
    draft_declared : bool, default False
        The user named the server's draft model (``--draft MODEL``): the harness may score it (diagnosis,
        canonical acceptance).  False: ``draft_known = False`` (:mod:`verifier.runner.draft`).

    Raises
    ------
    InvalidArgumentError
        A bad option (exit 2).
    ServerUsageError
        The server cannot be reached or does not answer as the dialect expects before any sample (exit 2).
    """

    def __init__(self, base_url: str, *, vocab_size: int, eos_token_id: int | None = None, num_draft_tokens: int = 1,
                 api: str = "openai-completions", model: str | None = None, num_concurrent: int = 4,
                 max_retries: int = 5, request_timeout_s: float = 300.0, api_key_env: str | None = None,
                 n_per_request: int = 1, speculative: bool | None = None, logprobs: int | None = None,
                 name: str | None = None, draft_declared: bool = False, background: dict | None = None,
                 require_speculation: bool = True, seeded: bool = True, tokenizer: str | None = None,
                 probe: bool = True) -> None:
        self.dialect = get_dialect(api)
        if self.dialect.needs_text:  # text prompts (mlx-lm): written by the target's own tokenizer
            if not tokenizer:
                raise invalid_argument("--api", api, "with --target (its tokenizer writes the text prompt this server takes)")
            from verifier.models.loading import load_tokenizer

            self.dialect = self.dialect.with_text(load_tokenizer(tokenizer))
        self.server = ServerSettings(base_url, num_concurrent=num_concurrent, max_retries=max_retries,
                                     timeout_s=request_timeout_s, api_key_env=api_key_env)
        if isinstance(n_per_request, bool) or not isinstance(n_per_request, int) or not 1 <= n_per_request <= self.dialect.max_n:
            raise invalid_argument("--n-per-request", n_per_request, f"an integer in 1..{self.dialect.max_n} for --api {api}")
        check_logprobs(logprobs)
        if speculative is not None and not self.dialect.has_switch:
            raise invalid_argument("--speculation", "on" if speculative else "off", "a per-request switch only with "
                                   "--api llama-server or mlx-lm; for an OpenAI server give the speculation-off server as "
                                   "--reference-url")
        if background is not None and not (isinstance(background, dict) and set(background) <= {"concurrent"}
                                           and isinstance(background.get("concurrent", 2), int)
                                           and background.get("concurrent", 2) >= 1):
            raise invalid_argument("background", background, '{"concurrent": C} with an integer C >= 1, or None')
        self.background = background
        self.require_speculation = bool(require_speculation)
        if not isinstance(seeded, bool):
            raise invalid_argument("seeded", seeded, "True (hashed request seeds) or False (no seed field)")
        self.seeded = seeded
        self.vocab_size, self.eos_token_id, self.num_draft_tokens = int(vocab_size), eos_token_id, int(num_draft_tokens)
        self.model, self.n, self.speculative, self.logprobs = model, n_per_request, speculative, logprobs
        self.tokenizer = tokenizer
        # top rows in sample requests only where a reply carries them beside the emitted ids (not mlx-lm)
        self._sample_logprobs = logprobs if self.dialect.ids_with_top_logprobs else None
        self.name = name or f"{api}@{base_url}"
        # verifier.runner.draft: the server drafts with its own model; the harness scores it only when the user
        # declared which one (--draft MODEL), e.g. to diagnose a bias
        self.draft_known = bool(draft_declared)
        self.journal = Journal(None)
        self.last_stats: DecoderStats | None = None
        self.seed_honoured: bool | None = None  # set by the first call's seed contract probe
        self.server_fingerprint: str | None = None  # the first reply's system_fingerprint, where the server sends one
        self._lock = threading.Lock()
        self.settings = {"api": api, "model": model, "n_per_request": n_per_request, "speculative": speculative,
                         "logprobs": logprobs, **self.server.public()}
        if probe:
            self._probe()

    # ------------------------------------------------------------------ set-up
    def _probe(self) -> None:
        """One GET before any sample: an unreachable URL or a server of another kind is a usage error."""
        problems = []
        for path in self.dialect.health_paths:
            status, text = get_text(self.server, path)
            if status == 200:
                return
            problems.append(f"GET {self.server.url(path)}: " + (text if status == 0 else f"HTTP {status}: {text[:200]!r}"))
        raise ServerUsageError(f"--url={self.server.base_url!r} does not answer as a {self.dialect.name} server ("
                               + "; ".join(problems) + "); allowed: a running server's base URL (is it up? the right port "
                               "and --api?)")

    def bind_run_dir(self, run_dir: str | Path) -> None:
        """Persist replies in ``run_dir``'s response journal (and reuse the ones already there)."""
        self.journal.close()
        self.journal = Journal(Path(run_dir) / JOURNAL_NAME, server=self.server.base_url)
        for note in self.journal.notes:
            print(f"note: {note}")

    # ------------------------------------------------------------------ sampling
    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling, seed: int, *,
                 stop_token_ids: Sequence[int] = (), max_tokens: int | None = None) -> np.ndarray:
        """``num_samples`` emitted-token rows from the server; shape ``(num_samples, max_new_tokens)``, int64,
        padded with :data:`~verifier.protocols.PADDING_TOKEN_ID` after EOS.

        ``stop_token_ids`` / ``max_tokens``: the suite's stop rule (issue 29 kind 5), sent with every request
        (:func:`verifier.server.stop_rule.build_stop_rule`; ``max_tokens`` is the request's limit, the rows stay
        ``max_new_tokens`` wide).  Rows come back as the server emitted them, uncut: a token after a stop token, or
        past ``max_tokens``, stays in the row for the ``stop-rule`` cell (:mod:`verifier.runner.stop`).
        SamplingRefusedError (exit 2) for a rule the dialect cannot express."""
        from verifier.server.stop_rule import build_stop_rule

        stop = build_stop_rule(self.dialect, stop_token_ids, max_tokens, tokenizer=self.tokenizer,
                               eos_token_id=self.eos_token_id)
        prompt = [int(t) for t in prompt_ids]
        label = sampling.label()
        requests = []  # (key, body, n, what)
        switch = None if self.speculative is None else self.num_draft_tokens if self.speculative else 0
        for r in range(-(-num_samples // self.n)):
            n = min(self.n, num_samples - r * self.n)
            rseed = request_seed(seed, prompt, label, r) if self.seeded else None
            body = self.dialect.request(prompt, sampling, max_new_tokens, rseed, n=n, model=self.model,
                                        logprobs=self._sample_logprobs,
                                        draft_tokens=switch, stop=stop)
            parts = {"api": self.dialect.name, "model": self.model, "body": body,  # + the design factors
                     "num_concurrent": self.server.num_concurrent, "background": self.background}
            if not self.seeded:  # identical bodies: the chunk seed and index keep the requests apart in the journal
                parts["unseeded_request"] = [int(seed), r]
            key = request_key(parts)
            requests.append((key, body, n, f"request {r} of chunk seed {seed} (seed {rseed}, {label}, prompt "
                                           f"{prompt[:6]}{'...' if len(prompt) > 6 else ''})"))
        missing = [(i, req) for i, req in enumerate(requests) if self.journal.get(req[0]) is None]
        before = read_counters(self.server, self.dialect) if missing else None

        def on_reply(j: int, reply: Any, seconds: float) -> None:
            key, body, n, what = missing[j][1]
            completions = self.dialect.parse(reply, n=n, max_new_tokens=max_new_tokens,
                                             eos_token_id=self.eos_token_id, what=what,
                                             logprobs=self._sample_logprobs is not None, stop=stop)
            self._check_ids(completions, what)
            fingerprint = reply.get("system_fingerprint") if isinstance(reply, dict) else None
            with self._lock:
                if fingerprint and self.server_fingerprint is None:  # what the server says it is (mlx_lm server:
                    self.server_fingerprint = str(fingerprint)[:200]  # its version; it has no version endpoint)
                self.journal.append(key, body, completions, seconds)

        load = _Background(self, prompt, max_new_tokens, seed) if self.background and missing else None
        try:
            post_all(self.server, self.dialect.path, [(req[3], req[1]) for _, req in missing], on_reply)
        finally:
            self.journal.sync()
            background_sent, background_failed = load.stop() if load is not None else (0, 0)
        after = read_counters(self.server, self.dialect) if missing else None
        if missing and self.seeded and self.seed_honoured is None and sampling.temperature > 0:
            self.seed_honoured = self._seed_contract(missing[0][1], max_new_tokens, stop)
        rows = np.full((num_samples, max_new_tokens), PADDING_TOKEN_ID, dtype=np.int64)
        drafted = accepted = 0
        per_request = True
        i = 0
        for key, _body, n, _what in requests:
            self._check_journaled(key, n, max_new_tokens, stop)
            for c in self.journal.get(key):
                rows[i, :len(c.token_ids)] = c.token_ids
                i += 1
                if c.drafted is None:
                    per_request = False
                else:
                    drafted, accepted = drafted + c.drafted, accepted + (c.accepted or 0)
        self.last_stats = DecoderStats(num_draft_tokens=self.num_draft_tokens, extra={"speculation": self._speculation(
            before, after, len(missing), len(requests), drafted if per_request else None, accepted if per_request else None)})
        if self.background:
            self.last_stats.extra["speculation"].update(background_requests=background_sent,
                                                        background_failed=background_failed)
        if self.speculative is False:
            self._check_switched_off(self.last_stats.extra["speculation"])
        return rows

    def _check_switched_off(self, figures: dict[str, Any]) -> None:
        """Speculation off per request must mean no draft verified; a server that ignores the switch (some
        llama-server builds read no ``speculative.*`` request field) would make a two-sample reference of
        speculative samples: refused (exit 2) rather than compared."""
        from verifier.errors import SamplingRefusedError

        counted = (figures.get("counters") or {}).get("draft_tokens")
        drafted = figures.get("per_request_draft_tokens")
        moved = [v for v in (counted, drafted) if v]
        if moved:
            raise SamplingRefusedError(
                f"speculation off was requested per request (speculative.n_max = 0) but {self.name} verified "
                f"{max(moved):,.0f} draft tokens for those requests: it ignores the per-request switch; allowed: "
                "start a second server without a draft model and give it as --reference-url")

    def _seed_contract(self, request: tuple, max_new_tokens: int, stop=None) -> bool:
        """Send one journaled request twice more with its seed: False when a repeat differs (the server
        ignores ``seed``, or samples non-deterministically: reproducibility is then the journal's alone)."""
        key, body, n, what = request
        first = [c.token_ids for c in self.journal.get(key)]
        repeats: list[list[tuple[int, ...]]] = []

        def keep(_j: int, reply: Any, _s: float) -> None:
            repeats.append([c.token_ids for c in self.dialect.parse(reply, n=n, max_new_tokens=max_new_tokens,
                                                                     eos_token_id=self.eos_token_id, what=what,
                                                                     stop=stop)])

        for _ in range(2):  # one at a time: the same request alone, as it was first sent
            post_all(self.server, self.dialect.path, [(f"seed contract probe ({what})", body)], keep)
        honoured = all(r == first for r in repeats)
        if not honoured:
            print(f"note: {self.name} ignores the request seed: the same request with seed {body.get('seed')} gave "
                  f"different tokens ({first[0]} then {[r[0] for r in repeats]}); the response journal is the only "
                  "record of these samples (a rerun draws new ones)")
        return honoured

    def _check_journaled(self, key: str, n: int, max_new_tokens: int, stop=None) -> None:
        """A journal entry read back must be what a reply to that request could have been (``n`` completions
        of 1..max_new_tokens ids in the vocabulary, shorter than the request's limit only when ending at EOS or, with
        a stop rule, holding one of its stop tokens); an edited entry is a JournalError (exit 2) naming its line,
        never samples."""
        from verifier.server.journal import JournalError

        completions = self.journal.get(key)
        limit = request_limit(stop, max_new_tokens)
        stops = set(stop.token_ids) if stop is not None else set()
        problem = None
        if len(completions) != n:
            problem = f"{len(completions)} completions for a request of n={n}"
        for c in completions:
            if problem:
                break
            ids = c.token_ids
            if not 1 <= len(ids) <= max_new_tokens:
                problem = f"{len(ids)} tokens for max_new_tokens={max_new_tokens}"
            elif any(not 0 <= t < self.vocab_size for t in ids):
                problem = f"token ids {list(ids)} outside the vocabulary 0..{self.vocab_size - 1}"
            elif (len(ids) < limit and (self.eos_token_id is None or ids[-1] != self.eos_token_id)
                  and not stops.intersection(ids)):
                problem = f"{len(ids)} of {limit} tokens without ending at EOS (id {self.eos_token_id})" + (
                    " or holding a stop token" if stops else "")
        if problem:
            raise JournalError(f"{self.journal.where(key)}: the journaled reply holds {problem}; no server reply "
                               "passes those checks, so the response journal was edited or corrupted -- restore it "
                               "or start a new run")

    def _check_ids(self, completions: list[Completion], what: str) -> None:
        for c in completions:
            bad = [t for t in c.token_ids if not 0 <= t < self.vocab_size]
            if bad:
                raise DecoderOutputError(f"{what}: the server emitted token id {bad[0]} outside the target's vocabulary "
                                         f"0..{self.vocab_size - 1} (emitted: {list(c.token_ids)}); is it serving "
                                         "another model than --target?")

    def _speculation(self, before: SpecCounters | None, after: SpecCounters | None, sent: int, total: int,
                     drafted: int | None, accepted: int | None) -> dict[str, Any]:
        """What the chunk shows of speculation: server counters' deltas and per-request figures."""
        out: dict[str, Any] = {"requests": total, "requests_sent": sent, "requests_from_journal": total - sent,
                               "seed_honoured": self.seed_honoured, "required": self.require_speculation,
                               "per_request_draft_tokens": drafted, "per_request_accepted_tokens": accepted}
        if self.server_fingerprint is not None:  # the replies' system_fingerprint (the README matrix's version)
            out["server_fingerprint"] = self.server_fingerprint
        if before is not None and after is not None:
            delta = counter_delta(before, after)
            out["counters"] = delta.to_json()  # server-wide: another client's traffic in the same window counts too
        return out

    def close(self) -> None:
        self.journal.close()


class _Background:
    """The mixed batch's background load: a thread keeping ``concurrent`` other requests in flight."""

    def __init__(self, owner: ServerDecoder, prompt: list[int], max_new_tokens: int, seed: int) -> None:
        from verifier.sampling import SamplingConfig

        self.stop_event, self.sent, self.failed = threading.Event(), 0, 0
        longer = prompt + [prompt[-1]] * BACKGROUND_EXTRA
        bodies = [owner.dialect.request(longer, SamplingConfig(temperature=t), max_new_tokens, (seed + i) % (1 << SEED_BITS),
                                        model=owner.model) for i, t in enumerate(BACKGROUND_TEMPERATURES)]
        url, headers = owner.server.url(owner.dialect.path), owner.server.headers()

        def worker(index: int) -> None:
            import httpx

            from verifier.server.client import tls_context

            with httpx.Client(timeout=owner.server.timeout_s, headers=headers, verify=tls_context()) as client:
                i = index
                while not self.stop_event.is_set():
                    try:
                        client.post(url, content=json.dumps(bodies[i % len(bodies)]))
                        self.sent += 1
                    except httpx.HTTPError:  # the audited requests report the server's failures
                        self.failed += 1
                        self.stop_event.wait(0.5)
                    i += 1

        self.threads = [threading.Thread(target=worker, args=(i,), daemon=True)
                        for i in range(int(owner.background.get("concurrent", 2)))]
        for t in self.threads:
            t.start()

    def stop(self) -> tuple[int, int]:
        """Stop the load; ``(requests answered, requests that failed)``."""
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=60)
        return self.sent, self.failed


def decoder(base_url: str, vocab_size: int, eos_token_id: int | None = None, num_draft_tokens: int = 1,
            **options: Any) -> ServerDecoder:
    """Plugin factory (``verifier.server.decoder:decoder``) the URL audit writes into its suite, so
    ``--resume`` rebuilds the same client (options are the :class:`ServerDecoder` keywords)."""
    return ServerDecoder(base_url, vocab_size=vocab_size, eos_token_id=eos_token_id,
                         num_draft_tokens=num_draft_tokens, **options)

