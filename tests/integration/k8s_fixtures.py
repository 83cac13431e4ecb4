# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``k8s_lab`` session fixture: the Kubernetes lab of tests/lab/k8s_lab.py.

A lab that is already up is reused and left up; a lab the session starts is taken down when
the session ends.  Test modules load it with ``pytest_plugins = ["k8s_fixtures"]``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))

from k8s_lab import K8sLab
from slurm_lab import LabError


@pytest.fixture(scope="session")
def k8s_lab(request: pytest.FixtureRequest) -> Iterator[K8sLab]:
    """A running Kubernetes lab, built and started on first use."""
    lab = K8sLab()
    started = not lab.is_healthy()
    if started:
        # A cold build takes many minutes: show its progress lines instead of capturing them.
        capture = request.config.pluginmanager.getplugin("capturemanager")
        try:
            with capture.global_and_fixture_disabled():
                lab.up()
        except LabError as err:
            pytest.fail(f"Kubernetes lab did not come up: {err}", pytrace=False)
    yield lab
    if started:
        lab.down()
