"""Old home of :mod:`verifier.engines.hf_kernel`, kept for kernel specs written against it
(``verifier.audit.hf_kernel:make_hf_kernel``)."""

from verifier.engines.hf_kernel import *  # noqa: F401,F403
from verifier.engines.hf_kernel import __all__  # noqa: F401
