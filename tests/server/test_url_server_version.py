"""What a URL audit records of the server's identity, for the README audit matrix's version column.

* A self-reported audit writes ``design.server`` into report.json (GET ``/props`` / ``/version``, as the known-target
  design's audit.json ``engine``); before the fix it recorded nothing and the matrix's version and entry point were
  empty for those rows.
* A server without a version endpoint (mlx_lm server) names itself in each reply's ``system_fingerprint``; the
  known-target design records it with each chunk (``speculation.server_fingerprint``), summed per decoder as
  ``server_fingerprints``.
In-process stdlib servers (tests/server/hostile.py) stand in for the replies; the real servers' rows are read from the
published reports in tests/engines/test_matrix.py.
"""

from __future__ import annotations

import json

from tests.server.hostile import decoder, generate, hostile, ok  # noqa: F401  (hostile: a fixture)
from tests.server.test_url_self_reported_rows import _llama, _spec
from verifier.runner import speculation
from verifier.server.self_audit import run_self_reported


def test_a_self_reported_report_records_what_the_server_says_it_is(hostile, tmp_path):
    props = json.dumps({"build_info": "b1-0c1e570", "model_path": "target.gguf"})
    server = hostile(_llama(lambda e: e), get=lambda path: props if path == "/props" else json.dumps({"data": []}))
    assert run_self_reported(_spec(server.url, tmp_path)) in (0, 4)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["design"]["server"] == {"name": "llama-server (URL)", "version": "b1-0c1e570",
                                          "entry_point": "POST /completion (llama-server)", "package": "", "options": {}}


def test_the_replies_system_fingerprint_is_recorded_with_the_chunk(hostile, tmp_path):
    def fingerprinted(count, body):
        status, text = ok(count, body)
        return status, json.dumps(dict(json.loads(text), system_fingerprint="0.32.2-0.32.4-Linux-cpu"))

    s = hostile(fingerprinted)
    dec = decoder(s.url, num_concurrent=1)
    dec.bind_run_dir(tmp_path)
    generate(dec)
    figures = dec.last_stats.extra["speculation"]
    dec.close()
    assert figures["server_fingerprint"] == "0.32.2-0.32.4-Linux-cpu"
    assert speculation.summarize([figures, dict(figures)])["server_fingerprints"] == ["0.32.2-0.32.4-Linux-cpu"]
    plain = hostile(ok)  # a server that sends none: no entry, no summary key
    dec = decoder(plain.url, num_concurrent=1)
    generate(dec)
    assert "server_fingerprint" not in dec.last_stats.extra["speculation"]
    assert "server_fingerprints" not in speculation.summarize([dec.last_stats.extra["speculation"]])
