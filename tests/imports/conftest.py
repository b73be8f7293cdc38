from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"


@pytest.fixture
def sample() -> callable:
    def get(name: str) -> Path:
        path = DATA / name
        assert path.is_file(), f"missing sample {name}"
        assert (DATA / (name + ".source")).is_file(), f"sample {name} has no .source sidecar"
        return path

    return get
