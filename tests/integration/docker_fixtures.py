# SPDX-License-Identifier: GPL-3.0-or-later
"""dockerd for a test module (tests/lab/docker_engine.py): started for the module unless it
runs already, and then stopped by it. Test modules load it with
``pytest_plugins = ["docker_fixtures"]``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))

from docker_engine import DockerEngine
from toolbox import LabError


class SessionEngine(DockerEngine):
    """dockerd for this module: started here unless it runs already, then stopped here."""

    started_here = False


@pytest.fixture(scope="module")
def docker_engine() -> Iterator[SessionEngine]:
    engine = SessionEngine()
    if not engine.status()["answering"]:
        try:
            engine.up()
        except LabError as err:
            pytest.fail(f"dockerd did not start: {err}", pytrace=False)
        engine.started_here = True
    yield engine
    if engine.started_here and engine.pid():
        engine.down()
