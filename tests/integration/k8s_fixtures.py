# SPDX-License-Identifier: GPL-3.0-or-later
"""Session fixtures of the Kubernetes lab (tests/lab/k8s_lab.py) and the site on it.

``k8s_lab``: a lab that is already up is reused and left up; a lab the session starts is
taken down when the session ends.  ``slinky_site``: site.yml run on the lab with
inventories/lab, once per test module unless nothing it controls changed since the last
run.  ``slinky_slurm``: the deployed cluster's slurmrestd, once its batch nodes are IDLE.  Test modules load them with ``pytest_plugins = ["k8s_fixtures"]``.
"""

from __future__ import annotations

import json
import sys
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))

from ansible_runner import LAB_INVENTORY, SITE, run_playbook
from k8s_lab import K8sLab
from slurm_pods import SlinkyRest
from toolbox import LabError, wait_until

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.rollout import (
    nodeset_rollout_pending,
)

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


# The site as the last slinky_site left it, to know whether a module disturbed it.
_deployed: dict[str, str] = {}
SLINKY_RESOURCES = ("controllers", "restapis", "nodesets", "loginsets", "accountings", "tokens")


def site_fingerprint(lab: K8sLab) -> str:
    """What site.yml controls, as the apiserver holds it: this lab instance (its apiserver's
    pid), the Helm releases, the objects Helm made (their resourceVersions) and the Slinky
    resources' specs (their generations). The operator's own writes (status, slurm.conf)
    are not in it."""
    found: dict[str, t.Any] = {"apiserver": lab.load_state().get("pids", {}).get("kube-apiserver")}
    for kind in ("secrets", "configmaps"):
        for namespace in ("slinky", "slurm", "cert-manager"):
            items = lab.get(f"/api/v1/namespaces/{namespace}/{kind}")["items"]
            found[f"{namespace}/{kind}"] = sorted(
                (o["metadata"]["name"], o["metadata"]["resourceVersion"])
                for o in items
                if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "Helm"
                or (o["metadata"].get("labels") or {}).get("owner") == "helm"
            )
    for plural in SLINKY_RESOURCES:
        status, body = lab.request("GET", f"/apis/slinky.slurm.net/v1beta1/{plural}")
        items = body["items"] if status == 200 and isinstance(body, dict) else []
        found[plural] = sorted((o["metadata"]["name"], o["metadata"]["generation"]) for o in items)
    return json.dumps(found, sort_keys=True)


@pytest.fixture(scope="module")
def slinky_site(k8s_lab: K8sLab, request: pytest.FixtureRequest) -> K8sLab:
    """The lab with site.yml deployed, per module. A module may take the lab down or change
    the site; when nothing site.yml controls changed since the last module's run, the site
    is as that run left it and the run (a no-op of about 30 s) is skipped."""
    if _deployed.get("fingerprint") == site_fingerprint(k8s_lab):
        print(f"\nsite.yml not run: the site deployed for {_deployed['by']} is untouched")
        return k8s_lab
    _deployed.clear()
    run = run_playbook(SITE, LAB_INVENTORY)
    assert not run.failed, f"site.yml failed: {run.failures()}\n{run.output[-3000:]}"
    _deployed.update(fingerprint=site_fingerprint(k8s_lab), by=request.module.__name__)
    return k8s_lab


@pytest.fixture(scope="module")
def slinky_slurm(slinky_site: K8sLab) -> SlinkyRest:
    """The deployed cluster's slurmrestd, once both batch nodes are IDLE in Slurm."""
    rest = SlinkyRest.of_cluster(slinky_site)
    wait_for_batch_nodes(rest, slinky_site)
    return rest


def wait_for_batch_nodes(rest: SlinkyRest, lab: K8sLab | None = None) -> None:
    """Until both batch nodes of the deployed cluster are IDLE in Slurm; a timeout says
    what Slurm (and, given the lab, the NodeSets and slurmd pods) last showed."""
    seen: dict[str, t.Any] = {}

    def batch_nodes_idle() -> bool:
        try:
            nodes = {n["name"]: n for n in rest.get("nodes")["nodes"]}
        except LabError as err:  # slurmctld or slurmrestd still starting
            seen["slurm"] = f"slurmrestd: {err}"
            return False
        seen["slurm"] = {
            name: "+".join(nodes[name]["state"])
            + (f" ({nodes[name]['reason']})" if nodes[name].get("reason") else "")
            if name in nodes
            else "not registered"
            for name in ("hpc-0", "hpc-1")
        }
        return all("IDLE" in nodes.get(node, {}).get("state", []) for node in ("hpc-0", "hpc-1"))

    def saw() -> dict[str, t.Any]:
        if lab is not None:
            seen["nodesets"] = (
                nodeset_rollout_pending(
                    lab.get("/apis/slinky.slurm.net/v1beta1/namespaces/slurm/nodesets")["items"]
                )
                or "rolled out"
            )
            seen["slurmd pods"] = {
                p["metadata"]["name"]: p["status"].get("phase")
                + (" terminating" if p["metadata"].get("deletionTimestamp") else "")
                for p in lab.get(
                    "/api/v1/namespaces/slurm/pods?labelSelector=app.kubernetes.io%2Fname%3Dslurmd"
                )["items"]
            }
        return seen

    wait_until(
        batch_nodes_idle, SLURM_DEADLINE_S, "hpc-0 and hpc-1 IDLE in the deployed Slurm", saw
    )
