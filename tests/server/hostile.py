"""A hostile in-process HTTP server for the URL audit's fault tests (standard library, a thread), as in
test_url_faults.py, plus the client helpers the test_url_hostile_* files share.  Each fault must be a clear
error (exit 2 usage, 3 misbehaving server), never a crash, a hang or a claim the evidence does not make."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from verifier.sampling import SamplingConfig
from verifier.server.decoder import ServerDecoder

VOCAB = 5


class Hostile:
    """POST -> ``post(count, body)`` = (status, text[, extra headers]) or a callable(handler) writing the reply itself;
    GET ``path`` -> ``get(path)`` = text (200) or such a callable, default ``{"data": []}``."""

    def __init__(self, post, get=None):
        self.count, self.bodies, self.headers = 0, [], []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, text, extra=()):
                data = text.encode()
                self.send_response(status)
                for k, v in extra:  # e.g. Retry-After
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                out = get(self.path) if get else json.dumps({"data": []})
                try:
                    out(self) if callable(out) else self._send(200, out)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.count += 1
                    count = outer.count
                    outer.bodies.append(body)
                    outer.headers.append(dict(self.headers))
                out = post(count, body)
                try:
                    out(self) if callable(out) else self._send(*out)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up: expected in these tests
                    pass

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client that hung up (a cancelled retry): not news
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hostile():
    made = []

    def make(post, get=None):
        made.append(Hostile(post, get))
        return made[-1]

    yield make
    for s in made:
        s.close()


def tokens(body):
    rng = np.random.default_rng(body["seed"])
    return [int(t) for t in rng.integers(1, VOCAB, size=body["max_tokens"])]


def ok(count, body):
    return 200, json.dumps({"choices": [{"index": i, "token_ids": tokens(body), "finish_reason": "length"}
                                        for i in range(body.get("n", 1))]})


def reply(choices):
    return lambda count, body: (200, json.dumps({"choices": choices}))


def decoder(url, **kw):
    kw.setdefault("max_retries", 0)
    kw.setdefault("request_timeout_s", 10.0)
    return ServerDecoder(url, vocab_size=VOCAB, eos_token_id=0, num_draft_tokens=2, **kw)


def generate(dec, n=4, seed=1):
    return dec.generate([1, 2], n, 3, SamplingConfig(), seed)


