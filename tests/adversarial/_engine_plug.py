"""An engine adapter's decoder (the bridge tests' echo engine, a real worker process) that declares no stop rule --
as the vLLM, mlx-lm and llama-cpp-python adapters declare none: ``make()`` for a suite's ``decoder = "plug.py:make"``."""

from tests.engines.test_bridge import _decoder


def make():
    return _decoder(generate_keywords=("return_logprobs",))
