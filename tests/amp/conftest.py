import pytest


@pytest.fixture(autouse=True)
def _fresh_amp():
    """Every test starts and ends with torch unpatched and no amp session."""
    from amplint import amp

    amp.reset()
    yield
    amp.reset()
