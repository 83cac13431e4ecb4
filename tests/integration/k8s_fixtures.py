# SPDX-License-Identifier: GPL-3.0-or-later
"""Session fixtures of the Kubernetes lab (tests/lab/k8s_lab.py) and the site on it.

``k8s_lab``: a lab that is already up is reused and left up; a lab the session starts is
taken down when the session ends.  ``slinky_site``: site.yml run on the lab with inventories/lab,
once per test module.  ``slinky_slurm``: the deployed cluster's slurmrestd, once its batch nodes
are IDLE.  Test modules load them with ``pytest_plugins = ["k8s_fixtures"]``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))

from ansible_runner import LAB_INVENTORY, SITE, run_playbook
from k8s_lab import K8sLab
from slurm_pods import SlinkyRest
from toolbox import LabError, wait_until

SLURM_DEADLINE_S = 90.0


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
    else:
        # A lab another checkout started: this checkout's .lab/ (kubeconfig, helm, the
        # charts inventories/lab installs) may not exist yet.
        lab.write_client_files()
    yield lab
    if started:
        lab.down()


@pytest.fixture(scope="module")
def slinky_site(k8s_lab: K8sLab) -> K8sLab:
    """The lab with site.yml deployed; per module, since a module may take the lab down
    (a run on a deployed lab changes nothing and takes about 30 s)."""
    run = run_playbook(SITE, LAB_INVENTORY)
    assert not run.failed, f"site.yml failed: {run.failures()}\n{run.output[-3000:]}"
    return k8s_lab


@pytest.fixture(scope="module")
def slinky_slurm(slinky_site: K8sLab) -> SlinkyRest:
    """The deployed cluster's slurmrestd, once both batch nodes are IDLE in Slurm."""
    rest = SlinkyRest.of_cluster(slinky_site)

    def batch_nodes_idle() -> bool:
        try:
            states = {n["name"]: n["state"] for n in rest.get("nodes")["nodes"]}
        except LabError:  # slurmctld or slurmrestd still starting
            return False
        return all("IDLE" in states.get(node, []) for node in ("hpc-0", "hpc-1"))

    wait_until(batch_nodes_idle, SLURM_DEADLINE_S, "hpc-0 and hpc-1 IDLE in the deployed Slurm")
    return rest
