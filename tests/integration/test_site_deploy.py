# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/site.yml against the lab: the real apiserver, scheduler, Slinky operator and Slurm.

The Slinky charts come from the pinned slurm-operator module (packaged by the lab); the
apiserver validates every custom resource against the CRDs' schemas; the operator, run by
the lab's pod runner from its chart's Deployment, reconciles them; the pod runner runs the
slurmctld, slurmrestd and slurmd pods the operator creates as real Slurm 26.05 daemons with
the slurm.conf and cgroup.conf the deployment produced.
"""

from __future__ import annotations

import base64
import socket
import threading
import typing as t
import urllib.request

import pytest
from ansible_runner import LAB_INVENTORY, SITE, UPGRADE, PlaybookRun, run_playbook
from k8s_binaries import LAB_SLINKY_VERSION
from pod_runner import OPERATOR_HEALTH_ADDR
from slurm_pods import SlinkyRest, running_pod
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures"]
pytestmark = pytest.mark.integration

SLURM_DEADLINE_S = 90.0
NAMESPACE = "slurm"
# 1.2.1 where the public sources are beside the checkout, else 1.1.0 (tests/lab/k8s_binaries.py);
# the preflight of an upgrade from 1.1 to 1.2 is in test_slinky_upgrade.py.
LAB_SLINKY = LAB_SLINKY_VERSION.lstrip("v")
LAB_RUNS_1_2 = LAB_SLINKY.startswith("1.2.")


def helm_releases(lab: t.Any) -> dict[str, str]:
    """Helm release secrets (name -> resourceVersion) in every namespace."""
    body = lab.get("/api/v1/secrets?labelSelector=owner%3Dhelm")
    return {
        f"{s['metadata']['namespace']}/{s['metadata']['name']}": s["metadata"]["resourceVersion"]
        for s in body["items"]
    }


def custom_resources(lab: t.Any, plural: str) -> dict[str, dict[str, t.Any]]:
    body = lab.get(f"/apis/slinky.slurm.net/v1beta1/namespaces/{NAMESPACE}/{plural}")
    return {item["metadata"]["name"]: item for item in body["items"]}


def test_check_mode_on_a_new_site_changes_nothing(k8s_lab: t.Any) -> None:
    # First in this module, before `deployed` runs site.yml: a fresh lab is a new site.
    k8s_lab.down()
    k8s_lab.up()
    namespaces = {n["metadata"]["name"] for n in k8s_lab.get("/api/v1/namespaces")["items"]}
    run = run_playbook(SITE, LAB_INVENTORY, check=True, diff=True)
    assert not run.failed, run.failures()
    assert run.changed > 0  # it reports what it would do
    assert helm_releases(k8s_lab) == {}
    assert {n["metadata"]["name"] for n in k8s_lab.get("/api/v1/namespaces")["items"]} == namespaces


@pytest.fixture
def deployed(slinky_site: t.Any) -> t.Any:
    return slinky_site


@pytest.fixture
def slurm(slinky_slurm: SlinkyRest) -> SlinkyRest:
    return slinky_slurm


def slurm_nodes(rest: SlinkyRest) -> dict[str, dict[str, t.Any]]:
    return {n["name"]: n for n in rest.get("nodes")["nodes"]}


def let_go(node: dict[str, t.Any] | None) -> bool:
    """Whether a Slurm node (None: no record) is let go as the lab's Slinky line does when
    its pod goes.

    1.1: the slurmd pod's preStop hook deletes the node. 1.2: the hook sets it DOWN and the
    record stays (pruneSlurmNodeRecords prunes only nodes whose Kubernetes Node is gone), so
    the handover's reclaim deletes it itself.
    """
    if not LAB_RUNS_1_2:
        return node is None
    return (
        node is not None
        and "DOWN" in node["state"]
        and node["reason"] == "slurm-operator: Pod is terminating"
    )


def test_operator_runs_from_its_chart(deployed: t.Any) -> None:
    pods = deployed.get("/api/v1/namespaces/slinky/pods")["items"]
    operator = [p for p in pods if p["metadata"]["name"].startswith("slurm-operator-")]
    assert len(operator) == 1
    # kwok reports every pod Running; the real process answers on its health port.
    with urllib.request.urlopen(f"http://{OPERATOR_HEALTH_ADDR}/readyz", timeout=5) as resp:
        assert resp.status == 200
    # No webhook in the lab: the apiserver cannot call into a kwok pod.
    assert not [p for p in pods if "webhook" in p["metadata"]["name"]]


def test_crds_are_established(deployed: t.Any) -> None:
    body = deployed.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    slinky = {
        crd["metadata"]["name"]: {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        for crd in body["items"]
        if crd["spec"]["group"] == "slinky.slurm.net"
    }
    assert set(slinky) == {
        f"{plural}.slinky.slurm.net"
        for plural in ("accountings", "controllers", "loginsets", "nodesets", "restapis", "tokens")
    }
    assert all(conditions.get("Established") == "True" for conditions in slinky.values())


def test_nodesets_follow_the_pools(deployed: t.Any) -> None:
    nodesets = custom_resources(deployed, "nodesets")
    assert set(nodesets) == {
        "slurm-worker-burst",
        "slurm-worker-hpc",
        "slurm-worker-interactive",
        "slurm-worker-interactive-a100",
    }
    hpc = nodesets["slurm-worker-hpc"]["spec"]
    assert hpc["scalingMode"] == "StatefulSet"
    assert hpc["replicas"] == 2  # one per node of the pool
    assert hpc["template"]["spec"]["nodeSelector"]["hpcops.io/pool"] == "slurm"

    for name in ("slurm-worker-interactive", "slurm-worker-interactive-a100"):
        spec = nodesets[name]["spec"]
        assert spec["scalingMode"] == "DaemonSet"
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"]["hpcops.io/slurm-lent"] == "true"
        assert {"key": "hpcops.io/lent", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
    gpu = nodesets["slurm-worker-interactive-a100"]["spec"]
    assert gpu["extraConf"] == "Gres=gpu:a100:4"
    assert gpu["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == (
        "NVIDIA-A100-SXM4-80GB"
    )
    plain = nodesets["slurm-worker-interactive"]["spec"]["template"]["spec"]
    terms = plain["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] == "NotIn"


def test_operator_wrote_slurm_conf(deployed: t.Any) -> None:
    config = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/slurm-config")["data"]
    lines = set(config["slurm.conf"].splitlines())
    assert {
        "ClusterName=lab",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "MCSPlugin=mcs/label",
        "MCSParameters=enforced,select",
        "NodeSet=hpc Feature=hpc",
        # DefMemPerCPU: 512 GiB / 64 CPUs of the pools' nodes, so jobs without --mem share nodes.
        "PartitionName=batch Nodes=burst,hpc DefMemPerCPU=8192 Default=YES MaxTime=UNLIMITED "
        "PreemptMode=OFF PriorityTier=10 State=UP",
        "PartitionName=backfill Nodes=interactive,interactive-a100 DefMemPerCPU=8192 "
        "GraceTime=30 MaxTime=4:00:00 PreemptMode=REQUEUE PriorityTier=1 State=UP",
    } <= lines
    extra = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/slurm-config-extra")["data"]
    assert extra["cgroup.conf"].splitlines() == [
        "CgroupPlugin=autodetect",
        "IgnoreSystemd=yes",
        "ConstrainCores=yes",
        "ConstrainRAMSpace=yes",
        "ConstrainDevices=yes",
        "ConstrainSwapSpace=yes",
        "AllowedSwapSpace=0",
    ]
    # Ours, so GPU jobs are confined to their devices on every Slinky line (1.2 writes none).
    assert extra["gres.conf"] == "AutoDetect=nvidia\n"
    # The operator built the controller from the Controller resource.
    statefulset = deployed.get(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/slurm-controller"
    )
    assert statefulset["spec"]["template"]["spec"]["containers"][0]["name"] == "slurmctld"


def test_a_second_run_changes_nothing_and_keeps_the_jwt_key(deployed: t.Any) -> None:
    """One run for both (each site.yml run costs about 30 s of CPU): the key generated once."""
    secret = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/slurm-jwt-key")
    run = run_playbook(SITE, LAB_INVENTORY)
    assert not run.failed, run.failures()
    assert run.changed == 0, f"changed on a second run: {run.changed_tasks()}"
    again = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/slurm-jwt-key")
    assert again["data"] == secret["data"]
    key = secret["data"]["jwt_hs256.key"]
    assert len(base64.b64decode(key)) == 64
    assert key not in run.output
    assert base64.b64decode(key).decode() not in run.output


def test_check_mode_on_a_deployed_site_changes_nothing(deployed: t.Any) -> None:
    before = helm_releases(deployed)
    # generation, not resourceVersion: the operator keeps writing the status.
    nodesets = {
        n: o["metadata"]["generation"] for n, o in custom_resources(deployed, "nodesets").items()
    }
    run = run_playbook(SITE, LAB_INVENTORY, check=True, diff=True)
    assert not run.failed, run.failures()
    assert run.changed == 0, f"check mode reports changes: {run.changed_tasks()}"
    assert helm_releases(deployed) == before
    assert {
        n: o["metadata"]["generation"] for n, o in custom_resources(deployed, "nodesets").items()
    } == nodesets


def upgrade_report(run: PlaybookRun) -> dict[str, t.Any]:
    (result,) = run.task_results("Work out what the upgrade changes")
    report: dict[str, t.Any] = result["ansible_facts"]["slinky_upgrade_report"]
    return report


def test_upgrade_to_the_installed_release_keeps_the_site_as_it_is(deployed: t.Any) -> None:
    # The lab's release (the one the Go proxy serves): the preflight runs on it, then the
    # CRDs, the operator and the Slurm cluster in that order, and nothing changes.
    before = helm_releases(deployed)
    run = run_playbook(UPGRADE, LAB_INVENTORY)
    assert not run.failed, run.failures()
    report = upgrade_report(run)
    assert report["installed"] == {"crds": LAB_SLINKY, "operator": LAB_SLINKY, "slurm": LAB_SLINKY}
    assert (report["same_version"], report["refusals"], report["changes"]) == (True, [], [])
    assert run.changed == 0, f"changed: {run.changed_tasks()}"
    assert helm_releases(deployed) == before
    names = run.task_names()
    steps = ("Install the Slinky CRDs", "Install the Slinky operator", "Install the Slurm cluster")
    order = [next(i for i, name in enumerate(names) if name.endswith(step)) for step in steps]
    assert order == sorted(order), names


def test_upgrade_stops_before_helm_drops_a_nodeset_the_inventory_no_longer_names(
    deployed: t.Any,
) -> None:
    pools = {
        "hpc": {"kind": "dedicated", "node_selector": {"hpcops.io/pool": "slurm"}},
        "interactive": {"kind": "lendable", "node_selector": {"hpcops.io/pool": "interactive"}},
    }
    before = helm_releases(deployed)
    run = run_playbook(UPGRADE, LAB_INVENTORY, extra_vars={"slurm_cluster_pools": pools})
    assert run.failed
    (message,) = run.failures()
    assert "would delete NodeSets ['slurm-worker-burst']" in message, message
    assert "slinky_upgrade_allow_removals=true" in message
    assert upgrade_report(run)["dropped_nodesets"] == ["slurm-worker-burst"]
    assert helm_releases(deployed) == before
    assert "slurm-worker-burst" in custom_resources(deployed, "nodesets")


def test_the_claim_of_the_deployed_controller_is_not_changed(deployed: t.Any) -> None:
    """The operator makes slurmctld's claim once; a bigger one in the inventory would be
    accepted and never applied, so site.yml names it before any change."""
    bigger = {"controller": {"persistence": {"resources": {"requests": {"storage": "8Gi"}}}}}
    before = helm_releases(deployed)
    controller = custom_resources(deployed, "controllers")["slurm"]
    run = run_playbook(SITE, LAB_INVENTORY, extra_vars={"slurm_cluster_values": bigger})
    assert run.failed
    messages = run.failures()
    assert any(
        m.startswith("slurm_cluster_values.controller.persistence.resources.requests.storage:")
        and "the Controller slurm exists with storage 4Gi" in m
        and "keep 4Gi" in m
        for m in messages
    ), messages
    assert run.changed == 0
    assert helm_releases(deployed) == before
    after = custom_resources(deployed, "controllers")["slurm"]
    assert after["metadata"]["generation"] == controller["metadata"]["generation"]


def test_real_slurm_runs_the_generated_configuration(deployed: t.Any, slurm: SlinkyRest) -> None:
    # slurmctld 26.05 started from the operator's slurm.conf (with our extraConfMap) and
    # every slurmd of the StatefulSet NodeSet registered with it.
    nodes = slurm_nodes(slurm)
    assert {name: (n["features"], n["partitions"]) for name, n in nodes.items()} == {
        "hpc-0": (["hpc"], ["batch"]),
        "hpc-1": (["hpc"], ["batch"]),
    }
    partitions = {p["name"]: p for p in slurm.get("partitions")["partitions"]}
    assert partitions["batch"]["priority"]["tier"] == 10
    backfill = partitions["backfill"]
    assert backfill["priority"]["tier"] == 1
    assert backfill["grace_time"] == 30
    assert backfill["maximums"]["time"] == {"set": True, "infinite": False, "number": 240}
    # The operator reads Slurm's view back into the NodeSet's status through slurmrestd.
    hpc = custom_resources(deployed, "nodesets")["slurm-worker-hpc"]
    wait_until(
        lambda: (
            deployed.get(
                f"/apis/slinky.slurm.net/v1beta1/namespaces/{NAMESPACE}/nodesets/slurm-worker-hpc"
            )["status"].get("slurmIdle")
            == 2
        ),
        SLURM_DEADLINE_S,
        f"NodeSet slurm-worker-hpc status.slurmIdle 2 (was {hpc['status']})",
    )


JOB_SCRIPT = """#!/bin/sh
# What the job's cgroup allows it: memory, memory+swap and CPUs.
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  job=$(sed -n 's/^0:://p' /proc/self/cgroup); job=${job%%/step_*}
  echo "memory $(cat /sys/fs/cgroup$job/memory.max)"
  echo "swap $(cat /sys/fs/cgroup$job/memory.swap.max)"
else
  job=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); job=${job%%/step_*}
  mem=$(cat /sys/fs/cgroup/memory$job/memory.limit_in_bytes)
  memsw=$(cat /sys/fs/cgroup/memory$job/memory.memsw.limit_in_bytes)
  echo "memory $mem"
  echo "swap $((memsw - mem))"
fi
echo "cpus $(nproc)"
"""


def test_cgroup_conf_confines_each_job(deployed: t.Any, slurm: SlinkyRest) -> None:
    status, body = slurm.request(
        "POST",
        f"/slurm/{slurm.api}/job/submit",
        {
            "job": {
                "name": "cgroup-check",
                "partition": "batch",
                "memory_per_node": {"set": True, "number": 100},
                "cpus_per_task": 1,
                "current_working_directory": "/tmp",
                "standard_output": "/tmp/cgroup-check-%j.out",
                "environment": ["PATH=/usr/bin:/bin"],
                "script": JOB_SCRIPT,
            }
        },
        user="alice",
    )
    assert status == 200, body
    job_id = body["job_id"]

    def finished() -> dict[str, t.Any] | None:
        job = slurm.get(f"job/{job_id}")["jobs"][0]
        states = set(job["job_state"])
        # COMPLETING rides along until the epilog is done: wait for it to clear.
        return job if {"COMPLETED", "FAILED"} & states and "COMPLETING" not in states else None

    job = wait_until(finished, SLURM_DEADLINE_S, f"job {job_id} to finish")
    assert job["job_state"] == ["COMPLETED"], job["job_state"]
    node = job["nodes"]
    # The job ran in the slurmd pod of that Slurm node: its /tmp is that pod's own.
    pod = running_pod(deployed.run_dir, f"{NAMESPACE}/slurm-worker-{node}")
    report = dict(
        line.split(" ", 1)
        for line in (pod.workdir / "tmp" / f"cgroup-check-{job_id}.out").read_text().splitlines()
    )
    assert report == {
        "memory": str(100 * 1024 * 1024),  # ConstrainRAMSpace: the job's --mem
        "swap": "0",  # ConstrainSwapSpace with AllowedSwapSpace=0
        "cpus": "1",  # ConstrainCores: the one CPU it asked for
    }


def test_jobs_without_mem_share_a_node_by_cores(deployed: t.Any, slurm: SlinkyRest) -> None:
    # CR_Core_Memory without a default gives a job that names no --mem the node's whole
    # memory, so a second 1-CPU job waits (Resources) beside a free core. With the role's
    # DefMemPerCPU both run at once on the 2-CPU slurmd.
    ids = []
    for index in range(2):
        status, body = slurm.request(
            "POST",
            f"/slurm/{slurm.api}/job/submit",
            {
                "job": {
                    "name": f"no-mem-{index}",
                    "partition": "batch",
                    "required_nodes": ["hpc-0"],
                    "cpus_per_task": 1,
                    "current_working_directory": "/tmp",
                    "environment": ["PATH=/usr/bin:/bin"],
                    "script": "#!/bin/sh\nsleep 60\n",
                }
            },
            user="alice",
        )
        assert status == 200, body
        ids.append(body["job_id"])

    def jobs() -> list[dict[str, t.Any]]:
        return [slurm.get(f"job/{job_id}")["jobs"][0] for job_id in ids]

    try:
        wait_until(
            lambda: all(job["job_state"] == ["RUNNING"] for job in jobs()),
            SLURM_DEADLINE_S,
            "both 1-CPU jobs without --mem RUNNING on hpc-0",
        )
        assert {job["memory_per_cpu"]["number"] for job in jobs()} == {8192}
    finally:
        for job_id in ids:
            slurm.request("DELETE", f"/slurm/{slurm.api}/job/{job_id}", None, user="alice")


def test_a_lent_node_joins_backfill_through_the_daemonset_nodeset(
    deployed: t.Any, slurm: SlinkyRest
) -> None:
    # What lend does in the end (the handover protocol adds the checks and the journal):
    # the label the lendable NodeSet selects, the taint it tolerates.
    patch = {
        "metadata": {"labels": {"hpcops.io/slurm-lent": "true"}},
        "spec": {"taints": [{"key": "hpcops.io/lent", "value": "slurm", "effect": "NoSchedule"}]},
    }
    undo = {"metadata": {"labels": {"hpcops.io/slurm-lent": None}}, "spec": {"taints": None}}
    merge = "application/merge-patch+json"
    status, body = deployed.request("PATCH", "/api/v1/nodes/int01", patch, content_type=merge)
    assert status == 200, body
    try:
        lent = wait_until(
            lambda: [n for n in slurm_nodes(slurm).values() if n["partitions"] == ["backfill"]],
            SLURM_DEADLINE_S,
            "a slurmd on int01 in partition backfill",
        )
        assert len(lent) == 1
        assert lent[0]["features"] == ["interactive"]
        assert "IDLE" in lent[0]["state"]
    finally:
        status, body = deployed.request("PATCH", "/api/v1/nodes/int01", undo, content_type=merge)
        assert status == 200, body
    # Given back: the DaemonSet pod goes, its preStop hook lets the Slurm node go.
    wait_until(
        lambda: let_go(slurm_nodes(slurm).get(lent[0]["name"])),
        SLURM_DEADLINE_S,
        "the lent node to leave Slurm",
    )
    assert {name for name, node in slurm_nodes(slurm).items() if not let_go(node)} == {
        "hpc-0",
        "hpc-1",
    }


def test_cert_manager_is_installed_from_its_chart(deployed: t.Any) -> None:
    # The chart came from cert-manager's own module (v1.21.2); Helm checked our values
    # against its values.schema.json before installing.
    body = deployed.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    established = {
        crd["metadata"]["name"]
        for crd in body["items"]
        if crd["spec"]["group"].endswith("cert-manager.io")
        and {"type": "Established", "status": "True"}.items()
        <= {k: v for c in crd["status"]["conditions"] for k, v in c.items()}.items()
    }
    assert {"certificates.cert-manager.io", "issuers.cert-manager.io"} <= established
    deployments = deployed.get("/apis/apps/v1/namespaces/cert-manager/deployments")["items"]
    assert {d["metadata"]["name"] for d in deployments} == {
        "cert-manager",
        "cert-manager-cainjector",
        "cert-manager-webhook",
    }
    image = deployments[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("quay.io/jetstack/cert-manager-") and image.endswith(":v1.21.2")


def test_keda_scales_the_burst_nodeset_on_pending_jobs(deployed: t.Any) -> None:
    # KEDA's CRDs are in the lab (from KEDA's module): the apiserver checked this object
    # against KEDA's schema.
    scaled = deployed.get(f"/apis/keda.sh/v1alpha1/namespaces/{NAMESPACE}/scaledobjects")["items"]
    assert [s["metadata"]["name"] for s in scaled] == ["slurm-worker-burst"]
    spec = scaled[0]["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "name": "slurm-worker-burst",
    }
    # min_replicas 0 as Slinky's guide writes it: idle at 0, at least 1 while jobs wait.
    assert (spec["idleReplicaCount"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 1, 2)
    assert [trigger["metadata"]["query"] for trigger in spec["triggers"]] == [
        'max(slurm_partition_jobs_pending{partition="batch"})',
        'max(slurm_partition_jobs_max_job_nodes_nohold{partition="batch"})',
    ]
    # The NodeSet starts at the minimum; KEDA owns the count from there.
    assert custom_resources(deployed, "nodesets")["slurm-worker-burst"]["spec"]["replicas"] == 0


def test_the_scaled_nodeset_grows_and_shrinks_through_its_scale_subresource(
    deployed: t.Any, slurm: SlinkyRest
) -> None:
    # What KEDA's HPA does: write spec.replicas through /scale. The operator adds a slurmd
    # that joins batch; scaled back, it drains the node and deletes the pod. Twice: a node
    # scaled in comes back (on 1.2 its DOWN record returns to service, ReturnToService=2).
    scale = (
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NAMESPACE}/nodesets/slurm-worker-burst/scale"
    )
    merge = "application/merge-patch+json"

    def idle_burst_node() -> dict[str, t.Any] | None:
        node = slurm_nodes(slurm).get("burst-0")
        usable = node and "IDLE" in node["state"] and not {"DOWN", "DRAIN"} & set(node["state"])
        return node if usable else None

    for scale_out in (1, 2):
        status, body = deployed.request(
            "PATCH", scale, {"spec": {"replicas": 1}}, content_type=merge
        )
        assert status == 200, body
        try:
            node = wait_until(
                idle_burst_node,
                SLURM_DEADLINE_S,
                f"burst-0 idle in slurmctld (scale-out {scale_out})",
            )
            assert node["partitions"] == ["batch"]
            assert node["features"] == ["burst"]
        finally:
            status, body = deployed.request(
                "PATCH", scale, {"spec": {"replicas": 0}}, content_type=merge
            )
            assert status == 200, body
        wait_until(
            lambda: let_go(slurm_nodes(slurm).get("burst-0")),
            SLURM_DEADLINE_S,
            "burst-0 to leave Slurm after scaling to 0",
        )
    # A re-run of site.yml leaves the count to KEDA: nothing to change.
    run = run_playbook(SITE, LAB_INVENTORY)
    assert not run.failed, run.failures()
    assert run.changed == 0, run.changed_tasks()


class UnreachableWebhook:
    """A validating webhook for Slinky's objects in the slurm namespace that the apiserver
    cannot call (an address bound but not listening: connection refused), as Slinky's is
    while its pod restarts; gone once it has refused an upgrade of the Slurm release."""

    NAME = "hpcops-test-unreachable"

    def __init__(self, lab: t.Any) -> None:
        self.lab = lab
        self.port = socket.socket()
        self.port.bind(("127.0.0.1", 0))
        self.revisions_refused = 0
        self.stop = threading.Event()
        self.watcher = threading.Thread(target=self._remove_after_a_refusal, daemon=True)

    def __enter__(self) -> UnreachableWebhook:
        url = f"https://127.0.0.1:{self.port.getsockname()[1]}/validate"
        self.lab.apply(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": self.NAME},
                "webhooks": [
                    {
                        "name": "unreachable.hpcops.test",
                        "clientConfig": {"url": url},
                        "rules": [
                            {
                                "apiGroups": ["slinky.slurm.net"],
                                "apiVersions": ["*"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["*"],
                            }
                        ],
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}
                        },
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 5,
                    }
                ],
            },
        )
        self.watcher.start()
        return self

    def revision(self) -> int:
        secrets = self.lab.get(
            f"/api/v1/namespaces/{NAMESPACE}/secrets?labelSelector=owner%3Dhelm%2Cname%3Dslurm"
        )["items"]
        return max(int(s["metadata"]["labels"]["version"]) for s in secrets)

    def _remove_after_a_refusal(self) -> None:
        # A refused upgrade is a revision that failed, then superseded by the atomic
        # rollback's: two revisions more than before.
        before = self.revision()
        while not self.stop.wait(0.5):
            self.revisions_refused = self.revision() - before - 1
            if self.revisions_refused > 0:
                break
        self.remove()

    def remove(self) -> None:
        self.lab.request(
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{self.NAME}",
        )

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.watcher.join()
        self.remove()
        self.port.close()


def test_a_changed_setting_reaches_the_running_slurmctld(
    deployed: t.Any, slurm: SlinkyRest
) -> None:
    # The operator rewrites slurm.conf. Slinky 1.1: the controller pod's reconfigure (the pod
    # runner, as the chart's sidecar) makes the running slurmctld read it, with no restart.
    # 1.2 with inplaceReconfigure false (the role's choice): the slurmctld pod is recreated.
    # The change goes in while a webhook for Slinky's objects cannot be called, as Slinky's
    # own while its pod restarts: the refused upgrade is undone and asked again.
    def backfill_grace() -> int | None:
        status, body = slurm.request("GET", f"/slurm/{slurm.api}/partitions")
        if status == 502 and LAB_RUNS_1_2:
            return None  # slurmrestd is up, slurmctld is being recreated
        assert status == 200, body
        partitions = {p["name"]: p for p in body["partitions"]}
        return int(partitions["backfill"]["grace_time"])

    assert backfill_grace() == 30
    changed = {
        "slurm_cluster_backfill": {"max_time": "4:00:00", "grace_time_s": 45, "priority_tier": 1}
    }
    try:
        with UnreachableWebhook(deployed) as webhook:
            run = run_playbook(SITE, LAB_INVENTORY, extra_vars=changed)
        assert not run.failed, run.failures()
        assert webhook.revisions_refused > 0, "the webhook never refused the upgrade"
        (install,) = run.task_results("hpcops.slinky.slurm_cluster : Install the Slurm cluster")
        assert install["attempts"] >= 2, install
        assert run.changed > 0
        wait_until(lambda: backfill_grace() == 45, SLURM_DEADLINE_S, "GraceTime=45 in slurmctld")
    finally:
        run = run_playbook(SITE, LAB_INVENTORY)
        assert not run.failed, run.failures()
    wait_until(lambda: backfill_grace() == 30, SLURM_DEADLINE_S, "GraceTime=30 back in slurmctld")
