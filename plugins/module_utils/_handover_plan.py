# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover planner: which pool nodes to lend to Slurm, which to reclaim, and why.

A pure function of its inputs (no I/O, no clock): views of the Kubernetes Nodes and Pods,
of the Slurm nodes and their jobs, a policy and the time.  The same inputs give the same
plan, so it can be tested without a cluster and printed in check mode.  The protocol it
plans for is in docs (handover): nodes move free -> lending -> lent -> reclaiming -> free,
recorded in a journal annotation on the Node.

Rules, in order:

* nodes outside the pool, or matching the never-touch selector, are never planned;
* a node in ``lending`` or ``reclaiming`` is resumed before anything else is decided;
* demand is the number of pool nodes the pending application pods need (first-fit on the
  smallest pool node), plus the headroom of free nodes the site keeps for applications;
* if fewer free idle nodes exist than that, lent nodes are reclaimed, cheapest first
  (idle in Slurm, then the soonest end of their jobs, then the fewest jobs; nodes with
  jobs of a ``wait`` partition last), never more than the shortfall;
* otherwise idle free nodes beyond it are lent, within ``max_lent``; a node is lent only
  if it is Ready, schedulable, runs no application pod, has been idle ``lend_min_idle_s``
  and was not reclaimed within ``relend_cooldown_s``;
* a run never lends and reclaims at once, and changes at most ``max_changes_per_run``
  nodes (resumed nodes count).
"""

from __future__ import annotations

import json
import math
import typing as t
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

STATES = ("free", "lending", "lent", "reclaiming")
ESCALATIONS = ("requeue", "cancel", "wait")
# Slurm node states in which a node still runs (or finishes) work.
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
# The owner kind of Slinky's slurmd pods.
NODESET_KIND = "NodeSet"


class PolicyError(ValueError):
    """A policy setting that cannot work; the message names the setting and the fix."""

    def __init__(self, setting: str, problem: str, fix: str) -> None:
        super().__init__(f"{setting}: {problem}; {fix}")
        self.setting = setting


@dataclass(frozen=True)
class Journal:
    """The handover annotation of a Node (absent: free)."""

    state: str = "free"
    op: str = ""
    since: float | None = None
    last_reclaim: float | None = None
    idle_since: float | None = None
    deadline: float | None = None
    reason: str = ""
    by: str = ""

    @classmethod
    def parse(cls, text: str | None) -> Journal:
        """The journal in an annotation value; an unreadable one is its own state."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            return cls(state="corrupt", reason="the journal annotation is not JSON")
        if not isinstance(data, dict) or data.get("state") not in STATES:
            return cls(state="corrupt", reason=f"unknown journal state {data!r:.80}")

        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        return cls(
            state=str(data["state"]),
            op=str(data.get("op", "")),
            since=number("since"),
            last_reclaim=number("last_reclaim"),
            idle_since=number("idle_since"),
            deadline=number("deadline"),
            reason=str(data.get("reason", "")),
            by=str(data.get("by", "")),
        )


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    ready: bool = True
    unschedulable: bool = False
    journal: Journal = field(default_factory=Journal)
    cpu_m: int = 0  # allocatable millicores
    memory_b: int = 0  # allocatable bytes


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


@dataclass(frozen=True)
class PartitionPolicy:
    grace_s: int = 300
    escalation: str = "requeue"


@dataclass(frozen=True)
class Policy:
    pool_selector: Mapping[str, str]
    never_touch_selector: Mapping[str, str] = field(default_factory=dict)
    headroom: int = 1
    max_lent: int | None = None  # at most this many nodes lent; None: no count limit
    max_lent_fraction: float = 1.0  # and at most this fraction of the pool
    lend_min_idle_s: int = 600
    relend_cooldown_s: int = 1800
    max_changes_per_run: int = 8
    demand_namespaces: tuple[str, ...] = ()  # empty: every namespace but the system ones
    demand_selector: Mapping[str, str] = field(default_factory=dict)
    system_namespaces: tuple[str, ...] = ("kube-system", "kube-node-lease", "kube-public")
    partitions: Mapping[str, PartitionPolicy] = field(default_factory=dict)
    default_partition: PartitionPolicy = field(default_factory=PartitionPolicy)

    def partition(self, name: str) -> PartitionPolicy:
        return self.partitions.get(name, self.default_partition)

    def check(self) -> None:
        """PolicyError on the first setting that cannot work."""
        problems = self.problems()
        if problems:
            raise problems[0]

    def problems(self) -> list[PolicyError]:
        """Every setting that cannot work, in the order of the fields (none: the policy works)."""
        found: list[PolicyError] = []
        if not self.pool_selector:
            found.append(
                PolicyError(
                    "pool_selector", "is empty", "give the labels of the lendable pool's nodes"
                )
            )
        for name, value in (
            ("headroom", self.headroom),
            ("lend_min_idle_s", self.lend_min_idle_s),
            ("relend_cooldown_s", self.relend_cooldown_s),
        ):
            if value < 0:
                found.append(PolicyError(name, f"{value} is negative", "give 0 or more"))
        if self.max_changes_per_run < 1:
            found.append(
                PolicyError(
                    "max_changes_per_run",
                    f"{self.max_changes_per_run} is below 1",
                    "give 1 or more",
                )
            )
        if self.max_lent is not None and self.max_lent < 0:
            found.append(
                PolicyError(
                    "max_lent", f"{self.max_lent} is negative", "give a count, or none for no limit"
                )
            )
        if not 0 <= self.max_lent_fraction <= 1:
            found.append(
                PolicyError(
                    "max_lent_fraction",
                    f"{self.max_lent_fraction:g} is not between 0 and 1",
                    "for example 0.5",
                )
            )
        for name, part in {**self.partitions, "(default)": self.default_partition}.items():
            if part.escalation not in ESCALATIONS:
                found.append(
                    PolicyError(
                        f"partitions.{name}.escalation",
                        f"{part.escalation!r} is not a known policy",
                        f"use one of {', '.join(ESCALATIONS)}",
                    )
                )
            if part.grace_s < 0:
                found.append(
                    PolicyError(
                        f"partitions.{name}.grace_s",
                        f"{part.grace_s} is negative",
                        "give 0 or more",
                    )
                )
        return found


@dataclass(frozen=True)
class Decision:
    node: str
    reason: str


@dataclass(frozen=True)
class Plan:
    resume: tuple[Decision, ...]
    lend: tuple[Decision, ...]
    reclaim: tuple[Decision, ...]
    left_alone: tuple[Decision, ...]
    # Journal idle_since values to record: node -> time first seen idle, or None (busy).
    idle_marks: Mapping[str, float | None]
    demand_nodes: int
    free_idle: int
    lent: int

    def as_dict(self) -> dict[str, t.Any]:
        def rows(decisions: tuple[Decision, ...]) -> list[dict[str, str]]:
            return [{"node": d.node, "reason": d.reason} for d in decisions]

        return {
            "resume": rows(self.resume),
            "lend": rows(self.lend),
            "reclaim": rows(self.reclaim),
            "left_alone": rows(self.left_alone),
            "idle_marks": dict(self.idle_marks),
            "demand_nodes": self.demand_nodes,
            "free_idle": self.free_idle,
            "lent": self.lent,
        }


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def is_application_pod(pod: PodView, policy: Policy) -> bool:
    """Pods of DaemonSets, slurmd pods and pods of the system namespaces do not make a node
    busy."""
    return not (pod.daemonset or pod.slurmd) and pod.namespace not in policy.system_namespaces


def demanded_nodes(
    pending: Sequence[PodView], shape: tuple[int, int], limit: int | None = None
) -> int:
    """Nodes of `shape` (millicores, bytes) that the pending pods need, first-fit decreasing.

    A pod larger than the shape still counts one node: it shows demand the pool may not meet.
    Counting stops past `limit` (a plan never needs to know more than the pool can give).
    """
    if not pending:
        return 0
    smallest = (min(p.cpu_m for p in pending), min(p.memory_b for p in pending))
    opened = 0
    open_bins: list[list[int]] = []  # room left in bins that can still take the smallest pod
    for pod in sorted(
        pending, key=lambda p: (p.cpu_m, p.memory_b, p.namespace, p.name), reverse=True
    ):
        fit = next(
            (
                i
                for i, room in enumerate(open_bins)
                if pod.cpu_m <= room[0] and pod.memory_b <= room[1]
            ),
            None,
        )
        if fit is None:
            opened += 1
            if limit is not None and opened > limit:
                return opened
            open_bins.append([shape[0], shape[1]])
            fit = len(open_bins) - 1
        room = open_bins[fit]
        room[0] = max(room[0] - pod.cpu_m, 0)
        room[1] = max(room[1] - pod.memory_b, 0)
        if room[0] < smallest[0] or room[1] < smallest[1]:
            del open_bins[fit]  # full for every pod that is left
    return opened


def reclaim_cost(slurm: SlurmNodeView | None, policy: Policy) -> tuple[t.Any, ...]:
    """Sort key: cheapest node to take back first."""
    if slurm is None:
        return (0, 0, 0.0, 0)
    waits = any(policy.partition(job.partition).escalation == "wait" for job in slurm.jobs)
    busy = bool(slurm.jobs) or bool(slurm.states & BUSY_STATES)
    ends = [job.end_time if job.end_time is not None else math.inf for job in slurm.jobs]
    return (int(waits), int(busy), max(ends, default=0.0), len(slurm.jobs))


def _classify(
    nodes: Sequence[NodeView], policy: Policy
) -> tuple[list[Decision], list[Decision], list[NodeView]]:
    """(left alone, to resume, pool nodes free or lent), each sorted by name."""
    left_alone: list[Decision] = []
    resume: list[Decision] = []
    pool: list[NodeView] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not matches(node.labels, policy.pool_selector):
            left_alone.append(Decision(node.name, "not in the lendable pool"))
        elif policy.never_touch_selector and matches(node.labels, policy.never_touch_selector):
            left_alone.append(Decision(node.name, "never-touch"))
        elif node.journal.state == "corrupt":
            left_alone.append(Decision(node.name, f"journal unreadable: {node.journal.reason}"))
        elif node.journal.state in ("lending", "reclaiming"):
            op = node.journal.op or "?"
            resume.append(Decision(node.name, f"finish the {node.journal.state} of op {op}"))
        else:
            pool.append(node)
    return left_alone, resume, pool


def _pending_demand(pods: Sequence[PodView], policy: Policy) -> list[PodView]:
    """Application pods the scheduler could not place, in the namespaces that count."""
    return [
        pod
        for pod in pods
        if not pod.node
        and pod.phase == "Pending"
        and pod.unschedulable
        and is_application_pod(pod, policy)
        and (not policy.demand_namespaces or pod.namespace in policy.demand_namespaces)
        and matches(pod.labels, policy.demand_selector)
    ]


def _idle_marks(
    free: Sequence[NodeView], busy: Mapping[str, int], now: float
) -> dict[str, float | None]:
    """Journal idle_since changes: set when a free node is first seen idle, cleared when busy."""
    marks: dict[str, float | None] = {}
    for node in free:
        idle = busy.get(node.name, 0) == 0
        if idle and node.journal.idle_since is None:
            marks[node.name] = now
        elif not idle and node.journal.idle_since is not None:
            marks[node.name] = None
    return marks


def plan(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
    now: float,
) -> Plan:
    """What one rebalance run does; see the module docstring for the rules."""
    policy.check()
    busy: dict[str, int] = {}
    for pod in pods:
        if pod.node and pod.phase in ("Pending", "Running") and is_application_pod(pod, policy):
            busy[pod.node] = busy.get(pod.node, 0) + 1
    left_alone, resume, pool = _classify(nodes, policy)
    lent = [n for n in pool if n.journal.state == "lent"]
    free = [n for n in pool if n.journal.state == "free"]
    free_idle = [n for n in free if busy.get(n.name, 0) == 0 and n.ready and not n.unschedulable]
    pending = _pending_demand(pods, policy)
    shapes = [(n.cpu_m, n.memory_b) for n in pool if n.cpu_m and n.memory_b]
    # More demand than free and lent nodes together changes nothing in the plan.
    demand = demanded_nodes(pending, min(shapes) if shapes else (1, 1), len(pool) + len(resume))
    wanted_free = demand + policy.headroom
    budget = max(policy.max_changes_per_run - len(resume), 0)

    lend: list[Decision] = []
    reclaim: list[Decision] = []
    if len(free_idle) < wanted_free:
        take = min(wanted_free - len(free_idle), budget)
        why = f"{demand} node(s) for {len(pending)} pending pod(s)" if demand else "headroom"
        ranked = sorted(lent, key=lambda n: (reclaim_cost(slurm_nodes.get(n.name), policy), n.name))
        for node in ranked[:take]:
            reclaim.append(
                Decision(node.name, f"{why}: {len(free_idle)} free idle, {wanted_free} wanted")
            )
        left_alone += [Decision(n.name, "lent; not needed back in this run") for n in ranked[take:]]
        left_alone += [Decision(n.name, "free; the applications need the pool") for n in free]
    else:
        cap = math.floor(policy.max_lent_fraction * (len(pool) + len(resume)))
        if policy.max_lent is not None:
            cap = min(cap, policy.max_lent)
        room = min(len(free_idle) - wanted_free, cap - len(lent) - len(resume), budget)
        left_alone += [Decision(n.name, "lent") for n in lent]
        for node in free:
            blocker = lend_blocker(node, busy.get(node.name, 0), policy, now)
            if blocker is None and len(lend) < room:
                lend.append(
                    Decision(node.name, f"idle; {wanted_free} of {len(free_idle)} free idle kept")
                )
            else:
                left_alone.append(
                    Decision(node.name, blocker or "kept free: headroom, max_lent or max_changes")
                )

    return Plan(
        resume=tuple(resume),
        lend=tuple(lend),
        reclaim=tuple(reclaim),
        left_alone=tuple(sorted(left_alone, key=lambda d: d.node)),
        idle_marks=_idle_marks(free, busy, now),
        demand_nodes=demand,
        free_idle=len(free_idle),
        lent=len(lent),
    )


def status_rows(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
    now: float,
) -> list[dict[str, t.Any]]:
    """One row per pool node: its Kubernetes, journal and Slurm state, for status.yml."""
    app_pods: dict[str, int] = {}
    for pod in pods:
        if pod.node and pod.phase in ("Pending", "Running") and is_application_pod(pod, policy):
            app_pods[pod.node] = app_pods.get(pod.node, 0) + 1
    rows = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not matches(node.labels, policy.pool_selector):
            continue
        journal = node.journal
        slurm = slurm_nodes.get(node.name)
        in_state = now - journal.since if journal.since is not None else None
        rows.append(
            {
                "node": node.name,
                "kubernetes": "Ready" if node.ready else "NotReady",
                "schedulable": not node.unschedulable,
                "never_touch": bool(policy.never_touch_selector)
                and matches(node.labels, policy.never_touch_selector),
                "app_pods": app_pods.get(node.name, 0),
                "journal": journal.state,
                "op": journal.op,
                "by": journal.by,
                "reason": journal.reason,
                "in_state_s": round(in_state) if in_state is not None else None,
                "lent_for_s": round(in_state)
                if in_state is not None and journal.state == "lent"
                else None,
                "deadline_in_s": round(journal.deadline - now)
                if journal.deadline is not None and journal.state == "reclaiming"
                else None,
                "slurm": "+".join(sorted(slurm.states - {""})) if slurm else "",
                "jobs": [job.job_id for job in slurm.jobs] if slurm else [],
            }
        )
    return rows


def lend_blocker(node: NodeView, app_pods: int, policy: Policy, now: float) -> str | None:
    """Why a free pool node may not be lent now, or None."""
    if not node.ready:
        return "not Ready"
    if node.unschedulable:
        return "cordoned"
    if app_pods:
        return f"runs {app_pods} application pod(s)"
    idle_since = node.journal.idle_since if node.journal.idle_since is not None else now
    if now - idle_since < policy.lend_min_idle_s:
        return (
            f"idle for {now - idle_since:.0f} s of the {policy.lend_min_idle_s} s lend_min_idle_s"
        )
    last = node.journal.last_reclaim
    if last is not None and now - last < policy.relend_cooldown_s:
        return (
            f"reclaimed {now - last:.0f} s ago, within relend_cooldown_s {policy.relend_cooldown_s}"
        )
    return None


# ---- views of API objects (still pure: dicts in, views out) -------------------------------

_QUANTITY_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}


def quantity(value: t.Any, unit: float = 1.0) -> int:
    """A Kubernetes quantity ('500m', '32', '256Gi') in `unit`s (1/1000 for millicores)."""
    text = str(value or "0").strip()
    scale = 1.0
    if text.endswith("m"):
        text, scale = text[:-1], 1e-3
    else:
        for suffix, factor in _QUANTITY_SUFFIXES.items():
            if text.endswith(suffix):
                text, scale = text[: -len(suffix)], float(factor)
                break
    try:
        return round(float(text) * scale / unit)
    except ValueError:
        return 0


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
        if job.get("state") not in ("RUNNING", "COMPLETING", "SUSPENDED"):
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
        )
        for node in nodes
    }


# ---- what needs a person, or a clean-up: orphans and intruders ----------------------------


@dataclass(frozen=True)
class Orphan:
    """A Slurm node of a lendable NodeSet whose Kubernetes Node is gone."""

    node: str
    action: str  # drain, wait (jobs still run on the drained node) or remove
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"node": self.node, "action": self.action, "reason": self.reason}


def orphans(
    nodes: Sequence[NodeView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    lendable_features: Iterable[str],
) -> list[Orphan]:
    """Slurm nodes of the lendable NodeSets (by their feature) with no Kubernetes Node.

    A lent Node that was deleted (a machine retired, a cluster rebuilt) leaves its Slurm
    node in the lendable partition, where jobs may still be placed. It is drained first
    (jobs on it may finish), and its record removed once nothing runs there.
    """
    features = frozenset(lendable_features)
    known = {node.name for node in nodes}
    found = []
    for name in sorted(slurm_nodes):
        slurm = slurm_nodes[name]
        if name in known or not slurm.features & features:
            continue
        held = "DRAIN" in slurm.states or "DOWN" in slurm.states
        busy = bool(slurm.jobs) or bool(slurm.states & BUSY_STATES)
        state = "+".join(sorted(slurm.states - {""}))
        if not held:
            action, why = "drain", f"no Kubernetes Node; {state} in Slurm: drain it"
        elif busy:
            jobs = [job.job_id for job in slurm.jobs]
            action, why = "wait", f"no Kubernetes Node; drained, jobs {jobs} still run"
        else:
            action, why = "remove", f"no Kubernetes Node; {state} and idle: remove its record"
        found.append(Orphan(name, action, why))
    return found


def application_pods_on_lent_nodes(
    nodes: Sequence[NodeView], pods: Sequence[PodView], policy: Policy
) -> list[dict[str, str]]:
    """Application pods that run on a node lent to Slurm: they tolerate the lent taint and
    share the node with Slurm jobs, which the handover never meant to happen."""
    lent = {
        node.name: node.journal.state
        for node in nodes
        if node.journal.state in ("lending", "lent", "reclaiming")
        and matches(node.labels, policy.pool_selector)
    }
    return [
        {
            "pod": f"{pod.namespace}/{pod.name}",
            "node": pod.node,
            "journal": lent[pod.node],
            "advice": "it tolerates the lent taint and shares the node with Slurm jobs: "
            "remove that toleration from its workload, or reclaim the node",
        }
        for pod in sorted(pods, key=lambda p: (p.namespace, p.name))
        if pod.node in lent
        and pod.phase in ("Pending", "Running")
        and is_application_pod(pod, policy)
    ]


def attention(orphaned: Sequence[Orphan], apps_on_lent: Sequence[Mapping[str, str]]) -> list[str]:
    """One line per orphan and per application pod on a lent node, with what to do."""
    todo = {
        "drain": "rebalance.yml drains it, then removes its record once no job runs there",
        "wait": "rebalance.yml removes its record once its jobs end",
        "remove": "rebalance.yml removes its record",
    }
    lines = [
        f"orphaned Slurm node {orphan.node}: {orphan.reason}; {todo[orphan.action]}"
        for orphan in orphaned
    ]
    lines += [
        f"application pod {app['pod']} runs on lent node {app['node']} ({app['journal']}): "
        f"{app['advice']}"
        for app in apps_on_lent
    ]
    return lines
