"""Audit running completion servers by URL (``specverify audit --url``) and serve the harness's own decoders.

Modules: :mod:`~verifier.server.dialects` (request/reply formats), :mod:`~verifier.server.client`
(async HTTP with retries), :mod:`~verifier.server.journal` (every reply persisted as it arrives),
:mod:`~verifier.server.metrics` (the server's speculation counters), :mod:`~verifier.server.decoder`
(a server as a :class:`~verifier.protocols.Decoder`), :mod:`~verifier.server.serve`
(``specverify serve``).  Nothing here imports torch at import time.
"""
