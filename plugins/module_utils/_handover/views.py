# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Nodes, Pods and Slurm nodes as the handover's decisions see them (pure: dicts in, views out).

PRIVATE to the collection: names here can change without notice. The planner and the steps
of the executor decide on these views; the API objects stay dicts at the boundary.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    Journal,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.quantity import quantity

# Slurm node states in which a node still runs (or finishes) work.
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
# Job states in which a job holds its nodes.
RUNNING_JOB_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})
# The owner kind of Slinky's slurmd pods.
NODESET_KIND = "NodeSet"
# The extended resource of NVIDIA's device plugin: a node's GPUs.
GPU_RESOURCE = "nvidia.com/gpu"
# A kubelet writes one of these once its runtime reports every container and the sandbox
# stopped, and no pod leaves one; the object itself goes only after the kubelet's clean-up
# (volumes, cgroups), which the scheduler and the kubelet's admission no longer wait for.
TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    ready: bool = True
    unschedulable: bool = False
    journal: Journal = field(default_factory=Journal)
    cpu_m: int = 0  # allocatable millicores
    memory_b: int = 0  # allocatable bytes
    gpus: int = 0  # allocatable nvidia.com/gpu
    taints: frozenset[tuple[str, str]] = frozenset()  # (key, effect) of each taint


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    node: str = ""  # spec.nodeName; empty while Pending
    phase: str = "Running"
    daemonset: bool = False
    slurmd: bool = False  # a pod of a Slinky NodeSet: Slurm's, not an application's
    unschedulable: bool = False  # PodScheduled=False with reason Unschedulable
    labels: Mapping[str, str] = field(default_factory=dict)
    cpu_m: int = 0
    memory_b: int = 0

    @property
    def live_slurmd(self) -> bool:
        """A slurmd pod that runs, or will: not yet in a terminal phase."""
        return self.slurmd and self.phase not in TERMINAL_POD_PHASES


@dataclass(frozen=True)
class JobView:
    job_id: int
    partition: str
    end_time: float | None = None  # None: no time limit known


@dataclass(frozen=True)
class SlurmNodeView:
    name: str
    states: frozenset[str] = frozenset({"IDLE"})
    jobs: tuple[JobView, ...] = ()
    # Slinky gives each slurmd its NodeSet's name as a feature: how a lent node is told
    # from the nodes of other NodeSets once its Kubernetes Node is gone.
    features: frozenset[str] = frozenset()
    reason: str = ""  # of a drain or DOWN
    last_busy: float | None = None  # when it last ran a job

    @property
    def kept_from_jobs(self) -> bool:
        """Drained or DOWN: no new job starts on it."""
        return "DRAIN" in self.states or "DOWN" in self.states

    @property
    def busy(self) -> bool:
        """Jobs run (or finish) on it."""
        return bool(self.jobs) or bool(self.states & BUSY_STATES)


def is_application_pod(pod: PodView, policy: Policy) -> bool:
    """Pods of DaemonSets, slurmd pods and pods of the system namespaces do not make a node
    busy."""
    return not (pod.daemonset or pod.slurmd) and pod.namespace not in policy.system_namespaces


def node_view(obj: Mapping[str, t.Any], journal_annotation: str) -> NodeView:
    """A Kubernetes Node (k8s_info resource) as the planner sees it."""
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    status = obj.get("status", {})
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    allocatable = status.get("allocatable") or {}
    return NodeView(
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        ready=conditions.get("Ready") == "True",
        unschedulable=bool(spec.get("unschedulable")),
        journal=Journal.parse((meta.get("annotations") or {}).get(journal_annotation)),
        cpu_m=quantity(allocatable.get("cpu"), 1e-3),
        memory_b=quantity(allocatable.get("memory")),
        gpus=quantity(allocatable.get(GPU_RESOURCE)),
        taints=frozenset(
            (str(taint.get("key", "")), str(taint.get("effect", "")))
            for taint in spec.get("taints") or []
        ),
    )


def pod_view(obj: Mapping[str, t.Any]) -> PodView:
    """A Pod as the planner sees it: where it runs, whether it waits, what it asks for."""
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    status = obj.get("status", {})
    owners = meta.get("ownerReferences") or []
    unschedulable = any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )
    cpu_m = memory_b = 0
    for container in spec.get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        cpu_m += quantity(requests.get("cpu"), 1e-3)
        memory_b += quantity(requests.get("memory"))
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        daemonset=any(o.get("kind") == "DaemonSet" for o in owners),
        slurmd=any(o.get("kind") == NODESET_KIND for o in owners),
        unschedulable=unschedulable,
        labels=dict(meta.get("labels") or {}),
        cpu_m=cpu_m,
        memory_b=memory_b,
    )


def slurm_node_views(
    nodes: Sequence[Mapping[str, t.Any]],
    jobs: Sequence[Mapping[str, t.Any]],
    node_names_of: t.Callable[[t.Any], list[str]],
) -> dict[str, SlurmNodeView]:
    """Slurm nodes and their running jobs, from slurm_info's normalised nodes and jobs.

    `node_names_of` expands a job's host list (python-hostlist in the module).
    """
    on_node: dict[str, list[JobView]] = {}
    for job in jobs:
        if job.get("state") not in RUNNING_JOB_STATES:
            continue
        end = job.get("end_time")
        view = JobView(
            int(job.get("job_id") or 0),
            str(job.get("partition") or ""),
            float(end) if isinstance(end, (int, float)) and end > 0 else None,
        )
        for name in node_names_of(job):
            on_node.setdefault(name, []).append(view)
    return {
        str(node["name"]): SlurmNodeView(
            str(node["name"]),
            frozenset({str(node.get("state") or ""), *map(str, node.get("state_flags") or [])}),
            tuple(sorted(on_node.get(str(node["name"]), []), key=lambda j: j.job_id)),
            frozenset(
                map(str, [*(node.get("features") or []), *(node.get("active_features") or [])])
            ),
            str(node.get("reason") or ""),
            float(last_busy)
            if isinstance(last_busy := node.get("last_busy"), (int, float))
            else None,
        )
        for node in nodes
    }
