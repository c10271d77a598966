"""Audit running completion servers by URL (``specverify audit --url``) and serve the harness's own decoders.

Modules: :mod:`~verifier.server.dialects` (request/reply formats), :mod:`~verifier.server.client`
(async HTTP with retries), :mod:`~verifier.server.journal` (every reply persisted as it arrives),
:mod:`~verifier.server.metrics` (the server's speculation counters), :mod:`~verifier.server.decoder`
(a server as a :class:`~verifier.protocols.Decoder`), :mod:`~verifier.server.serve`
(``specverify serve``); the self-reported design (no local model): :mod:`~verifier.server.reported_law`
(the law rebuilt from reported logprobs), :mod:`~verifier.server.self_reported` (its gof@1 and PIT cells),
:mod:`~verifier.server.consistency` (reported logprobs vs speculation off), :mod:`~verifier.stats.collisions`
(identical completions of independent requests), :mod:`~verifier.server.self_audit` (the run end to end).
Nothing here imports torch at import time.
"""
