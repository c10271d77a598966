"""Old home of :mod:`verifier.engines.hf_assisted`, kept for plugin specs written against it
(``verifier.audit.hf_assisted:make_hf_assisted_decoder`` in ``suites/audit-hf.toml`` and users' suites)."""

from verifier.engines.hf_assisted import HFAssistedDecoder, make_hf_assisted_decoder  # noqa: F401

__all__ = ["HFAssistedDecoder", "make_hf_assisted_decoder"]
