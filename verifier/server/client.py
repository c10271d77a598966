"""The HTTP side of a URL audit: concurrent requests with timeouts, retries and backoff (httpx).

:func:`post_all` sends many JSON requests to one endpoint with at most ``num_concurrent`` in
flight, retries transport errors, 429 and 5xx replies with exponential backoff (``Retry-After``
honoured), and hands each parsed reply to a callback the moment it arrives, so the caller can
persist it before the next one (:mod:`verifier.server.journal`).  Vocabulary follows
lm-evaluation-harness's server backends: ``base_url``, ``num_concurrent``, ``max_retries``.

Authentication: the bearer token is read from an environment variable (``api_key_env``), never from
a flag, so it cannot land in a report, a suite file or a journal.

Client cost (issue 27: the client shares the machine with the server it measures).  Every httpx client builds
a TLS context by default, loading the CA bundle: about 70 ms of CPU, paid by each :func:`post_all` call (one per
chunk), each ``/metrics`` read and each probe, also for plain-http URLs; :func:`tls_context` builds it once per
process instead.  And httpcore asks ``import sniffio`` on every request and lock; where sniffio is not installed
that import fails each time (failed imports are not cached: a walk of every import path, ~55 us each),
so :func:`_no_sniffio_lookups` records the absence once (``sys.modules["sniffio"] = None``, Python's own marker
for a module that is not there).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from verifier.errors import ConfigError, DecoderError, InvalidArgumentError, SamplingRefusedError

@functools.lru_cache(maxsize=1)
def tls_context():
    """The TLS context every httpx client of this process uses (``verify=``): httpx's default (the CA bundle,
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured as read at the first call), built once instead of per client."""
    import httpx

    _no_sniffio_lookups()
    return httpx.create_ssl_context()


def _no_sniffio_lookups() -> None:
    """Where ``sniffio`` is not installed, mark it absent in ``sys.modules`` so httpcore's per-request ``import
    sniffio`` fails at once (it then assumes asyncio, as before) instead of searching every import path again."""
    import importlib.util

    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


__all__ = ["ServerSettings", "ServerError", "ServerUsageError", "post_all", "get_text", "server_description",
           "tls_context", "RETRY_STATUS"]

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # overload and transient server faults: retried
USAGE_STATUS = frozenset({400, 401, 403, 404, 405, 413, 422})  # the request is wrong for this server: exit 2
MAX_CONCURRENT = 256  # requests in flight: one socket each; the same bound as --concurrency-levels
MAX_RETRIES = 100  # with backoff capped at 30 s a larger count only hides a dead server for hours
BACKOFF_BASE_S = 0.5  # first retry after ~0.5 s, doubling
BACKOFF_MAX_S = 30.0  # one wait never longer than this (a Retry-After above it is capped)
BODY_HEAD_CHARS = 300  # how much of an error reply a message shows
GET_MAX_BYTES = 16 << 20  # a GET (health, /metrics, /props) reply longer than this is not read on


class ServerError(DecoderError):
    """The server failed (unreachable mid-run, 5xx/429 after every retry, a dropped connection).
    Exit 3: every response received before is kept in the run folder's journal; ``--resume``
    continues without resampling them."""


class ServerUsageError(SamplingRefusedError, ConfigError):
    """The server refused what we sent (4xx: unknown field or model, authentication) or cannot be
    reached at all before the first sample.  Exit 2: fix ``--url``/``--api``/``--model``/the token --
    also when raised inside ``generate`` (a :class:`~verifier.errors.SamplingRefusedError`, which the
    runner lets through as a usage error instead of calling it a crash)."""


@dataclass(frozen=True)
class ServerSettings:
    """Where and how to reach a server.

    Parameters
    ----------
    base_url : str
        ``http(s)://host:port`` (a trailing ``/v1`` is kept; the dialect adds its own path after it).
    num_concurrent : int, default 4
        Requests in flight at once (>= 1).
    max_retries : int, default 5
        Retries of one request after a transport error, 429 or 5xx (>= 0).
    timeout_s : float, default 300.0
        Seconds for one request (connect + reply), > 0.
    api_key_env : str or None, default None
        Name of the environment variable holding a bearer token; None sends no Authorization header.
    """

    base_url: str
    num_concurrent: int = 4
    max_retries: int = 5
    timeout_s: float = 300.0
    api_key_env: str | None = None

    def __post_init__(self) -> None:
        from urllib.parse import urlsplit

        url = urlsplit(self.base_url) if isinstance(self.base_url, str) else None
        problem = None
        if url is None or url.scheme not in ("http", "https") or not url.netloc:
            problem = "not an http(s) URL"
        elif any(c.isspace() for c in self.base_url):
            problem = "it holds whitespace"
        elif url.username is not None or url.password is not None:  # it would land in the suite, reports, journal
            problem = "credentials in the URL (give the token's variable with --api-key-env)"
        elif url.query or url.fragment or self.base_url.endswith(("?", "#")):
            problem = "a query or fragment (the endpoint's path is appended to the base URL)"
        elif not url.hostname:
            problem = "no host"
        else:
            try:
                url.port  # noqa: B018  raises for a port that is not a number in 0..65535
            except ValueError as exc:
                problem = str(exc)
        if problem:
            raise InvalidArgumentError(f"--url={self.base_url!r} is invalid ({problem}); allowed: http://HOST:PORT or "
                                       "https://HOST[:PORT], optionally with a path such as /v1")
        for name, value, low, high in (("--num-concurrent", self.num_concurrent, 1, MAX_CONCURRENT),
                                       ("--max-retries", self.max_retries, 0, MAX_RETRIES)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgumentError(f"{name}={value!r} is invalid; allowed: an integer in {low}..{high}")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0 and self.timeout_s < float("inf")):
            raise InvalidArgumentError(f"--request-timeout={self.timeout_s!r} is invalid; allowed: seconds > 0")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise InvalidArgumentError(f"--api-key-env={self.api_key_env!r} is invalid; allowed: the name of a set, "
                                       "non-empty environment variable holding the token")

    def url(self, path: str) -> str:
        """``base_url`` + ``path`` (a base ending in ``/v1`` is not doubled by a ``/v1/...`` path)."""
        base = self.base_url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        elif base.endswith("/v1"):  # /metrics, /health, /props, /version live at the server's root, not under /v1
            base = base[:-3]
        return base + path

    def headers(self) -> dict[str, str]:
        out = {"Content-Type": "application/json"}
        if self.api_key_env:
            out["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        return out

    def public(self) -> dict[str, Any]:
        """What a report may show (the token's variable name, never the token)."""
        return {"base_url": self.base_url, "num_concurrent": self.num_concurrent, "max_retries": self.max_retries,
                "timeout_s": self.timeout_s, "api_key_env": self.api_key_env}


def _head(text: str) -> str:
    return text if len(text) <= BODY_HEAD_CHARS else text[:BODY_HEAD_CHARS] + "..."


def _describe(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    shown = {k: v for k, v in body.items() if k != "prompt"}
    ids = f"{len(prompt)} prompt ids" if isinstance(prompt, list) else "prompt"
    return f"{ids}, " + ", ".join(f"{k}={v!r}" for k, v in list(shown.items())[:8])


class _RepeatedTokenKey(Exception):
    """A reply object repeats a ``"token_id:N"`` key (raised from the JSON reader; not a ValueError, which means
    "not JSON")."""


def _token_keys_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of a reply: a dict, refusing a repeated ``token_id:N`` key (vLLM's
    ``return_tokens_as_token_ids`` spelling), which ``json`` would silently resolve to its last value."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen and key.startswith("token_id:"):
                raise _RepeatedTokenKey(repr(key))
            seen.add(key)
    return out


async def _post_one(client, settings: ServerSettings, url: str, body: dict[str, Any], what: str,
                    stats: dict[str, int]) -> Any:
    import httpx

    attempt = 0
    while True:
        wait = None
        try:  # one deadline for the whole exchange: httpx's timeout bounds each read, so a slow drip never trips it
            reply = await asyncio.wait_for(client.post(url, content=json.dumps(body)), settings.timeout_s)
        except asyncio.TimeoutError:
            problem, wait = f"no complete reply within {settings.timeout_s:g} s (--request-timeout)", -1.0
        except httpx.TimeoutException as exc:
            problem, wait = f"no reply within {settings.timeout_s:g} s ({type(exc).__name__})", -1.0
        except httpx.TransportError as exc:
            problem, wait = f"connection failed ({type(exc).__name__}: {exc})", -1.0
        else:
            if reply.status_code == 200:
                try:
                    return reply.json(object_pairs_hook=_token_keys_once)
                except _RepeatedTokenKey as exc:
                    from verifier.server.dialects import ServerReplyError

                    raise ServerReplyError(f"{what}: POST {url} answered an object that holds the key {exc} more than "
                                           f"once (a top-logprobs row names each token once; a JSON reader keeps only "
                                           f"the last value): {_head(reply.text)!r} (sent: {_describe(body)})") from None
                except ValueError:
                    from verifier.server.dialects import ServerReplyError

                    raise ServerReplyError(f"{what}: POST {url} answered 200 with a body that is not JSON: "
                                           f"{_head(reply.text)!r} (sent: {_describe(body)})") from None
            if 300 <= reply.status_code < 400:  # a POST is not followed: its body would be dropped or sent again
                where = reply.headers.get("location")
                raise ServerUsageError(f"{what}: POST {url} was redirected with HTTP {reply.status_code}"
                                       + (f" to {where!r}" if where else " (no Location header)")
                                       + " -- give the final address as --url (redirects are not followed)")
            if reply.status_code in USAGE_STATUS:
                hint = (" -- set the token's environment variable and pass its name with --api-key-env"
                        if reply.status_code in (401, 403) else " -- check --api, --model and the sampling settings")
                raise ServerUsageError(f"{what}: POST {url} was refused with HTTP {reply.status_code}: "
                                       f"{_head(reply.text)!r} (sent: {_describe(body)}){hint}")
            if reply.status_code not in RETRY_STATUS:
                raise ServerError(f"{what}: POST {url} answered HTTP {reply.status_code}: {_head(reply.text)!r} "
                                  f"(sent: {_describe(body)})")
            problem = f"HTTP {reply.status_code}: {_head(reply.text)!r}"
            after = reply.headers.get("retry-after")
            try:
                wait = min(BACKOFF_MAX_S, max(0.0, float(after))) if after is not None else -1.0
            except ValueError:
                wait = -1.0
        if attempt >= settings.max_retries:
            raise ServerError(f"{what}: POST {url} failed after {attempt + 1} tries (--max-retries {settings.max_retries}); "
                              f"last: {problem} (sent: {_describe(body)}). Responses received so far are kept; "
                              "continue with `specverify audit --resume RUN_DIR` once the server is back")
        if wait is None or wait < 0:
            wait = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** attempt) * (0.5 + random.random() / 2)
        stats["retries"] = stats.get("retries", 0) + 1
        attempt += 1
        await asyncio.sleep(wait)


async def _post_all(settings: ServerSettings, path: str, jobs: Sequence[tuple[str, dict[str, Any]]],
                    on_reply: Callable[[int, Any, float], None], stats: dict[str, int]) -> None:
    import httpx

    limits = httpx.Limits(max_connections=settings.num_concurrent, max_keepalive_connections=settings.num_concurrent)
    url = settings.url(path)
    gate = asyncio.Semaphore(settings.num_concurrent)
    async with httpx.AsyncClient(timeout=settings.timeout_s, headers=settings.headers(), limits=limits,
                                 verify=tls_context()) as client:
        async def one(index: int, what: str, body: dict[str, Any]) -> None:
            async with gate:
                start = time.perf_counter()
                reply = await _post_one(client, settings, url, body, what, stats)
                on_reply(index, reply, time.perf_counter() - start)  # persisted before anything else is awaited

        tasks = [asyncio.ensure_future(one(i, what, body)) for i, (what, body) in enumerate(jobs)]
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def post_all(settings: ServerSettings, path: str, jobs: Sequence[tuple[str, dict[str, Any]]],
             on_reply: Callable[[int, Any, float], None]) -> dict[str, int]:
    """POST every ``(what, body)`` of ``jobs`` to ``path``; call ``on_reply(index, json, seconds)`` per reply.

    Parameters
    ----------
    settings : ServerSettings
    path : str
        Endpoint path (the dialect's), joined to ``settings.base_url``.
    jobs : sequence of (str, dict)
        A label naming each request in errors, and its JSON body.
    on_reply : callable
        Called in the event loop's thread as each 200 reply arrives (in completion order); an
        exception it raises stops the batch and is re-raised.

    Returns
    -------
    dict
        ``{"requests": len(jobs), "retries": R}``.

    Raises
    ------
    ServerError
        Transport errors, 429 or 5xx after ``max_retries`` retries; another non-200 status (exit 3).
    ServerUsageError
        A 4xx the request itself caused (exit 2).
    ServerReplyError
        A 200 reply that is not JSON (exit 3).
    """
    stats = {"requests": len(jobs), "retries": 0}
    if jobs:
        asyncio.run(_post_all(settings, path, jobs, on_reply, stats))
    return stats


def get_text(settings: ServerSettings, path: str, *, timeout_s: float | None = None) -> tuple[int, str]:
    """GET ``path``: ``(status, body)``; a transport failure is ``(0, reason)``."""
    import httpx

    limit = timeout_s or min(settings.timeout_s, 30.0)
    deadline = time.monotonic() + limit  # the whole reply, not each read: a slow drip is cut off
    try:
        with httpx.stream("GET", settings.url(path), headers=settings.headers(), timeout=limit,
                          verify=tls_context()) as reply:
            data = bytearray()
            for chunk in reply.iter_bytes():
                data += chunk
                if time.monotonic() > deadline:
                    return 0, f"no complete reply within {limit:g} s"
                if len(data) > GET_MAX_BYTES:
                    return 0, f"reply longer than {GET_MAX_BYTES:,} bytes"
            return reply.status_code, data.decode(reply.encoding or "utf-8", errors="replace")
    except httpx.HTTPError as exc:
        return 0, f"{type(exc).__name__}: {exc}"


def server_description(url: str, api: str, api_key_env: str | None = None) -> dict:
    """What the server says it is, as an engine record (audit.json ``engine``, the self-reported report.json's
    ``design.server``, the README's audit matrix).

    Best effort, GET requests only (no sample request is spent on it): llama-server ``/props`` ``build_info``
    (e.g. ``b1-0c1e570``), vLLM ``/version``.  A server with neither (``mlx_lm server``) gets ``version`` "";
    its replies' ``system_fingerprint`` is recorded with the samples instead (``server_fingerprints`` of the
    speculation figures, :mod:`verifier.runner.speculation`).

    Parameters
    ----------
    url : str
        The server's base URL.
    api : str
        The dialect (``--api``): names the entry point.
    api_key_env : str or None
        The environment variable holding a bearer token, as for the audit's requests.

    Returns
    -------
    dict
        ``name`` ("llama-server (URL)", "vllm (URL)", else "<api> server"), ``version``, ``entry_point``
        ("POST <path> (<api>)"), ``package`` "", ``options`` {}.
    """
    from verifier.server.dialects import get_dialect

    settings = ServerSettings(url, api_key_env=api_key_env)
    version, name = "", f"{api} server"
    for path, key, label in (("/props", "build_info", "llama-server"), ("/version", "version", "vllm")):
        status, text = get_text(settings, path, timeout_s=5.0)
        if status == 200:
            try:
                value = json.loads(text).get(key)
            except (ValueError, AttributeError):
                continue
            if value:
                version, name = str(value), f"{label} (URL)"
                break
    return {"name": name, "version": version, "entry_point": f"POST {get_dialect(api).path} ({api})",
            "package": "", "options": {}}
