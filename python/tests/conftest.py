import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def examples() -> pathlib.Path:
    return ROOT / "examples"
