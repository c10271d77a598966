"""The URL audit's client spends its CPU on requests, not on set-up it repeats (issue 27: the client shares the
machine with the server whose rate it is measured against).

Before the fix every httpx client -- one per chunk, per ``/metrics`` read, per probe -- loaded the CA bundle into a
new TLS context (about 70 ms of CPU each, also for http:// URLs: 11 loads, 0.9 s, in a profiled 1,500-sample audit),
and httpcore's per-request ``import sniffio`` searched every import path each time sniffio was absent (~55 us, about
4 per request).  Measured under load (2 shared cores, load 3-6), the audit decoder's client CPU fell from 3.6-5.2 to
2.6-3.3 ms per request (reports/benchmarks.md section 13).
"""

from __future__ import annotations

import importlib.util
import ssl
import sys

from tests.server.hostile import hostile, ok  # noqa: F401  (hostile: a fixture)
from verifier.server.client import ServerSettings, get_text, post_all, tls_context


def test_every_client_shares_one_tls_context(hostile):
    s = hostile(ok)
    settings = ServerSettings(s.url, num_concurrent=2, max_retries=0)
    before = tls_context.cache_info()
    for _ in range(3):
        post_all(settings, "/v1/completions", [("r", {"seed": 1, "max_tokens": 2})], lambda *a: None)
        assert get_text(settings, "/metrics")[0] == 200
    after = tls_context.cache_info()
    assert after.misses <= 1  # built at most once in this process, then reused by every client
    assert after.hits + after.misses >= before.hits + before.misses + 6
    assert isinstance(tls_context(), ssl.SSLContext) and tls_context().verify_mode == ssl.CERT_REQUIRED


def test_an_absent_sniffio_is_looked_up_once(hostile):
    s = hostile(ok)
    post_all(ServerSettings(s.url, max_retries=0), "/v1/completions", [("r", {"seed": 1, "max_tokens": 2})],
             lambda *a: None)
    if sys.modules.get("sniffio") is not None:  # installed: nothing to mark
        assert importlib.util.find_spec("sniffio") is not None
    else:
        assert "sniffio" in sys.modules  # the marker: `import sniffio` fails at once, httpcore assumes asyncio
