# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""upgrade.yml's wait for the NodeSets' rollout (slurm_cluster ``tasks_from: rollout``) on the
lab's apiserver: a NodeSet that does not roll out gets the annotation that wakes the Slinky
operator at each round of the wait, and the run stops at its timeout naming the NodeSet and
what it lacks.

The operator retries a NodeSet whose reconciles failed with a back-off of up to 1000 s (seen
in the lab after the controller's restart in an upgrade: a slurmd pod drained for the rollout
and not replaced for 9 minutes); the annotation makes it reconcile at once. Here the NodeSet
names a Controller that does not exist, so no operator (whether one runs in the lab or not)
can roll it out.
"""

from __future__ import annotations

import subprocess
import time
import typing as t

import k8s_binaries
import pytest
from ansible_runner import run_play
from k8s_lab import K8sLab
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures"]
pytestmark = pytest.mark.integration

NS = "rollout-wait"
NODESET = "slurm-worker-stuck"
NUDGE = "hpcops.io/handover-nudge"
# Rounds of a third of it: three looks, 5 s apart, then the nudge. 30 s leaves room for the
# looks themselves on a busy machine (at 15 s, CI's first round outlasted the timeout).
TIMEOUT_S = 30


NODESETS = f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets"


@pytest.fixture(scope="module")
def stuck_nodeset(k8s_lab: K8sLab) -> t.Iterator[K8sLab]:
    crds = k8s_binaries.slinky_charts()["slurm-operator-crds"]
    kubectl = str(k8s_binaries.binary("kubectl").path)
    kubeconfig = f"--kubeconfig={k8s_lab.kubeconfig_path}"
    # The chart's CRDs as Slinky's chart installs them (a no-op when it did already).
    rendered = subprocess.run(
        ["tar", "-xzOf", str(crds), "--wildcards", "*/templates/slinky.slurm.net_nodesets.yaml"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    subprocess.run(
        [kubectl, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-"],
        input=rendered, capture_output=True, check=True,
    )  # fmt: skip
    subprocess.run(
        [kubectl, kubeconfig, "wait", "--for=condition=Established",
         "crd/nodesets.slinky.slurm.net", "--timeout=60s"],
        capture_output=True, check=True,
    )  # fmt: skip
    k8s_lab.apply(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    k8s_lab.apply(NODESETS, {
        "apiVersion": "slinky.slurm.net/v1beta1", "kind": "NodeSet",
        "metadata": {"name": NODESET, "namespace": NS},
        "spec": {"controllerRef": {"name": "no-such-controller", "namespace": NS}, "replicas": 1},
    })  # fmt: skip
    yield k8s_lab
    # Gone before the next module looks: a namespace still terminating is a change to it
    # (test_site_bad_inventory.py checks that a refused run changes nothing).
    k8s_lab.request("DELETE", f"/api/v1/namespaces/{NS}")
    wait_until(
        lambda: k8s_lab.request("GET", f"/api/v1/namespaces/{NS}")[0] == 404,
        120,
        f"the namespace {NS} deleted",
        lambda: k8s_lab.request("GET", f"/api/v1/namespaces/{NS}")[1],
    )


def test_a_nodeset_that_does_not_roll_out_is_woken_each_round_and_named(
    stuck_nodeset: K8sLab,
) -> None:
    lab = stuck_nodeset
    started = time.time()
    run = run_play([{
        "name": "the rollout wait of upgrade.yml",
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": {"group/kubernetes.core.k8s": {"kubeconfig": str(lab.kubeconfig_path)}},
        "tasks": [{
            "name": "Wait until the operator has rolled out every NodeSet",
            "ansible.builtin.include_role": {"name": "hpcops.slinky.slurm_cluster", "tasks_from": "rollout"},
            "vars": {"slurm_cluster_namespace": NS, "slurm_cluster_rollout_timeout_s": TIMEOUT_S},
        }],
    }])  # fmt: skip
    assert run.failed
    (stop,) = run.task_results(
        "hpcops.slinky.slurm_cluster : Stop when a NodeSet did not roll out in time"
    )
    failure = stop["msg"]
    assert failure.startswith(
        f"the operator had not rolled out every NodeSet after {TIMEOUT_S} s "
        f"(slurm_cluster_rollout_timeout_s): NodeSet {NODESET}: "
    ), failure
    # Each round that ended with the NodeSet still rolling woke the operator on it, and only it.
    touched = [
        result
        for result in run.task_results(
            "hpcops.slinky.slurm_cluster : Touch the annotation that makes the operator reconcile a NodeSet now"
        )
        if not result.get("skipped")
    ]
    assert touched, run.output[-3000:]
    for result in touched:
        assert [item["item"] for item in result["results"]] == [NODESET], result
    nudged = lab.get(f"{NODESETS}/{NODESET}")["metadata"]["annotations"][NUDGE]
    kind, at = nudged.split()
    assert kind == "rollout" and started <= int(at) + 1 <= time.time() + 1, nudged
