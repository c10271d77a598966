"""The docstring examples of the CI-integration modules run (numbers in them are not decoration)."""

import doctest

import pytest

import verifier.api
import verifier.diagnose.batchlevel
import verifier.diagnose.logprob
import verifier.diagnose.stoprule
import verifier.exact.batch
import verifier.exact.logprob
import verifier.exact.stop
import verifier.server.consistency
import verifier.runner.shard
import verifier.suite.batch


@pytest.mark.parametrize("module", [verifier.api, verifier.runner.shard, verifier.exact.stop, verifier.diagnose.stoprule,
                                    verifier.exact.logprob, verifier.diagnose.logprob, verifier.server.consistency,
                                    verifier.exact.batch, verifier.diagnose.batchlevel, verifier.suite.batch],
                         ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
