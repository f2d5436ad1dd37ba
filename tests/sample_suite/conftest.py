"""A CUDA-first mini suite for ``torchdevice compare`` (tests/test_compare.py runs it).

It is its own pytest project (``pytest.ini`` here makes this directory the rootdir when it
is run), and the main suite must not collect it: its GPU tests would fail there by design.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip this directory unless it is the project being run."""
    return True if config.rootpath.resolve() != HERE else None
