# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's interactive pool as the handover tests see it, and its fixtures.

The pool is int01, int02 (lendable) and gpu01, gpu02 (never-touch in the lab: their kwok
nodes have no GPUs for slurmd's GRES); svc01 runs the services and is outside the pool.
``clean_pool`` starts and ends each test with the pool free and clean.  Test modules load
the fixtures with ``pytest_plugins = ["k8s_fixtures", "handover_pool"]``.
"""

from __future__ import annotations

import json
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_runner import LAB_INVENTORY, REPO, run_playbook, run_task
from k8s_lab import K8sLab
from slurm_pods import REST_ADDRESS, SlinkyRest
from toolbox import LabError, wait_until

LENDABLE = ("int01", "int02")
APPS = "jupyterhub"
MERGE = "application/merge-patch+json"
JOURNAL = "hpcops.io/handover"
LEND_LABEL = "hpcops.io/slurm-lent"
TAINT = "hpcops.io/lent"
FAULT_EXIT = 75  # node_handover's exit when a test stops it after a step
PLAYBOOKS = REPO / "playbooks"
# Lab policy: nothing waits for idle time or cool-down, and no headroom unless a test says.
POLICY = {
    "never_touch_selector": {"nvidia.com/gpu.present": "true"},
    "lend_min_idle_s": 0,
    "relend_cooldown_s": 0,
    "headroom": 0,
    "partitions": {"backfill": {"grace_s": 60, "escalation": "requeue"}},
}


class Pool:
    """The lab's pool as the tests see it: Nodes, pods, Slurm, and the playbooks."""

    def __init__(self, lab: K8sLab, slurm: SlinkyRest, key_path: Path) -> None:
        self.lab = lab
        self.slurm = slurm
        self.key_path = key_path

    # -- playbooks and the module ----------------------------------------------------

    def playbook(self, name: str, *, check: bool = False, **extra: t.Any) -> t.Any:
        extra.setdefault("handover_policy", POLICY)
        run = run_playbook(PLAYBOOKS / f"{name}.yml", LAB_INVENTORY, extra_vars=extra, check=check)
        assert self.slurm.token() not in run.output
        return run

    def handover(self, action: str, nodes: list[str], fault: str = "", **args: t.Any) -> t.Any:
        """node_handover on its own (with a fault injected after a step, if asked)."""
        return run_task(
            "hpcops.slinky.node_handover",
            {
                "action": action,
                "nodes": nodes,
                "url": f"http://{REST_ADDRESS}",
                "jwt_key_path": str(self.key_path),
                "kubeconfig": str(self.lab.kubeconfig_path),
                "policy": {"pool_selector": {"hpcops.io/pool": "interactive"}, **POLICY},
                **args,
            },
            # A run stopped on purpose exits without removing its module's payload from
            # TMPDIR: keep it in the test's own directory, not in /tmp.
            env={"HPCOPS_HANDOVER_FAULT": fault, "TMPDIR": str(self.key_path.parent)}
            if fault
            else None,
        )

    # -- Kubernetes ------------------------------------------------------------------

    def node(self, name: str) -> dict[str, t.Any]:
        return self.lab.get(f"/api/v1/nodes/{name}")

    def journal(self, name: str) -> dict[str, t.Any]:
        text = (self.node(name)["metadata"].get("annotations") or {}).get(JOURNAL)
        return json.loads(text) if text else {"state": "free"}

    def marks(self, name: str) -> tuple[bool, bool]:
        """(lend label, lent taint) on the Node."""
        node = self.node(name)
        label = (node["metadata"].get("labels") or {}).get(LEND_LABEL) == "true"
        taint = any(t_["key"] == TAINT for t_ in node["spec"].get("taints") or [])
        return label, taint

    def wait_ready(self, name: str) -> None:
        """Until the Node is Ready (a Node applied again: kwok marks it Ready)."""
        wait_until(
            lambda: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in self.node(name)["status"].get("conditions") or []
            ),
            60,
            f"{name} to be Ready again",
        )

    def events(self, name: str) -> list[str]:
        items = self.lab.get(
            "/api/v1/namespaces/default/events"
            f"?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3D{name}"
        )["items"]
        # creationTimestamp has whole seconds: two Events of one step share it, and etcd's
        # revision (never updated here) orders them as they were written.
        return [
            e["reason"]
            for e in sorted(
                items,
                key=lambda e: (
                    e["metadata"]["creationTimestamp"],
                    int(e["metadata"]["resourceVersion"]),
                ),
            )
            if e["reason"].startswith("Handover")
        ]

    def slurmd_pods(self, name: str) -> list[str]:
        pods = self.lab.get(f"/api/v1/namespaces/slurm/pods?fieldSelector=spec.nodeName%3D{name}")
        return [p["metadata"]["name"] for p in pods["items"]]

    def slurmd_ready(self, name: str) -> bool:
        """A slurmd pod on the node is Ready: its slurmd answers the chart's readiness probe
        (the lab's pod runner probes it as a kubelet does), so it has registered with Slurm."""
        return self.slurmd_condition(name, "Ready")

    def slurmd_condition(self, name: str, condition: str) -> bool:
        """A slurmd pod on the node, not terminating, has this pod condition True."""
        pods = self.lab.get(
            f"/api/v1/namespaces/slurm/pods?fieldSelector=spec.nodeName%3D{name}"
            "&labelSelector=app.kubernetes.io%2Fname%3Dslurmd"
        )["items"]
        return any(
            c["type"] == condition and c["status"] == "True"
            for pod in pods
            if not pod["metadata"].get("deletionTimestamp")
            for c in pod["status"].get("conditions") or []
        )

    def app_pod(
        self,
        name: str,
        node_selector: dict[str, str],
        *,
        cpu: str = "16",
        memory: str = "8Gi",
        node: str = "",
        tolerate_lent: bool = False,
    ) -> None:
        spec: dict[str, t.Any] = {
            "nodeSelector": node_selector,
            # CPU notebooks: never on the GPU nodes.
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/base-notebook:latest",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        }
        if node:
            spec["nodeName"] = node  # bound as the scheduler would bind it
        if tolerate_lent:  # a workload that (wrongly) tolerates every taint of ours
            spec["tolerations"] = [{"key": TAINT, "operator": "Exists"}]
        self.lab.apply(
            f"/api/v1/namespaces/{APPS}/pods",
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec},
        )

    def pod(self, name: str) -> dict[str, t.Any]:
        return self.lab.get(f"/api/v1/namespaces/{APPS}/pods/{name}")

    def running_on(self, name: str) -> str:
        pod = self.pod(name)
        return pod["spec"].get("nodeName", "") if pod["status"].get("phase") == "Running" else ""

    # -- Slurm -----------------------------------------------------------------------

    def slurm_node(self, name: str) -> dict[str, t.Any] | None:
        nodes = {n["name"]: n for n in self.slurm.get("nodes")["nodes"]}
        return nodes.get(name)

    def idle_slurm_node(self, name: str) -> dict[str, t.Any]:
        """The lent node's Slurm node once it is IDLE, to Slurm and to the Slinky operator.

        The operator deletes a healthy slurmd pod whose node its cached view of Slurm lacks
        ("Slurm node is not registered"). Under load that view can lag the registration by
        seconds: the pod is replaced, its preStop marks the node DOWN, and a job started
        meanwhile is requeued. The operator writes what it sees on the pod as conditions
        (SlurmNodeStateIdle), so a test's job waits for those too."""
        found: dict[str, t.Any] = {}

        def idle() -> bool:
            found.clear()
            found.update(self.slurm_node(name) or {"state": []})
            return "IDLE" in found["state"] and self.operator_sees_idle(name)

        wait_until(
            idle,
            60,
            f"Slurm node {name} to be IDLE, and the Slinky operator to see it",
            lambda: {
                "slurm": "+".join(found.get("state", [])) or "not registered",
                "reason": found.get("reason"),
                "operator sees idle": self.operator_sees_idle(name),
                "slurmd pods": self.slurmd_pods(name),
            },
        )
        return found

    def pods_the_operator_replaced(self) -> list[str]:
        """What the Slinky operator's SlurmNodeNotRegistered Events say it deleted: for the
        message of an assertion on a job that was requeued."""
        events = self.lab.get(
            "/api/v1/namespaces/slurm/events?fieldSelector=reason%3DSlurmNodeNotRegistered"
        )["items"]
        return [f"{e['lastTimestamp'] or e['eventTime']}: {e['message']}" for e in events]

    def operator_sees_idle(self, name: str) -> bool:
        """The Slinky operator's condition SlurmNodeStateIdle on the slurmd pod of `name`."""
        return self.slurmd_condition(name, "SlurmNodeStateIdle")

    def submit(self, node: str | None, seconds: int, *, partition: str = "backfill") -> int:
        """A requeue-able job in `partition` that runs on `node` (named in the job), or
        wherever Slurm puts it (node None), once it runs.

        In this lab the operator may replace a lent node's slurmd pod just after the job
        started (kwok marks pods Ready before slurmd registers: docs/lab.md), and Slurm
        requeues the job with a begin time minutes away. Such a job is cancelled and the job
        submitted once more, on the node as the operator sees it idle again."""
        job_id = self._submit(node, seconds, partition)
        try:
            self._wait_running(job_id)
        except LabError:
            if self.job(job_id).get("state_reason") != "BeginTime":
                raise
            self.slurm.request("DELETE", f"/slurm/{self.slurm.api}/job/{job_id}")
            if node:
                self.idle_slurm_node(node)
            job_id = self._submit(node, seconds, partition)
            self._wait_running(job_id)
        if node:
            assert self.job(job_id)["nodes"] == node
        return job_id

    def _wait_running(self, job_id: int) -> None:
        wait_until(
            lambda: "RUNNING" in self.job(job_id)["job_state"],
            30,
            f"job {job_id} runs",
            lambda: {k: self.job(job_id).get(k) for k in ("job_state", "state_reason", "nodes")},
        )

    def _submit(self, node: str | None, seconds: int, partition: str) -> int:
        status, body = self.slurm.request(
            "POST",
            f"/slurm/{self.slurm.api}/job/submit",
            {
                "job": {
                    "name": f"{partition}-{seconds}s",
                    "partition": partition,
                    **({"required_nodes": [node]} if node else {}),
                    "requeue": True,
                    "current_working_directory": "/tmp",
                    "environment": ["PATH=/usr/bin:/bin"],
                    "script": f"#!/bin/sh\nsleep {seconds}\n",
                }
            },
            user="alice",
        )
        assert status == 200 and not body.get("errors"), body
        return int(body["job_id"])

    def queue(self, *, user: str = "alice", **job: t.Any) -> int:
        """A job of user in backfill (fields of job_desc override), left pending: submit()
        waits for its job to run."""
        status, body = self.slurm.request(
            "POST",
            f"/slurm/{self.slurm.api}/job/submit",
            {
                "job": {
                    "name": "pending",
                    "partition": "backfill",
                    "current_working_directory": "/tmp",
                    "environment": ["PATH=/usr/bin:/bin"],
                    "script": "#!/bin/sh\nsleep 600\n",
                    **job,
                }
            },
            user=user,
        )
        assert status == 200 and not body.get("errors"), body
        return int(body["job_id"])

    def job(self, job_id: int) -> dict[str, t.Any]:
        job: dict[str, t.Any] = self.slurm.get(f"job/{job_id}")["jobs"][0]
        return job

    # -- a clean pool ----------------------------------------------------------------

    def assert_clean(self, name: str) -> None:
        """Nothing of a handover left on the node: journal free, no mark, no slurmd, no
        Slurm node (DOWN or otherwise)."""
        assert self.journal(name)["state"] == "free", self.journal(name)
        assert not self.node(name)["spec"].get("unschedulable")
        assert self.marks(name) == (False, False)
        assert self.slurmd_pods(name) == []
        assert self.slurm_node(name) is None

    def is_clean(self, name: str) -> bool:
        """assert_clean's conditions, as a question: nothing of a handover on the node."""
        return (
            self.journal(name)["state"] == "free"
            and not self.node(name)["spec"].get("unschedulable")
            and self.marks(name) == (False, False)
            and not self.slurmd_pods(name)
            and self.slurm_node(name) is None
        )

    def reset(self) -> None:
        for job in self.slurm.get("jobs")["jobs"]:
            if job["partition"] == "backfill" and not {"COMPLETED", "CANCELLED"} & set(
                job["job_state"]
            ):
                self.slurm.request("DELETE", f"/slurm/{self.slurm.api}/job/{job['job_id']}")
        for pod in self.lab.get(f"/api/v1/namespaces/{APPS}/pods")["items"]:
            self.lab.request(
                "DELETE",
                f"/api/v1/namespaces/{APPS}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0",
            )
        wait_until(
            lambda: not self.lab.get(f"/api/v1/namespaces/{APPS}/pods")["items"],
            30,
            "the application pods to go",
            lambda: [
                p["metadata"]["name"]
                for p in self.lab.get(f"/api/v1/namespaces/{APPS}/pods")["items"]
            ],
        )
        # Finish what a test left (a blocked or crashed run), then give every node back:
        # two module runs (seconds each), only when some node is not clean already (most
        # tests give their nodes back, and the reset after one test is the next one's too).
        if not all(self.is_clean(name) for name in LENDABLE):
            run = self.handover("resume", list(LENDABLE))
            assert not run.failed, run
            run = self.handover("reclaim", list(LENDABLE))
            assert not run.failed, run
            # A record no lent node stands for (a test that deleted a lent Node): its jobs
            # are cancelled above, so the clean-up removes it at once.
            orphans = [name for name in LENDABLE if self.slurm_node(name) is not None]
            if orphans:
                run = self.handover("clean_orphans", orphans)
                assert not run.failed, run
        # The Events of earlier tests would muddle what the next test reads.
        status, body = self.lab.request(
            "DELETE",
            "/api/v1/namespaces/default/events?fieldSelector=reportingComponent%3Dhpcops.io%2Fhandover",
        )
        assert status == 200, body
        for name in LENDABLE:
            # A node given back cordoned (an admin's drain) is uncordoned, as its admin would.
            self.lab.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                {"metadata": {"annotations": {JOURNAL: None}}, "spec": {"unschedulable": None}},
                content_type=MERGE,
            )
            self.assert_clean(name)


@pytest.fixture(scope="module")
def pool(slinky_site: K8sLab, slinky_slurm: SlinkyRest, secret_dirs: t.Any) -> Iterator[Pool]:
    with secret_dirs("handover") as keys:  # the key goes with the fixture (tests/conftest.py)
        yield keyed_pool(slinky_site, slinky_slurm, keys)


def keyed_pool(lab: K8sLab, rest: SlinkyRest, keys: Path) -> Pool:
    """The pool, its runs minting tokens from the cluster's JWT key written into `keys` (a
    secret_dir, so the key goes with it), and the applications' namespace made."""
    key = keys / "jwt.key"
    key.write_bytes(rest.jwt_key)
    key.chmod(0o600)
    lab.apply(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APPS}},
    )
    return Pool(lab, rest, key)


@pytest.fixture
def clean_pool(pool: Pool) -> Iterator[Pool]:
    pool.reset()
    yield pool
    pool.reset()
