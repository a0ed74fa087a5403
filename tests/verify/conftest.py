import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures")


def fixture_path(*parts):
    return os.path.join(FIXTURES, *parts)


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    """The verifier's models are tiny: one intra-op thread avoids OpenMP spin-waiting on a busy
    CI machine (a 2-core box under load ran them 10x slower with 2 threads).  Restored after."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # for the subprocesses the tests start
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
