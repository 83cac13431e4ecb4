# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's demand for the pool: which pending jobs a lent node would start, and on which nodes.

PRIVATE to the collection: names here can change without notice. Pure functions: the
planner (``plan``) calls them with the pending jobs of the lendable partitions, the pool's
free nodes and its lent ones, and the policy.

A pending job counts as demand when lending can start it:

* it waits for resources or priority, not on a hold, a dependency, a begin time or a limit
  (a lent node changes none of those);
* each of its nodes fits a pool node, in the numbers Slurm uses (``SlurmQueue.offer``):
  Slurm's own record of a lent node, else what slurmd of the lendable NodeSet will
  register (its limits, within the Node's allocatable); a job Slurm marks
  ``BadConstraints`` (too big for the nodes it has) is reported with what it exceeds;
* it survives a reclaim: its time limit is within the partition's grace, or the partition
  requeues at the deadline and the job may be requeued; and the limit is within the
  partition's MaxTime (slurmctld would keep it pending otherwise).

The jobs are placed in Slurm's order (priority, then age) on the lent nodes that are idle
in Slurm first, then on free nodes, longest idle first; a job that cannot have all its
nodes takes none. What is left over tells which free nodes to lend.
"""

from __future__ import annotations

import math
import re
import typing as t
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    EscalationPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.quantity import quantity

# Why a pending job waits, when a lent node can end that wait ("None": not yet looked at;
# PartitionConfig: its partition has no node yet, as a lendable one before its first lend;
# PartitionNodeLimit: it asks more nodes than the partition has now).
WAITS_FOR_NODES = frozenset(
    {"None", "", "Resources", "Priority", "PartitionConfig", "PartitionNodeLimit"}
)
# How many skipped jobs the plan names, per reason (it counts them all).
EXAMPLES_PER_REASON = 3
MIB = 1 << 20
_GPUS_PER_NODE = re.compile(r"gres[/:]gpu(?::[^:,=]+)?[:=](\d+)")
# GPUs of a node's Gres: Slurm's record ("gpu:h100:4(S:0-1),shard:8") or slurmd's --conf.
_NODE_GPUS = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")
# The reason slurmctld gives a job no node of its partition can ever hold (it also sets
# the job's priority to 0, so slurmrestd shows it held).
BAD_CONSTRAINTS = "BadConstraints"
TOO_BIG = "asks more than a pool node has"


@dataclass(frozen=True)
class Shape:
    """What a node offers, or what a job asks of each of its nodes."""

    cpu_m: int = 0
    memory_b: int = 0
    gpus: int = 0

    def holds(self, need: Shape) -> bool:
        return (
            need.cpu_m <= self.cpu_m and need.memory_b <= self.memory_b and need.gpus <= self.gpus
        )

    def minus(self, need: Shape) -> Shape:
        return Shape(self.cpu_m - need.cpu_m, self.memory_b - need.memory_b, self.gpus - need.gpus)

    def describe(self) -> str:
        # Whole MiB rounded down, as slurmd registers RealMemory (and as short_of says).
        text = f"{self.cpu_m / 1000:g} CPUs, {self.memory_b // MIB} MiB"
        return text + (f", {self.gpus} GPUs" if self.gpus else "")

    def short_of(self, need: Shape) -> list[str]:
        """What `need` asks beyond this shape, one entry per resource ("CPUs 64 > 32")."""
        short = []
        if need.cpu_m > self.cpu_m:
            short.append(f"CPUs {need.cpu_m / 1000:g} > {self.cpu_m / 1000:g}")
        if need.memory_b > self.memory_b:
            short.append(f"memory {need.memory_b // MIB} MiB > {self.memory_b // MIB} MiB")
        if need.gpus > self.gpus:
            short.append(f"GPUs {need.gpus} > {self.gpus}")
        return short


@dataclass(frozen=True)
class PendingJob:
    """A pending job of a lendable partition, as the demand sees it."""

    job_id: int
    partitions: tuple[str, ...]
    nodes: int = 1
    per_node: Shape = field(default_factory=Shape)
    exclusive: bool = False  # whole nodes
    time_limit_s: float | None = None  # None: none asked for (the partition's applies)
    requeue: bool = True
    held: bool = False
    dependency: str = ""
    reason: str = ""
    priority: int = 0


@dataclass(frozen=True)
class LendablePartition:
    """A partition over lendable NodeSets, as Slurm has it."""

    name: str
    max_time_s: float | None = None  # None: no limit
    default_time_s: float | None = None


@dataclass(frozen=True)
class SlurmdLimits:
    """What slurmd of a lendable NodeSet registers on a node lent to it (``slurmd_limits``):
    CPUs and MiB from the limits Slinky hands it, GPUs from its --conf Gres; 0 or None when
    none is set, where slurmd takes what it detects (the node's allocatable here)."""

    nodeset: str
    node_selector: Mapping[str, str] = field(default_factory=dict)  # without the lend label
    cpus: int = 0
    memory_mib: int = 0
    gpus: int | None = None

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.node_selector.items())

    def offer(self, allocatable: Shape) -> Shape:
        """What Slurm gets of a node of `allocatable`: the limits, within the node."""
        return Shape(
            min(self.cpus * 1000, allocatable.cpu_m) if self.cpus else allocatable.cpu_m,
            min(self.memory_mib * MIB, allocatable.memory_b)
            if self.memory_mib
            else allocatable.memory_b,
            min(self.gpus, allocatable.gpus) if self.gpus is not None else allocatable.gpus,
        )


@dataclass(frozen=True)
class SlurmQueue:
    """The pending jobs of the lendable partitions, those partitions, and what Slurm has or
    will have of a lent node (``offer``)."""

    jobs: tuple[PendingJob, ...] = ()
    partitions: Mapping[str, LendablePartition] = field(default_factory=dict)
    # Slurm's record of its nodes (registered_shape), by name.
    registered: Mapping[str, Shape] = field(default_factory=dict)
    # The lendable NodeSets' slurmd (slurmd_limits); empty when they were not read.
    slurmd: tuple[SlurmdLimits, ...] = ()

    def offer(
        self, name: str, labels: Mapping[str, str], allocatable: Shape, *, lent: bool
    ) -> Shape:
        """What a pool node holds for Slurm's jobs, in the numbers Slurm uses: a lent node
        Slurm has registered, Slurm's own record; else what the slurmd of the NodeSet that
        selects it will register (the smallest, if several do); else, when no lendable
        NodeSet is known, the Node's allocatable."""
        if lent and name in self.registered:
            return self.registered[name]
        offers = [limits.offer(allocatable) for limits in self.slurmd if limits.selects(labels)]
        return min(offers, key=lambda s: (s.cpu_m, s.memory_b, s.gpus), default=allocatable)


@dataclass
class Placement:
    """Where the fitting jobs go: the free nodes to lend, and what the rest shows."""

    lend: list[str] = field(default_factory=list)  # free nodes, in the order chosen
    jobs_for: dict[str, list[int]] = field(default_factory=dict)  # node -> jobs placed
    used_lent: set[str] = field(default_factory=set)  # idle lent nodes a job will use
    pending: int = 0  # pending jobs of the lendable partitions
    fitting: int = 0
    unplaced: list[int] = field(default_factory=list)  # fit, but no room for all nodes
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[int]] = field(default_factory=dict)

    def skip(self, job: PendingJob, why: str) -> None:
        self.skipped[why] += 1
        shown = self.examples.setdefault(why, [])
        if len(shown) < EXAMPLES_PER_REASON:
            shown.append(job.job_id)

    def as_dict(self) -> dict[str, t.Any]:
        return {
            "pending_jobs": self.pending,
            "fitting_jobs": self.fitting,
            "nodes": len(self.lend),
            "lent_nodes_used": sorted(self.used_lent),
            "unplaced_jobs": self.unplaced[:EXAMPLES_PER_REASON],
            "unplaced_count": len(self.unplaced),
            "skipped": [
                {"reason": why, "jobs": count, "examples": self.examples[why]}
                for why, count in sorted(self.skipped.items(), key=lambda item: (-item[1], item[0]))
            ],
        }


def _number(value: t.Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def gpus_per_node(job: Mapping[str, t.Any], nodes: int) -> int:
    """GPUs per node: --gres / --gpus-per-node (tres_per_node), else the job's total over
    its nodes."""
    match = _GPUS_PER_NODE.search(str(job.get("tres_per_node") or ""))
    if match:
        return int(match.group(1))
    match = _GPUS_PER_NODE.search(str(job.get("tres_requested") or ""))
    return math.ceil(int(match.group(1)) / nodes) if match else 0


def pending_job(job: Mapping[str, t.Any]) -> PendingJob:
    """A pending job from slurm_info's normalised job (rest.normalize_job)."""
    nodes = max(int(_number(job.get("node_count")) or 1), 1)
    cpus = _number(job.get("cpus")) or 1
    per_node_cpus = max(int(_number(job.get("cpus_per_node")) or 0), math.ceil(cpus / nodes))
    memory_mib = _number(job.get("memory_per_node"))
    if not memory_mib:
        per_cpu = _number(job.get("memory_per_cpu"))
        memory_mib = per_cpu * per_node_cpus if per_cpu else 0
    limit = job.get("time_limit")
    minutes = _number(limit)
    return PendingJob(
        job_id=int(job.get("job_id") or 0),
        partitions=tuple(p for p in str(job.get("partition") or "").split(",") if p),
        nodes=nodes,
        per_node=Shape(per_node_cpus * 1000, int(memory_mib * MIB), gpus_per_node(job, nodes)),
        # --exclusive: slurmrestd lists "none" among the job's sharing flags.
        exclusive="none" in (job.get("shared") or []),
        time_limit_s=math.inf if limit == "infinite" else minutes * 60 if minutes else None,
        requeue=bool(job.get("requeue")),
        held=bool(job.get("hold")) or str(job.get("state_reason") or "").startswith("JobHeld"),
        dependency=str(job.get("dependency") or ""),
        reason=str(job.get("state_reason") or ""),
        priority=int(_number(job.get("priority")) or 0),
    )


def is_pending(job: Mapping[str, t.Any]) -> bool:
    return job.get("state") == "PENDING"


def node_gpus(gres: t.Any) -> int:
    """The GPUs of a Gres list ("gpu:h100:4(S:0-1),shard:8" -> 4)."""
    return sum(int(count) for count in _NODE_GPUS.findall(str(gres or "")))


def registered_shape(node: Mapping[str, t.Any]) -> Shape | None:
    """What Slurm's record of a node (slurm_info's normalised node) holds for jobs: its
    effective CPUs (CPUs less CoreSpecCount's), its RealMemory less MemSpecLimit, its
    GPUs; None before slurmd has registered it."""
    effective = _number(node.get("effective_cpus"))
    cpus = effective if effective is not None else _number(node.get("cpus"))
    memory = _number(node.get("real_memory"))
    if not cpus or memory is None:
        return None
    memory -= _number(node.get("specialized_memory")) or 0
    return Shape(int(cpus * 1000), int(max(memory, 0) * MIB), node_gpus(node.get("gres")))


def slurmd_limits(
    nodeset: Mapping[str, t.Any], key: str, lend_label: Mapping[str, t.Any]
) -> SlurmdLimits:
    """What slurmd of a NodeSet (its Kubernetes object) registers on a node, as Slinky 1.2.1
    sets it up.

    The operator (internal/builder/workerbuilder/worker_app.go, getResourceLimits) gives
    the slurmd container POD_CPUS, the CPU limit rounded up to whole CPUs, and POD_MEMORY,
    the memory limit in MiB rounded down: the slurmd container's limit, else the pod-level
    one (spec.template.spec.resources), else 0. The image's entrypoint
    (slurmd-entrypoint.sh) then adds to slurmd's --conf ``CoreSpecCount`` = the host's
    cores less POD_CPUS / ThreadsPerCore and ``MemSpecLimit`` = the RealMemory slurmd
    detects less POD_MEMORY, so jobs get POD_CPUS (to whole cores) and POD_MEMORY of the
    node; without a limit, all slurmd detects. GPUs are the Gres the operator puts in
    --conf from the NodeSet's extraConf (the privileged slurmd sees every GPU of the host).
    """
    spec = nodeset.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    pod_limits = (pod.get("resources") or {}).get("limits") or {}
    limits = ((spec.get("slurmd") or {}).get("resources") or {}).get("limits") or {}

    def limit(name: str, unit: float) -> int:
        return quantity(limits.get(name), unit) or quantity(pod_limits.get(name), unit)

    conf = dict(
        item.split("=", 1) for item in str(spec.get("extraConf") or "").split() if "=" in item
    )
    gres = next((value for name, value in conf.items() if name.lower() == "gres"), None)
    return SlurmdLimits(
        nodeset=key,
        node_selector={
            str(name): str(value)
            for name, value in (pod.get("nodeSelector") or {}).items()
            if name not in lend_label
        },
        cpus=math.ceil(limit("cpu", 1e-3) / 1000),
        memory_mib=limit("memory", 1) // MIB,
        gpus=node_gpus(gres) if gres is not None else None,
    )


def too_big(need: Shape, pool_shapes: Sequence[Shape]) -> str:
    """Why no pool node holds `need`, naming what it exceeds on the node that comes
    closest ("asks more than a pool node has: CPUs 64 > 32"), or '' when one holds it."""
    if not pool_shapes:
        return f"{TOO_BIG}: the pool has no node"
    closest = min(
        pool_shapes,
        key=lambda s: (len(s.short_of(need)), -s.cpu_m, -s.memory_b, -s.gpus),
    )
    short = closest.short_of(need)
    return f"{TOO_BIG}: {', '.join(short)}" if short else ""


def demand_blocker(
    job: PendingJob,
    partition: LendablePartition,
    policy: Policy,
    pool_shapes: Sequence[Shape],
) -> str | None:
    """Why lending a node would not start this job, or None."""
    if job.reason == BAD_CONSTRAINTS:
        # Held by slurmctld (priority 0) once the partition's nodes are too small for it.
        return too_big(job.per_node, pool_shapes) or f"{TOO_BIG} (Slurm: {BAD_CONSTRAINTS})"
    if job.held:
        return "held"
    if job.dependency or job.reason.startswith("Dependency"):
        return "waits on a dependency"
    if job.reason == "BeginTime":
        return "waits for its begin time"
    if job.reason not in WAITS_FOR_NODES and not job.reason.startswith("ReqNodeNotAvail"):
        return f"pending for {job.reason}, which a lent node does not change"
    limit = job.time_limit_s
    if limit is None:
        limit = partition.default_time_s or partition.max_time_s or math.inf
    if partition.max_time_s is not None and limit > partition.max_time_s:
        return f"time limit over {partition.name}'s MaxTime"
    rules = policy.partition(partition.name)
    if limit > rules.grace_s:
        if rules.escalation != EscalationPolicy.REQUEUE:
            return (
                f"time limit over the {rules.grace_s} s grace of {partition.name}, whose "
                f"escalation is {rules.escalation}"
            )
        if not job.requeue:
            return f"time limit over the {rules.grace_s} s grace, and not requeue-able"
    return too_big(job.per_node, pool_shapes) or None


def place(
    jobs: Iterable[PendingJob],
    partitions: Mapping[str, LendablePartition],
    policy: Policy,
    pool_shapes: Iterable[Shape],
    idle_lent: Sequence[tuple[str, Shape]],
    free: Sequence[tuple[str, Shape]],
    room: int,
) -> Placement:
    """Place the fitting jobs on idle lent nodes, then on free ones (at most `room` of
    them, in the order given); a job fits when some shape of the pool holds each of its
    nodes. See the module docstring."""
    placement = Placement()
    shapes = sorted(set(pool_shapes), key=lambda s: (s.cpu_m, s.memory_b, s.gpus))
    fitting: list[PendingJob] = []
    for job in jobs:
        lendable = [partitions[name] for name in job.partitions if name in partitions]
        if not lendable:
            continue
        placement.pending += 1
        # A job naming several lendable partitions runs in the first one it fits.
        blockers = [demand_blocker(job, part, policy, shapes) for part in lendable]
        if None in blockers:
            fitting.append(job)
        else:
            placement.skip(job, str(blockers[0]))
    placement.fitting = len(fitting)
    nodes = _Nodes(dict(idle_lent), dict(idle_lent), list(free))
    for job in sorted(fitting, key=lambda j: (-j.priority, j.job_id)):
        if not nodes.take(job, placement, room):
            placement.unplaced.append(job.job_id)
    return placement


@dataclass
class _Nodes:
    """The room left on the nodes a placement uses, and the free nodes not used yet."""

    room: dict[str, Shape]
    whole: dict[str, Shape]
    waiting: list[tuple[str, Shape]]

    def take(self, job: PendingJob, placement: Placement, most_lent: int) -> bool:
        """Give the job all its nodes (used ones first, then free ones while fewer than
        `most_lent` are lent), or none: False."""
        need = job.per_node
        chosen = [
            name
            for name, left in self.room.items()
            if self.whole[name].holds(need)
            and (left == self.whole[name] if job.exclusive else left.holds(need))
        ][: job.nodes]
        opened: list[tuple[str, Shape]] = []
        for item in self.waiting:
            if len(chosen) + len(opened) == job.nodes:
                break
            if len(placement.lend) + len(opened) == most_lent:
                break
            if item[1].holds(need):
                opened.append(item)
        if len(chosen) + len(opened) < job.nodes:
            return False
        for name, shape in opened:
            self.waiting.remove((name, shape))
            self.room[name] = self.whole[name] = shape
            placement.lend.append(name)
        for name in [*chosen, *(item[0] for item in opened)]:
            self.room[name] = Shape() if job.exclusive else self.room[name].minus(need)
            placement.jobs_for.setdefault(name, []).append(job.job_id)
            if name not in placement.lend:
                placement.used_lent.add(name)
        return True
