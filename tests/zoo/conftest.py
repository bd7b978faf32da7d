"""Registers the zoo's fast-subset marker (``make test`` runs ``-m "not zoo or zoo_fast"``)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "zoo_fast: the zoo's fast subset, run by make test (~60 s)")
