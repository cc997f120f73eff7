import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# test_plugin.py runs pytest inside pytest.
pytest_plugins = ["pytester"]


@pytest.fixture
def examples() -> pathlib.Path:
    return ROOT / "examples"
