"""One torch thread per test: tiny per-node tensor ops spin against each other on a shared 2-core box
(the tree kernel audit measured 10x slower with 2 threads under load); restored after each test."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
