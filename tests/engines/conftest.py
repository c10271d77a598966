"""Engine tests run the real engines.  An engine that is not installed skips its tests with the
install command as the reason -- except under CI (``CI`` set), where ``.ci/run`` installs every
engine first, so a missing engine FAILS the test instead of hiding it."""

import os

import pytest

from verifier.engines import get_engine


@pytest.fixture
def require_engine():
    def check(name: str):
        engine = get_engine(name)
        if not engine.is_installed():
            why = f"engine {name!r} not installed in {engine.install_dir()}: run `{engine.install_script()}`"
            if os.environ.get("CI"):
                pytest.fail(f"{why} (CI must install every engine: .ci/run runs ci/engines/*.sh)")
            pytest.skip(why)
        return engine

    return check
