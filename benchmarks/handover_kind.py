# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Giving a node back on real kubelets: the seeds' PriorityClass recipe against the protocol.

    HPCOPS_KIND_IMAGES=local molecule converge -s handover    # the kind cluster, site.yml
    .venv/bin/python benchmarks/handover_kind.py [--trials 5] [--cap 60] [--cases events]
    molecule destroy -s handover

Runs on the kind cluster of the handover scenario: real kubelets and containerd, the Slinky
operator, slurmd containers and real Slurm jobs (`tests/lab` runs the same comparison on
kwok nodes, where a pod stops the instant it is deleted: benchmarks/handover_reclaim.py).
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
  Ansible start-up); the application pod waits for it (the taint). Idle node: seconds from
  the start of the reclaim until the application pod runs. Busy node: the same with a job
  running and a grace of --grace seconds, after which the policy requeues it.

* events (--event-trials): the collection's rulebook (ansible-rulebook, hpcops.slinky.handover)
  run here on the kind inventory, as the handover_schedule role's event kind runs it in a
  pod; both interactive workers lent, an application pod for the pool created: seconds until
  it runs, through the demand event, rebalance.yml and its reclaim (as
  benchmarks/handover_events.py measures it in the lab).

Targets: an idle lent node back in the application's hands in 5 s or less (p95), and no job
killed without grace unless the policy says so; event-driven, creation to Running in 5 s or
less at p95 (issue 31).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO / ".build" / "collections", REPO / "tests" / "lab"):
    sys.path.insert(0, str(path))

from handover_reclaim import percentile, table  # noqa: E402
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
)

KIND_DIR = Path(os.environ.get("HPCOPS_KIND_DIR", REPO / ".kind"))
SLURM_NAMESPACE = "slurm"
APPS = "bench"
PRIORITY_CLASS = "bench-slurmd-low"
PARTITION = "backfill"
SLURMD_CPU = "1200m"  # with the application's, more than a kind node has: they cannot share
APP_CPU = "1200m"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY"}


@dataclass
class Trial:
    seconds: float
    ran: bool
    evictions: int = 0
    together: bool = False  # application and slurmd pods running on the node at once
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
        wait_until(
            lambda: "RUNNING" in self.job(job_id)["job_state"], 60, f"job {job_id} to run on {node}"
        )
        return job_id

    def job(self, job_id: int) -> dict[str, t.Any]:
        answer = self.slurm.request("GET", f"/slurm/{self.slurm.api_version}/job/{job_id}")
        found: dict[str, t.Any] = answer["jobs"][0]
        return found

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

    def down(self) -> None:
        patch_object(
            self.cluster.client,
            "v1",
            "Node",
            self.node,
            {"metadata": {"labels": {self.label: None}}},
        )
        # A merge patch of what up() added, with the values of before (None removes a key).
        pod_spec = (self.saved.get("template") or {}).get("spec") or {}
        slurmd = self.saved.get("slurmd") or {}
        self.patch_nodeset(
            {
                "template": {
                    "spec": {
                        "priorityClassName": pod_spec.get("priorityClassName"),
                        "affinity": pod_spec.get("affinity"),
                    }
                },
                "slurmd": {"resources": slurmd.get("resources")},
            }
        )
        wait_until(lambda: not self.cluster.slurmd_pods(self.node), 120, "the slurmd pod to go")
        if self.cluster.slurm.node(self.node) is not None:
            self.cluster.slurm.delete_node(self.node)
        self.cluster.delete("scheduling.k8s.io/v1", "PriorityClass", PRIORITY_CLASS)

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

    def __init__(self, cluster: Cluster, node: str, grace_s: int) -> None:
        self.cluster = cluster
        self.node = node
        self.grace_s = grace_s

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
        while time.monotonic() - started < cap_s:
            if self.cluster.app_running(name):
                trial.ran = True
                trial.seconds = time.monotonic() - started
                break
            time.sleep(0.05)
        if job_id:
            self.cluster.job_outcome(job_id, trial)
            # Requeued at the deadline, by the policy: not a kill without grace.
            if reclaimed.jobs.get("requeued") and trial.requeued:
                trial.killed -= trial.requeued
                trial.notes.append(f"requeued by the policy after {self.grace_s} s of grace")
        self.cluster.delete_apps()
        return trial


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
        while time.monotonic() - started < cap_s and self._alive():
            if self.cluster.app_running(name):
                trial.ran = True
                trial.seconds = time.monotonic() - started
                break
            time.sleep(0.05)
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


def row(label: str, trials: list[Trial], target: str) -> tuple[str, ...]:
    times = [trial.seconds for trial in trials]
    return (
        label,
        str(len(trials)),
        f"{statistics.median(times):.2f}",
        f"{percentile(times, 0.95):.2f}",
        f"{max(times):.2f}",
        str(sum(trial.evictions for trial in trials)),
        str(sum(trial.together for trial in trials)),
        str(sum(trial.killed for trial in trials)),
        str(sum(trial.requeued for trial in trials)),
        str(sum(not trial.ran for trial in trials)),
        target,
    )


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--cap", type=float, default=60.0, help="seconds a trial may take")
    parser.add_argument("--grace", type=int, default=10, help="the busy node's grace, seconds")
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


def trials(count: int, trial: t.Callable[[int], Trial]) -> list[Trial]:
    """`count` trials, each printed as it ends."""
    done = []
    for number in range(count):
        done.append(trial(number))
        print(f"  trial {number + 1}: {done[-1]}", flush=True)
    return done


def run_cases(
    cluster: Cluster, nodes: list[str], args: argparse.Namespace
) -> dict[str, list[Trial]]:
    """The chosen cases' trials."""
    node = nodes[0]
    results: dict[str, list[Trial]] = {case: [] for case in CASES}
    if "recipe" in args.cases:
        recipe = Recipe(cluster, node)
        print(f"recipe: PriorityClass preemption on {node} (the seeds)", flush=True)
        recipe.up()
        try:
            results["recipe"] = trials(args.trials, lambda n: recipe.trial(n, args.cap))
        finally:
            recipe.down()
    protocol = Protocol(cluster, node, args.grace)
    for kind in ("idle", "busy"):
        if kind in args.cases:
            print(f"protocol: reclaim of {'an idle' if kind == 'idle' else 'a busy'} lent node")
            results[kind] = trials(
                args.trials, lambda n, k=kind: protocol.trial(n, args.cap, busy=k == "busy")
            )
    if "events" in args.cases:
        print(f"events: the rulebook reclaims one of {', '.join(nodes)} on demand", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-kind-events-") as workdir:
            events = Events(cluster, nodes, args.kubeconfig, Path(workdir))
            try:
                results["events"] = trials(args.trials, lambda n: events.trial(n, args.cap))
            finally:
                events.stop()
                cleanup = protocol.handover(0)
                for name in nodes:  # given back as found: free
                    cleanup.run(name, "reclaim")
    return results


def print_report(results: dict[str, list[Trial]], args: argparse.Namespace) -> None:
    header = (
        "case",
        "trials",
        "median s",
        "p95 s",
        "max s",
        "evicted",
        "together",
        "killed",
        "requeued",
        "never ran",
        "target",
    )
    labels = {
        "recipe": ("recipe: app pod runs (capped)", "-"),
        "idle": ("protocol: idle lent node back", "<= 5 s p95, 0 killed"),
        "busy": (f"protocol: busy node, {args.grace} s grace", "0 killed"),
        "events": ("events: pod created to Running", "<= 5 s p95"),
    }
    rows = [header] + [
        row(labels[case][0], results[case], labels[case][1]) for case in CASES if results[case]
    ]
    print()
    table(rows)
    if results["recipe"] and results["idle"]:
        recipe_p95 = percentile([trial.seconds for trial in results["recipe"]], 0.95)
        ours_p95 = percentile([trial.seconds for trial in results["idle"]], 0.95)
        print(f"\nours/recipe (p95, idle node against the recipe): {ours_p95 / recipe_p95:.2f}")


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
