import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures")


def fixture_path(*parts):
    return os.path.join(FIXTURES, *parts)


@pytest.fixture(scope="session")
def root():
    return ROOT
