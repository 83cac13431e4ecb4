# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Giving a node back on real kubelets: the seeds' PriorityClass recipe against the protocol.

    HPCOPS_KIND_IMAGES=local molecule converge -s handover    # the kind cluster, site.yml
    .venv/bin/python benchmarks/handover_kind.py [--trials 5] [--cap 60] [--cases events]
    HPCOPS_KIND_IMAGES=local molecule destroy -s handover   # as converged: the local images

Runs on the kind cluster of the handover scenario: real kubelets and containerd, the Slinky
operator, slurmd containers and real Slurm jobs (`tests/lab` runs the same comparison on
kwok nodes, where a deleted pod stops within a tenth of a second: benchmarks/handover_reclaim.py).
One interactive worker is the bench node; the script leaves it free as it found it.

* recipe (the seeds, 000_458bb9982460f3bb.txt): the lendable NodeSet's slurmd pods get a
  PriorityClass below the default and a required anti-affinity against application pods;
  the bench node carries the NodeSet's label and no taint, so the NodeSet's controller
  re-creates its slurmd pod whenever it goes. Each trial runs a requeue-able Slurm job on
  the node, then creates an application pod (default priority, anti-affinity against the
  slurmd pods, CPU requests that cannot share the node with slurmd's) that only the bench
  node can run: seconds until it runs (capped), slurmd pods evicted meanwhile, whether the
  two ever ran on the node at once, the job interrupted (killed without grace) or requeued.
* protocol: the node lent and reclaimed with node_handover's code (in this process, no
  Ansible start-up); the application pod waits for it (the taint). The node stays lent
  --settle seconds (its slurmd pod Ready) before the reclaim. Idle node: seconds from the
  start of the reclaim until the application pod runs. Busy node: the same with a job
  running and a grace of --grace seconds, after which the policy requeues it.

* events (--event-trials): the collection's rulebook (ansible-rulebook, hpcops.slinky.handover)
  run here on the kind inventory, as the handover_schedule role's event kind runs it in a
  pod; both interactive workers lent, an application pod for the pool created: seconds until
  it runs, through the demand event, rebalance.yml and its reclaim (as
  benchmarks/handover_events.py measures it in the lab).

Targets (issue 41, on kind): an idle lent node back in the application's hands in 2 s or
less (p95); event-driven, application pod created to Running in 5 s or less (p95); a busy
node back in its grace + 3 s or less (p95); no application pod ever running beside a slurmd
pod (every trial watches for it, and the overlaps are counted and printed); and no job killed
without grace unless the policy says so.

The recipe leaves a mess the protocol does not (the teardown of a run on 2026-11-27 found a
killed job COMPLETING, so slurmrestd refused to delete the node with HTTP 422, and the
re-created slurmd pod hung in Init:ContainerStatusUnknown). Its teardown therefore cleans up
within a bound: cancels the bench's jobs, waits out COMPLETING ones (and after a while sets
the node DOWN, which makes slurmctld let them go), force-deletes slurmd pods that hang (grace
0), retries the node's deletion until Slurm lets it go; then says what it cleaned and what it
could not. A case that fails is a row of the table with its reason; the other cases still run.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import typing as t
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO / ".build" / "collections", REPO / "tests" / "lab", REPO / "benchmarks"):
    sys.path.insert(0, str(path))

from _common import figure, percentile, ratio, reason, summary, table, within  # noqa: E402
from toolbox import LabError, wait_until  # noqa: E402

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.executor import (  # noqa: E402
    Handover,
    Settings,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import (  # noqa: E402
    NODESET_API,
    KubernetesCalls,
    lendable_nodesets,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (  # noqa: E402
    PartitionPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (  # noqa: E402
    HandoverMarkers,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (  # noqa: E402
    get_object,
    kubernetes_client,
    list_objects,
    patch_object,
    write_object,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (  # noqa: E402
    Connection,
    SlurmRestClient,
    SlurmRestError,
    mint_token,
    normalize_job,
)

KIND_DIR = Path(os.environ.get("HPCOPS_KIND_DIR", REPO / ".kind"))
SLURM_NAMESPACE = "slurm"
APPS = "bench"
PRIORITY_CLASS = "bench-slurmd-low"
PARTITION = "backfill"
SLURMD_CPU = "1200m"  # with the application's, more than a kind node has: they cannot share
APP_CPU = "1200m"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY"}
# Jobs a teardown cancels (COMPLETING is a flag beside one of the ended states: waited out).
S = t.TypeVar("S")  # what a case's set-up makes
ACTIVE_JOBS = {"PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "CONFIGURING", "RESIZING"}
# Issue 41's targets on kind, at p95 (the busy node's: its grace and this much more).
TARGET_IDLE_S = 2.0
TARGET_EVENTS_S = 5.0
TARGET_BUSY_ABOVE_GRACE_S = 3.0
WATCH_AFTER_S = 5.0  # a protocol trial watches this long after its pod runs: slurmd beside it?
TEARDOWN_BOUND_S = 240.0  # the recipe's teardown gives up (and says what is left) after this
TEARDOWN_PATIENCE_S = 45.0  # a slurmd pod or COMPLETING job waited for at most this, then forced


@dataclass
class Trial:
    seconds: float
    ran: bool
    evictions: int = 0
    together: bool = False  # an application pod seen running beside a slurmd pod (an overlap)
    killed: int = 0  # jobs whose run ended before their end, without a grace
    requeued: int = 0
    notes: list[str] = field(default_factory=list)


class Cluster:
    """The kind cluster: Kubernetes through kubernetes.core's client, Slurm through slurmrestd."""

    def __init__(self, kubeconfig: Path) -> None:
        self.client = kubernetes_client(str(kubeconfig))
        self.kube = KubernetesCalls(self.client)
        key = self.secret(SLURM_NAMESPACE, "slurm-jwt-key")["jwt_hs256.key"]
        url = self.slurmrestd_url()
        self.slurm = SlurmRestClient(Connection(url=url, token=mint_token(key, "root", 7200)))
        # root may act for a user: the jobs run as alice, as in the scenario's checks.
        self.jobs = SlurmRestClient(
            Connection(url=url, token=mint_token(key, "root", 7200), user="alice")
        )
        self.submitted: list[int] = []  # every job the bench submitted: a teardown's to settle

    def secret(self, namespace: str, name: str) -> dict[str, bytes]:
        found = get_object(self.client, "v1", "Secret", name, namespace)
        if not found:
            raise LabError(f"no Secret {namespace}/{name}: is the site deployed?")
        return {k: base64.b64decode(v) for k, v in found["data"].items()}

    def slurmrestd_url(self) -> str:
        """The restapi Service's node port on the control plane (as inventories/kind has it)."""
        service = get_object(self.client, "v1", "Service", "slurm-restapi", SLURM_NAMESPACE)
        if not service:
            raise LabError("no slurm-restapi Service: run `molecule converge -s handover`")
        nodes = list_objects(
            self.client, "v1", "Node", label_selector="node-role.kubernetes.io/control-plane"
        )
        address = next(
            a["address"] for a in nodes[0]["status"]["addresses"] if a["type"] == "InternalIP"
        )
        return f"http://{address}:{service['spec']['ports'][0]['nodePort']}"

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete at once (no grace: the bench's own objects)."""
        resource = self.client.resource(kind, api_version)
        self.client.delete(resource, name=name, namespace=namespace, body={"gracePeriodSeconds": 0})

    # -- pods ------------------------------------------------------------------------------

    def pods(self, namespace: str, node: str) -> list[dict[str, t.Any]]:
        return list_objects(
            self.client, "v1", "Pod", namespace=namespace, field_selector=f"spec.nodeName={node}"
        )

    def slurmd_pods(self, node: str) -> list[dict[str, t.Any]]:
        return [
            p
            for p in self.pods(SLURM_NAMESPACE, node)
            if any(o["kind"] == "NodeSet" for o in p["metadata"].get("ownerReferences") or [])
        ]

    def app_pod(self, name: str, node: str, anti_affinity: bool, pool: str = "") -> None:
        """An application pod for `node`, or (none given) for any node of the pool."""
        selector = {"hpcops.io/pool": pool} if pool else {"kubernetes.io/hostname": node}
        spec: dict[str, t.Any] = {
            "nodeSelector": selector,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "notebook",
                    "image": self.app_image(),
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": APP_CPU}},
                }
            ],
        }
        if anti_affinity:  # as the seeds: never with a slurmd pod
            spec["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "slurmd"}},
                            "namespaces": [SLURM_NAMESPACE],
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        write_object(
            self.client,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": APPS, "labels": {"app": "notebook"}},
                "spec": spec,
            },
            create=True,
        )

    def app_image(self) -> str:
        """The log sidecar's image: one every node has, whatever the image source."""
        for pod in list_objects(self.client, "v1", "Pod", namespace=SLURM_NAMESPACE):
            spec = pod["spec"]
            for container in (spec.get("initContainers") or []) + spec["containers"]:
                if container["name"] == "logfile":
                    return str(container["image"])
        raise LabError("no log sidecar to take an image from")

    def app_running(self, name: str) -> bool:
        pod = get_object(self.client, "v1", "Pod", name, APPS)
        return bool(pod) and pod["status"].get("phase") == "Running"

    def beside_slurmd(self, name: str) -> bool:
        """Whether the application pod runs on a node where a slurmd pod runs too."""
        pod = get_object(self.client, "v1", "Pod", name, APPS)
        node = (pod or {}).get("spec", {}).get("nodeName")
        if not pod or not node or pod["status"].get("phase") != "Running":
            return False
        return any(running(slurmd) for slurmd in self.slurmd_pods(node))

    def force_delete(self, namespace: str, name: str) -> None:
        """Delete a pod with grace 0: the kubelet that should confirm its end may never do."""
        self.delete("v1", "Pod", name, namespace)

    def delete_apps(self) -> None:
        for pod in list_objects(self.client, "v1", "Pod", namespace=APPS):
            self.delete("v1", "Pod", pod["metadata"]["name"], APPS)
        wait_until(
            lambda: not list_objects(self.client, "v1", "Pod", namespace=APPS),
            60,
            "the application pods to go",
        )

    # -- Slurm -----------------------------------------------------------------------------

    def submit(self, node: str, seconds: int) -> int:
        body = {
            "job": {
                "name": "bench",
                "partition": PARTITION,
                "cpus_per_task": 1,
                "memory_per_node": {"set": True, "number": 64},
                "requeue": True,
                "current_working_directory": "/",
                "standard_output": "/dev/null",
                "environment": ["PATH=/usr/bin:/bin"],
                "script": f"#!/bin/bash\nsleep {seconds}\n",
            }
        }
        answer = self.jobs.request("POST", f"/slurm/{self.jobs.api_version}/job/submit", body=body)
        job_id = int(answer["job_id"])
        self.submitted.append(job_id)
        wait_until(
            lambda: "RUNNING" in self.job(job_id)["job_state"], 60, f"job {job_id} to run on {node}"
        )
        return job_id

    def job(self, job_id: int) -> dict[str, t.Any]:
        answer = self.slurm.request("GET", f"/slurm/{self.slurm.api_version}/job/{job_id}")
        found: dict[str, t.Any] = answer["jobs"][0]
        return found

    def slurm_job(self, job_id: int) -> dict[str, t.Any]:
        """The job, normalised (state and state_flags)."""
        answer = self.slurm.request("GET", f"/slurm/{self.slurm.api_version}/job/{job_id}")
        return normalize_job(answer["jobs"][0])

    def cancel(self, job_id: int) -> None:
        with contextlib.suppress(SlurmRestError):  # ended already
            self.slurm.request("DELETE", f"/slurm/{self.slurm.api_version}/job/{job_id}")

    def job_outcome(self, job_id: int, trial: Trial) -> None:
        """Count a job interrupted (killed without grace) or requeued during the trial."""
        record = self.job(job_id)
        states = set(record["job_state"])
        if record.get("restart_cnt", 0) > 0:
            trial.killed += 1
            trial.requeued += 1
        elif states & ENDED:
            trial.killed += 1
            trial.notes.append(f"job {job_id} {'+'.join(sorted(states))}")
        self.cancel(job_id)


@dataclass
class Cleanup:
    """What a teardown cleaned and what it could not (each a line of the report)."""

    cleaned: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    def step(self, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as err:  # noqa: BLE001 (reported; the teardown goes on)
            self.left.append(f"{what}: {reason(err)}")
        else:
            self.cleaned.append(what)

    def report(self) -> str:
        cleaned = "; ".join(self.cleaned) or "nothing"
        left = "; ".join(self.left) or "nothing"
        return f"teardown cleaned: {cleaned}. Left: {left}"


def running(pod: dict[str, t.Any]) -> bool:
    """Whether a container of the pod may still run: its kubelet has not written a terminal
    phase and reports a container (a sidecar too) running. Terminating is still running."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    containers = (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or []
    )
    return any("running" in (container.get("state") or {}) for container in containers)


def pod_hung(pod: dict[str, t.Any]) -> bool:
    """A pod no kubelet will finish: a container whose status the kubelet lost
    (ContainerStatusUnknown, shown as Init:ContainerStatusUnknown for an init container),
    or a phase of Failed or Unknown."""
    if pod.get("status", {}).get("phase") in ("Failed", "Unknown"):
        return True
    status = pod.get("status") or {}
    for container in (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or []
    ):
        for state in (container.get("state") or {}).values():
            if (state or {}).get("reason") == "ContainerStatusUnknown":
                return True
    return False


def job_completing(job: dict[str, t.Any]) -> bool:
    return job["state"] == "COMPLETING" or "COMPLETING" in job.get("state_flags", [])


def next_steps(
    pods: list[dict[str, t.Any]],
    jobs: list[dict[str, t.Any]],
    slurm_node: dict[str, t.Any] | None,
    waited_s: float,
    patience_s: float = TEARDOWN_PATIENCE_S,
) -> list[tuple[str, str]]:
    """What a teardown does next about the bench node, as (action, target); [] when clean.

    pods: the slurmd pods meant for the node; jobs: the bench's jobs (normalised); the Slurm
    node or None; waited_s: how long the teardown has been at it. Actions: `wait pod` (its
    NodeSet's controller deletes it), `force-delete pod` (hung, or waited for too long),
    `cancel job`, `wait job` (COMPLETING), `down node` (jobs still COMPLETING after the
    patience: slurmctld lets them go on a DOWN node) and `delete node`.
    """
    patient = waited_s < patience_s
    steps: list[tuple[str, str]] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        steps.append(("wait pod" if patient and not pod_hung(pod) else "force-delete pod", name))
    completing = []
    for job in jobs:
        job_id = str(job["job_id"])
        if job_completing(job):
            completing.append(job_id)
        elif job["state"] in ACTIVE_JOBS:
            steps.append(("cancel job", job_id))
    if slurm_node is None:
        return steps  # a COMPLETING job without its node holds nothing of the bench's
    name = str(slurm_node["name"])
    if completing and patient:
        return steps + [("wait job", job_id) for job_id in completing]
    if completing and slurm_node["state"] != "DOWN":
        steps.append(("down node", name))
    return [*steps, ("delete node", name)]


WAITS = ("wait pod", "wait job")


def settle(
    cluster: Cluster,
    node: str,
    pods: Callable[[], list[dict[str, t.Any]]],
    cleanup: Cleanup,
    bound_s: float = TEARDOWN_BOUND_S,
) -> None:
    """Act on next_steps until the node is clean or bound_s has passed; record in `cleanup`
    what was done and, at the bound, what is left with the last error of each action."""
    started = time.monotonic()
    errors: dict[tuple[str, str], str] = {}
    done: set[tuple[str, str]] = set()
    while True:
        waited = time.monotonic() - started
        try:
            steps = next_steps(
                pods(), bench_jobs(cluster, cluster.submitted), cluster.slurm.node(node), waited
            )
        except Exception as err:  # noqa: BLE001 (the cluster did not answer: try again)
            steps = [("read the node's state", node)]
            errors[steps[0]] = reason(err)
        if not steps:
            return
        if waited > bound_s:
            cleanup.left += [
                f"{action} {target}"
                + (f" ({errors[(action, target)]})" if (action, target) in errors else "")
                for action, target in steps
            ]
            return
        for step in steps:
            action, target = step
            try:
                perform(cluster, action, target)
            except Exception as err:  # noqa: BLE001 (retried next round, reported at the bound)
                errors[step] = reason(err)
                continue
            errors.pop(step, None)
            if action not in WAITS and step not in done:
                done.add(step)
                cleanup.cleaned.append(f"{action} {target}")
        time.sleep(2)


def bench_jobs(cluster: Cluster, job_ids: Iterable[int]) -> list[dict[str, t.Any]]:
    """The bench's jobs Slurm still knows (a job long ended may be purged)."""
    found = []
    for job_id in job_ids:
        try:
            found.append(cluster.slurm_job(job_id))
        except SlurmRestError:
            continue
    return found


def perform(cluster: Cluster, action: str, target: str) -> None:
    if action == "force-delete pod":
        cluster.force_delete(SLURM_NAMESPACE, target)
    elif action == "cancel job":
        cluster.cancel(int(target))
    elif action == "down node":
        cluster.slurm.update_node(
            target, {"state": ["DOWN"], "reason": "hpcops bench: recipe teardown"}
        )
    elif action == "delete node":
        cluster.slurm.delete_node(target)  # HTTP 422 while a job is COMPLETING: retried


class Recipe:
    """The seeds' recipe on one node: a low PriorityClass and anti-affinity, no protocol."""

    def __init__(self, cluster: Cluster, node: str) -> None:
        self.cluster = cluster
        self.node = node
        markers = HandoverMarkers()
        found = lendable_nodesets(cluster.client, markers.lend_label, markers.lend_label_value)
        if not found:
            raise LabError("no lendable NodeSet: run `molecule converge -s handover`")
        self.nodeset = found[0]
        self.saved = copy.deepcopy(self.nodeset["spec"])
        self.label = markers.lend_label

    def patch_nodeset(self, spec: dict[str, t.Any]) -> None:
        meta = self.nodeset["metadata"]
        patch_object(
            self.cluster.client,
            NODESET_API,
            "NodeSet",
            meta["name"],
            {"spec": spec},
            meta["namespace"],
        )

    def up(self) -> None:
        if get_object(self.cluster.client, "scheduling.k8s.io/v1", "PriorityClass", PRIORITY_CLASS):
            self.cluster.delete("scheduling.k8s.io/v1", "PriorityClass", PRIORITY_CLASS)
        write_object(
            self.cluster.client,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": PRIORITY_CLASS},
                "value": -1,
                "description": "slurmd pods that applications should preempt (the seeds' recipe)",
            },
            create=True,
        )
        self.patch_nodeset(
            {
                "template": {
                    "spec": {
                        "priorityClassName": PRIORITY_CLASS,
                        "affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "labelSelector": {"matchLabels": {"app": "notebook"}},
                                        "namespaces": [APPS],
                                        "topologyKey": "kubernetes.io/hostname",
                                    }
                                ]
                            }
                        },
                    }
                },
                "slurmd": {"resources": {"requests": {"cpu": SLURMD_CPU}}},
            }
        )
        patch_object(
            self.cluster.client,
            "v1",
            "Node",
            self.node,
            {"metadata": {"labels": {self.label: "true"}}},
        )

    def down(self) -> Cleanup:
        """Undo up() and clean what the trials left; never raises: says what it could not."""
        cleanup = Cleanup()
        cleanup.step(
            f"label {self.label} removed from {self.node}",
            lambda: patch_object(
                self.cluster.client,
                "v1",
                "Node",
                self.node,
                {"metadata": {"labels": {self.label: None}}},
            ),
        )
        # A merge patch of what up() added, with the values of before (None removes a key).
        pod_spec = (self.saved.get("template") or {}).get("spec") or {}
        slurmd = self.saved.get("slurmd") or {}
        cleanup.step(
            "NodeSet spec restored",
            lambda: self.patch_nodeset(
                {
                    "template": {
                        "spec": {
                            "priorityClassName": pod_spec.get("priorityClassName"),
                            "affinity": pod_spec.get("affinity"),
                        }
                    },
                    "slurmd": {"resources": slurmd.get("resources")},
                }
            ),
        )
        settle(self.cluster, self.node, self.nodeset_pods, cleanup)
        cleanup.step(
            f"PriorityClass {PRIORITY_CLASS} deleted",
            lambda: (
                get_object(
                    self.cluster.client, "scheduling.k8s.io/v1", "PriorityClass", PRIORITY_CLASS
                )
                and self.cluster.delete("scheduling.k8s.io/v1", "PriorityClass", PRIORITY_CLASS)
            ),
        )
        return cleanup

    def nodeset_pods(self) -> list[dict[str, t.Any]]:
        """The NodeSet's pods meant for the bench node, bound or not (a Pending pod the
        scheduler has not placed has no node name; its node affinity names the node)."""
        return [
            pod
            for pod in list_objects(
                self.cluster.client,
                "v1",
                "Pod",
                namespace=SLURM_NAMESPACE,
                label_selector="app.kubernetes.io/name=slurmd",
            )
            if pod["spec"].get("nodeName") == self.node
            or (not pod["spec"].get("nodeName") and self.node in str(pod["spec"].get("affinity")))
        ]

    def ready(self) -> bool:
        pods = self.cluster.slurmd_pods(self.node)
        if not pods or any(p["metadata"].get("deletionTimestamp") for p in pods):
            return False
        if pods[0]["spec"].get("priorityClassName") != PRIORITY_CLASS:
            return False  # still the pod of before the recipe
        slurm_node = self.cluster.slurm.node(self.node)
        return slurm_node is not None and slurm_node["state"] == "IDLE"

    def trial(self, number: int, cap_s: float) -> Trial:
        wait_until(self.ready, 180, "the recipe's slurmd pod to run and its node to be idle")
        job_id = self.cluster.submit(self.node, 600)
        first = {p["metadata"]["uid"] for p in self.cluster.slurmd_pods(self.node)}
        name = f"recipe-{number}"
        started = time.monotonic()
        self.cluster.app_pod(name, self.node, anti_affinity=True)
        trial = Trial(seconds=cap_s, ran=False)
        events: dict[str, float] = {}  # what happened when, seconds after the app pod
        replacements: dict[str, str] = {}  # uid -> the latest phase of a re-created pod
        while time.monotonic() - started < cap_s:
            now = time.monotonic() - started
            pods = self.cluster.slurmd_pods(self.node)
            uids = {p["metadata"]["uid"] for p in pods}
            if any(p["metadata"].get("deletionTimestamp") for p in pods):
                events.setdefault("slurmd deleted", now)
            if not first & uids:
                events.setdefault("slurmd gone", now)
            for pod in self.nodeset_pods():
                if pod["metadata"]["uid"] not in first:
                    events.setdefault("slurmd re-created", now)
                    bound = "bound" if pod["spec"].get("nodeName") else "unbound"
                    replacements[pod["metadata"]["uid"]] = f"{pod['status'].get('phase')} {bound}"
                    if bound == "bound":
                        events.setdefault("slurmd re-created pod bound", now)
            running = self.cluster.app_running(name)
            if running and any(
                p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                for p in pods
            ):
                trial.together = True
            if running and not trial.ran:
                trial.ran = True
                trial.seconds = now
            if trial.ran and now > trial.seconds + 15:
                break  # watch on: does a slurmd pod come back next to it?
            time.sleep(0.1)
        trial.evictions = len(first) - len(
            [p for p in self.cluster.slurmd_pods(self.node) if p["metadata"]["uid"] in first]
        )
        trial.notes.append(", ".join(f"{what} {at:.1f}" for what, at in events.items()))
        if replacements:
            trial.notes.append(
                f"re-created slurmd pods, last seen: {sorted(replacements.values())}"
            )
        self.cluster.job_outcome(job_id, trial)
        self.cluster.delete_apps()
        return trial


class Protocol:
    """The same node lent and reclaimed with node_handover's code."""

    def __init__(self, cluster: Cluster, node: str, grace_s: int, settle_s: float = 0.0) -> None:
        self.cluster = cluster
        self.node = node
        self.grace_s = grace_s
        self.settle_s = settle_s

    def handover(self, grace_s: int) -> Handover:
        policy = Policy(
            pool_selector={"hpcops.io/pool": "interactive"},
            partitions={PARTITION: PartitionPolicy(grace_s, "requeue")},
        )
        settings = Settings(markers=HandoverMarkers(), policy=policy, by="benchmark")
        return Handover(self.cluster.kube, self.cluster.slurm, settings)

    def trial(self, number: int, cap_s: float, *, busy: bool) -> Trial:
        handover = self.handover(self.grace_s if busy else 0)
        lent = handover.run(self.node, "lend")
        if lent.result != "lent":
            raise LabError(f"lend of {self.node}: {lent.result} {lent.message}")
        if self.settle_s:
            self.wait_settled()
        job_id = self.cluster.submit(self.node, 600) if busy else 0
        name = f"protocol-{'busy' if busy else 'idle'}-{number}"
        self.cluster.app_pod(name, self.node, anti_affinity=False)
        started = time.monotonic()
        reclaimed = handover.run(self.node, "reclaim")
        if reclaimed.result != "free":
            raise LabError(f"reclaim of {self.node}: {reclaimed.result} {reclaimed.message}")
        trial = Trial(seconds=cap_s, ran=False)
        trial.notes.append(
            "reclaim steps ended at "
            + ", ".join(f"{step} {at:.2f}" for step, at in reclaimed.timeline.items())
        )
        watch_app(self.cluster, name, started, cap_s, trial)
        if job_id:
            self.cluster.job_outcome(job_id, trial)
            # Requeued at the deadline, by the policy: not a kill without grace.
            if reclaimed.jobs.get("requeued") and trial.requeued:
                trial.killed -= trial.requeued
                trial.notes.append(f"requeued by the policy after {self.grace_s} s of grace")
        self.cluster.delete_apps()
        return trial

    def wait_settled(self) -> None:
        """As a node stays lent a while before demand takes it back: its slurmd pod Ready
        (the kubelet has run its probes), then settle_s more. Right after a lend the kubelet
        is still at the new pod, and began to stop it 0.9 s after its deletion (measured
        2026-12-01), where a settled pod's stop begins within 0.05 s."""
        wait_until(
            lambda: any(pod_ready(pod) for pod in self.cluster.slurmd_pods(self.node)),
            60,
            f"the slurmd pod on {self.node} Ready",
        )
        time.sleep(self.settle_s)


def pod_ready(pod: dict[str, t.Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def watch_app(
    cluster: Cluster,
    name: str,
    started: float,
    cap_s: float,
    trial: Trial,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """Wait (up to cap_s after `started`) for the application pod to run: its seconds go to
    the trial; then watch it WATCH_AFTER_S longer: a slurmd pod running beside it at any
    poll is an overlap (trial.together)."""
    while time.monotonic() - started < cap_s and alive():
        now = time.monotonic() - started
        if trial.ran or cluster.app_running(name):
            if not trial.ran:
                trial.ran, trial.seconds = True, now
            if cluster.beside_slurmd(name):
                trial.together = True
            if now > trial.seconds + WATCH_AFTER_S:
                return
            time.sleep(0.2)
        else:
            time.sleep(0.05)


# The event-driven runs' policy: no idle node is ever lent by them (the trial lends), and no
# headroom, so a demand event reclaims exactly what the pod needs.
EVENT_POLICY = {
    "pool_selector": {"hpcops.io/pool": "interactive"},
    "headroom": 0,
    "lend_min_idle_s": 86400,
    "relend_cooldown_s": 0,
    "partitions": {PARTITION: {"grace_s": 10, "escalation": "requeue"}},
}
LEASE = "hpcops-slinky-handover"
CASES = ("recipe", "idle", "busy", "events")


class Events:
    """The collection's rulebook, run here on the kind inventory: demand events reclaim."""

    def __init__(self, cluster: Cluster, nodes: list[str], kubeconfig: Path, workdir: Path) -> None:
        self.cluster = cluster
        self.nodes = nodes
        self.log_path = workdir / "rulebook.log"
        variables = {
            "handover_events": {
                "policy": EVENT_POLICY,
                "lease_namespace": SLURM_NAMESPACE,
                "lease_name": LEASE,
                "kubeconfig": str(kubeconfig),
                "debounce_s": 2.0,
                "repeat_s": 10.0,
            },
        }
        (workdir / "vars.yml").write_text(json.dumps(variables))
        # ansible-rulebook hands its playbooks a copy of the inventory file alone (no
        # group_vars beside it): the runs' settings go in it, as the role's event kind does.
        inventory = {
            "all": {
                "children": {
                    "slinky_controller": {
                        "hosts": {
                            "localhost": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable,
                            }
                        },
                        "vars": {
                            "handover_kubeconfig": str(kubeconfig),
                            "handover_slurmrestd_url": cluster.slurmrestd_url(),
                            "handover_policy": EVENT_POLICY,
                        },
                    }
                }
            }
        }
        (workdir / "inventory.yml").write_text(json.dumps(inventory))
        bin_dir = Path(sys.executable).parent
        env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build" / "collections"),
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "TMPDIR": str(workdir),
        }
        with self.log_path.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    str(bin_dir / "ansible-rulebook"),
                    "--rulebook",
                    "hpcops.slinky.handover",
                    "--inventory",
                    str(workdir / "inventory.yml"),
                    "--vars",
                    str(workdir / "vars.yml"),
                    "--verbose",  # as the role's Deployment: the source says when it watches
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=env,
                start_new_session=True,
            )
        try:
            wait_until(
                lambda: (
                    self._alive() and "watching Pods" in self.log_path.read_text(errors="replace")
                ),
                60,
                "the event source to watch",
            )
        except LabError:
            self.stop()  # never leave a rulebook behind
            raise

    def _alive(self) -> bool:
        if self.process.poll() is not None:
            raise LabError(f"ansible-rulebook exited:\n{self.log_path.read_text()[-3000:]}")
        return True

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)

    def lease_free(self) -> bool:
        lease = get_object(
            self.cluster.client, "coordination.k8s.io/v1", "Lease", LEASE, SLURM_NAMESPACE
        )
        return lease is None or not (lease.get("spec") or {}).get("holderIdentity")

    def trial(self, number: int, cap_s: float) -> Trial:
        handover = Handover(
            self.cluster.kube,
            self.cluster.slurm,
            Settings(markers=HandoverMarkers(), policy=policy_of(EVENT_POLICY), by="benchmark"),
        )
        for node in self.nodes:
            # A run of the rulebook (an idle event) may act on the node meanwhile: after it.
            for _attempt in range(3):
                wait_until(lambda: self._alive() and self.lease_free(), 120, "no run under way")
                lent = handover.run(node, "lend")
                if lent.result == "lent":
                    break
            else:
                raise LabError(f"lend of {node}: {lent.result} {lent.message}")
        wait_until(lambda: self._alive() and self.lease_free(), 120, "no run under way")
        time.sleep(1)  # the source has seen the lends: no idle event is due
        name = f"event-{number}"
        self.cluster.app_pod(name, "", anti_affinity=False, pool="interactive")
        started = time.monotonic()
        trial = Trial(seconds=cap_s, ran=False)
        watch_app(self.cluster, name, started, cap_s, trial, alive=self._alive)
        self.cluster.delete_apps()
        return trial


def policy_of(settings: dict[str, t.Any]) -> Policy:
    return Policy(
        pool_selector=settings["pool_selector"],
        partitions={
            name: PartitionPolicy(part["grace_s"], part["escalation"])
            for name, part in settings["partitions"].items()
        },
    )


def row(label: str, trials: list[Trial], target: str, failure: str = "") -> tuple[str, ...]:
    """A case's cells: "-" where it has no trial; a failed case's reason in its last cell."""
    times = [trial.seconds for trial in trials]
    return (
        label,
        str(len(trials)),
        *summary(times),
        str(sum(trial.evictions for trial in trials)),
        str(sum(trial.together for trial in trials)),
        str(sum(trial.killed for trial in trials)),
        str(sum(trial.requeued for trial in trials)),
        str(sum(not trial.ran for trial in trials)),
        target,
        f"failed: {failure}" if failure else "",
    )


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--cap", type=float, default=60.0, help="seconds a trial may take")
    parser.add_argument("--grace", type=int, default=10, help="the busy node's grace, seconds")
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds a lent node stays lent (its slurmd pod Ready) before an idle or busy "
        "trial's reclaim; 0: reclaimed the moment its slurmd registers",
    )
    parser.add_argument("--kubeconfig", type=Path, default=KIND_DIR / "kubeconfig")
    parser.add_argument(
        "--cases",
        type=lambda text: [case for case in text.split(",") if case],
        default=list(CASES),
        help=f"which to run, comma-separated (default: {','.join(CASES)})",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"--cases: no case {', '.join(unknown)}; choose from {', '.join(CASES)}")
    return args


@dataclass
class Results:
    """The trials of each case, why a case failed, and what the recipe's teardown left."""

    trials: dict[str, list[Trial]] = field(default_factory=lambda: {case: [] for case in CASES})
    failed: dict[str, str] = field(default_factory=dict)
    teardown: Cleanup | None = None

    def run(self, case: str, count: int, trial: Callable[[int], Trial]) -> None:
        """`count` trials, each printed as it ends; a trial that raises ends the case (the
        trials before it kept, its reason recorded) and the next case runs."""
        for number in range(count):
            try:
                self.trials[case].append(trial(number))
            except Exception as err:  # noqa: BLE001 (reported in the table)
                self.fail(case, err)
                return
            print(f"  trial {number + 1}: {self.trials[case][-1]}", flush=True)

    def run_on(
        self,
        case: str,
        count: int,
        setup: Callable[[], S],
        trial: Callable[[S, int], Trial],
        teardown: Callable[[S], None],
    ) -> None:
        """run() on what setup() makes, torn down after; a setup that raises fails the case."""
        try:
            subject = setup()
        except Exception as err:  # noqa: BLE001 (reported in the table)
            self.fail(case, err)
            return
        try:
            self.run(case, count, lambda number: trial(subject, number))
        finally:
            teardown(subject)

    def fail(self, case: str, err: BaseException) -> None:
        self.failed[case] = reason(err)
        print(f"  {case} failed: {self.failed[case]}", file=sys.stderr, flush=True)


def run_cases(cluster: Cluster, nodes: list[str], args: argparse.Namespace) -> Results:
    """The chosen cases' trials; a failed case (or set-up) leaves the others to run."""
    node = nodes[0]
    results = Results()
    if "recipe" in args.cases:
        print(f"recipe: PriorityClass preemption on {node} (the seeds)", flush=True)

        def recipe_up() -> Recipe:
            recipe = Recipe(cluster, node)
            recipe.up()
            return recipe

        def recipe_down(recipe: Recipe) -> None:
            results.teardown = recipe.down()
            print(f"  {results.teardown.report()}", flush=True)

        results.run_on(
            "recipe", args.trials, recipe_up, lambda r, n: r.trial(n, args.cap), recipe_down
        )
    protocol = Protocol(cluster, node, args.grace, args.settle)
    for kind in ("idle", "busy"):
        if kind in args.cases:
            print(f"protocol: reclaim of {'an idle' if kind == 'idle' else 'a busy'} lent node")
            results.run(
                kind, args.trials, lambda n, k=kind: protocol.trial(n, args.cap, busy=k == "busy")
            )
    if "events" in args.cases:
        print(f"events: the rulebook reclaims one of {', '.join(nodes)} on demand", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-kind-events-") as workdir:
            results.run_on(
                "events",
                args.trials,
                lambda: Events(cluster, nodes, args.kubeconfig, Path(workdir)),
                lambda events, n: events.trial(n, args.cap),
                Events.stop,
            )
            cleanup = protocol.handover(0)
            for name in nodes:  # given back as found: free
                try:
                    cleanup.run(name, "reclaim")
                except Exception as err:  # noqa: BLE001
                    print(f"  reclaim of {name} after the events: {reason(err)}", file=sys.stderr)
    return results


def targets(grace_s: int) -> dict[str, tuple[str, float | None]]:
    """Each case's target as printed, and its p95 limit in seconds (None: no limit)."""
    return {
        "recipe": ("-", None),
        "idle": (f"<= {TARGET_IDLE_S:g} s p95, 0 killed, 0 overlaps", TARGET_IDLE_S),
        "busy": (
            f"<= {grace_s + TARGET_BUSY_ABOVE_GRACE_S:g} s p95 (grace + "
            f"{TARGET_BUSY_ABOVE_GRACE_S:g}), 0 killed, 0 overlaps",
            grace_s + TARGET_BUSY_ABOVE_GRACE_S,
        ),
        "events": (f"<= {TARGET_EVENTS_S:g} s p95, 0 overlaps", TARGET_EVENTS_S),
    }


def print_report(results: Results, args: argparse.Namespace) -> None:
    header = (
        "case",
        "trials",
        "median s",
        "p95 s",
        "max s",
        "evicted",
        "overlaps",
        "killed",
        "requeued",
        "never ran",
        "target",
        "",
    )
    labels = {
        "recipe": "recipe: app pod runs (capped)",
        "idle": f"protocol: idle lent node back (lent {args.settle:g} s)",
        "busy": f"protocol: busy node, {args.grace} s grace (lent {args.settle:g} s)",
        "events": "events: pod created to Running",
    }
    goals = targets(args.grace)
    rows = [header] + [
        row(labels[case], results.trials[case], goals[case][0], results.failed.get(case, ""))
        for case in CASES
        if case in args.cases
    ]
    print()
    table(rows)
    print()
    for case in CASES:
        limit = goals[case][1]
        if case not in args.cases or limit is None:
            continue
        p95 = percentile([trial.seconds for trial in results.trials[case]], 0.95)
        print(f"{labels[case]}: p95 {figure(p95)} s, target {limit:g} s: {within(p95, limit)}")
    overlaps = {
        case: sum(trial.together for trial in results.trials[case])
        for case in CASES
        if results.trials[case]
    }
    print(
        "application pod running beside slurmd (overlaps, target 0): "
        + (", ".join(f"{case} {count}" for case, count in overlaps.items()) or "no trial")
    )
    if results.teardown is not None:
        print(f"recipe {results.teardown.report()}")
    recipe_p95 = percentile([trial.seconds for trial in results.trials["recipe"]], 0.95)
    ours_p95 = percentile([trial.seconds for trial in results.trials["idle"]], 0.95)
    if recipe_p95 is not None and ours_p95 is not None:
        print(
            f"ours/recipe (p95, idle node against the recipe): "
            f"{figure(ratio(ours_p95, recipe_p95))}"
        )


def main() -> int:
    args = arguments()
    if not args.kubeconfig.exists():
        print(f"no {args.kubeconfig}: run `molecule converge -s handover` first", file=sys.stderr)
        return 2
    cluster = Cluster(args.kubeconfig)
    nodes = sorted(
        n["metadata"]["name"]
        for n in list_objects(
            cluster.client, "v1", "Node", label_selector="hpcops.io/pool=interactive"
        )
    )
    if not nodes:
        print("no interactive worker in the cluster", file=sys.stderr)
        return 2
    if not get_object(cluster.client, "v1", "Namespace", APPS):
        write_object(
            cluster.client,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APPS}},
            create=True,
        )

    print_report(run_cases(cluster, nodes, args), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
