# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover planner: which pool nodes to lend to Slurm, which to reclaim, and why.

PRIVATE to the collection: names here can change without notice.

A pure function of its inputs (no I/O, no clock): views of the Kubernetes Nodes and Pods,
of the Slurm nodes and their jobs, a policy and the time.  The same inputs give the same
plan, so it can be tested without a cluster and printed in check mode.  The protocol it
plans for is in docs/handover.md: nodes move free -> lending -> lent -> reclaiming -> free,
recorded in a journal annotation on the Node.

Rules, in order:

* nodes outside the pool, or matching the never-touch selector, are never planned;
* a node in ``lending`` or ``reclaiming`` is resumed before anything else is decided;
* a node whose evidence disagrees (``reconcile``: journal, lend label, taint, slurmd,
  Slurm's record and jobs, application pods) gets its condition's resolution next: the lend
  the evidence shows finished, or the node given back under its partition's grace; an
  emergency (a Slurm job beside an application pod) in the run that sees it, the others
  within ``max_changes_per_run``;
* demand is the number of pool nodes the pending application pods need (first-fit on the
  smallest pool node), plus the headroom of free nodes the site keeps for applications;
* if fewer free idle nodes exist than that, lent nodes are reclaimed, cheapest first
  (idle in Slurm, then the soonest end of their jobs, then the fewest jobs; nodes with
  jobs of a ``wait`` partition last), never more than the shortfall;
* otherwise idle free nodes beyond it are lent, within ``max_lent``; a node is lent only
  if it is Ready, schedulable, runs no application pod, has been idle ``lend_min_idle_s``
  and was not reclaimed within ``relend_cooldown_s``;
* with ``lend_when: demand`` only as many of them as Slurm's pending jobs need (``demand``:
  the jobs that fit the pool's nodes and a reclaim, placed on idle lent nodes first), plus
  ``demand_headroom`` while any job waits, longest idle first; and, with
  ``demand_return_idle_s``, when none is lent, lent nodes idle in Slurm that long that no
  waiting job needs are given back;
* a run never lends and reclaims at once, and changes at most ``max_changes_per_run``
  nodes (resumed nodes count).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import operator
import typing as t
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import (
    Shape,
    SlurmQueue,
    place,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    UNDER_WAY,
    AdminDrainPolicy,
    Condition,
    EscalationPolicy,
    JournalState,
    LendWhen,
    Policy,
    Resolution,
    matches,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reconcile import (
    Reconciled,
    SlurmRecord,
    condition_line,
    reconcile,
    slurm_record,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import HandoverMarkers
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    NodeView,
    PodView,
    SlurmNodeView,
    is_application_pod,
)


@dataclass(frozen=True)
class Decision:
    node: str
    reason: str


@dataclass(frozen=True)
class Mend:
    """A node whose evidence disagrees, and what this run does about it (lend or reclaim)."""

    node: str
    condition: str  # one of model.Condition
    action: str  # Resolution.LEND or Resolution.RECLAIM
    reason: str  # the condition and its evidence, for the journal and the Event
    emergency: bool = False

    def as_dict(self) -> dict[str, t.Any]:
        return dataclasses.asdict(self)


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
    # Slurm's side (demand.Placement.as_dict), when the plan read the queue.
    slurm_demand: Mapping[str, t.Any] | None = None
    # Nodes whose evidence disagrees that this run resolves, after `resume` and before
    # everything else.
    reconcile: tuple[Mend, ...] = ()
    # Every node with a condition (reconcile.Reconciled), whatever happens to it.
    conditions: tuple[Reconciled, ...] = ()

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
            "slurm_demand": dict(self.slurm_demand) if self.slurm_demand is not None else None,
            "reconcile": [mend.as_dict() for mend in self.reconcile],
            "conditions": [item.as_dict() for item in self.conditions],
        }


def demanded_nodes(
    pending: Sequence[PodView], shape: tuple[int, int], limit: int | None = None
) -> int:
    """Nodes of `shape` (millicores, bytes) that the pending pods need, first-fit decreasing.

    A pod larger than the shape still counts one node: it shows demand the pool may not meet.
    Counting stops past `limit` (a plan never needs to know more than the pool can give).
    Pods of one size go in together: first-fit puts each where the one before it went or
    later, so a bin takes as many as fit at once (a burst of 60,000 notebook pods is a few
    sizes, not 60,000 scans).
    """
    if not pending:
        return 0
    sizes = Counter((p.cpu_m, p.memory_b) for p in pending)
    smallest = (min(size[0] for size in sizes), min(size[1] for size in sizes))
    opened = 0
    open_bins: list[list[int]] = []  # room left in bins that can still take the smallest pod

    def how_many(room: list[int], size: tuple[int, int], count: int) -> int:
        return min(
            room[0] // size[0] if size[0] else count,
            room[1] // size[1] if size[1] else count,
            count,
        )

    def full(room: list[int]) -> bool:
        return room[0] < smallest[0] or room[1] < smallest[1]

    for size, of_size in sorted(sizes.items(), reverse=True):
        left = of_size
        index = 0
        while left and index < len(open_bins):
            room = open_bins[index]
            fit = how_many(room, size, left)
            if not fit:
                index += 1
                continue
            room[0] -= fit * size[0]
            room[1] -= fit * size[1]
            left -= fit
            if full(room):
                del open_bins[index]
        while left:
            opened += 1
            if limit is not None and opened > limit:
                return opened
            room = [shape[0], shape[1]]
            fit = max(how_many(room, size, left), 1)  # a pod larger than the node, alone
            room = [max(room[0] - fit * size[0], 0), max(room[1] - fit * size[1], 0)]
            left -= fit
            if not full(room):
                open_bins.append(room)
    return opened


_PARTITION = operator.attrgetter("partition")
_END_TIME = operator.attrgetter("end_time")


def reclaim_cost(slurm: SlurmNodeView | None, policy: Policy) -> tuple[t.Any, ...]:
    """Sort key: cheapest node to take back first."""
    if slurm is None:
        return (0, 0, 0.0, 0)
    # A partition's policy once per node, not once per job: a plan ranks every lent node,
    # so its jobs are read in C-level passes (map over attrgetter, no generator frames).
    waits = any(
        policy.partition(partition).escalation == EscalationPolicy.WAIT
        for partition in set(map(_PARTITION, slurm.jobs))
    )
    ends = list(map(_END_TIME, slurm.jobs))
    end = math.inf if None in ends else max(t.cast("list[float]", ends), default=0.0)
    return (int(waits), int(slurm.busy), end, len(slurm.jobs))


_Planner = t.TypeVar("_Planner", bound=t.Callable[..., t.Any])


def _cyclic_gc_paused(planner: _Planner) -> _Planner:
    """The planner with Python's cyclic GC paused while it runs. A plan makes no reference
    cycles, while its caller holds views of every node and job: a full collection over
    those in the middle of a plan cost as much as the plan (0.3 s at 50,000 nodes and
    500,000 jobs). Reference counting still frees as usual."""

    @functools.wraps(planner)
    def paused(*args: t.Any, **kwargs: t.Any) -> t.Any:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return planner(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return t.cast("_Planner", paused)


# Why a node that left the pool with our marks on it is not planned.
LEFT_THE_POOL = "left the pool with our marks on it: reclaim it by name"


def _classify(
    nodes: Sequence[NodeView], policy: Policy, reconciled: Mapping[str, Reconciled]
) -> tuple[list[Decision], list[Decision], list[Mend], list[NodeView]]:
    """(left alone, to resume, to reconcile, pool nodes free or lent), each sorted by name
    (those to reconcile: emergencies first)."""
    left_alone: list[Decision] = []
    resume: list[Decision] = []
    mend: list[Mend] = []
    pool: list[NodeView] = []
    for node in sorted(nodes, key=lambda n: n.name):
        item = reconciled.get(node.name)
        condition = item.condition if item else ""
        left = condition == Condition.LEFT_THE_POOL
        if item and item.resolution in (Resolution.LEND, Resolution.RECLAIM):
            mend.append(
                Mend(
                    node.name,
                    condition,
                    item.resolution,
                    f"{condition}: {item.evidence.text()}",
                    item.emergency,
                )
            )
        elif not matches(node.labels, policy.pool_selector):
            left_alone.append(
                Decision(node.name, LEFT_THE_POOL if left else "not in the lendable pool")
            )
        elif policy.never_touch_selector and matches(node.labels, policy.never_touch_selector):
            left_alone.append(
                Decision(node.name, f"never-touch; {LEFT_THE_POOL}" if left else "never-touch")
            )
        elif node.journal.state == JournalState.CORRUPT:
            left_alone.append(Decision(node.name, f"journal unreadable: {node.journal.reason}"))
        elif node.journal.state in (JournalState.LENDING, JournalState.RECLAIMING):
            op = node.journal.op or "?"
            why = f"finish the {node.journal.state} of op {op}"
            resume.append(Decision(node.name, f"{why} ({condition})" if condition else why))
        else:
            pool.append(node)
    mend.sort(key=lambda m: (not m.emergency, m.node))
    return left_alone, resume, mend, pool


def pending_demand(pods: Sequence[PodView], policy: Policy) -> list[PodView]:
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


@_cyclic_gc_paused
def plan(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
    now: float,
    queue: SlurmQueue | None = None,
    *,
    markers: HandoverMarkers | None = None,
    lendable_features: Iterable[str] | None = None,
    reconciled: Mapping[str, Reconciled] | None = None,
) -> Plan:
    """What one rebalance run does; see the module docstring for the rules. `queue` is
    Slurm's side: without it, ``lend_when: demand`` lends nothing. `markers` name the lend
    label and taint the Nodes' views are read for (None: views without them, where the
    journal stands for them); `reconciled` is what ``reconcile`` found, when the caller has
    it already."""
    policy.check()
    if reconciled is None:
        reconciled = reconcile(
            nodes,
            pods,
            slurm_nodes,
            policy,
            markers or HandoverMarkers(),
            lendable_features,
            marks_known=markers is not None,
        )
    busy: dict[str, int] = {}
    for pod in pods:
        if pod.node and pod.phase in ("Pending", "Running") and is_application_pod(pod, policy):
            busy[pod.node] = busy.get(pod.node, 0) + 1
    left_alone, resume, mend, pool = _classify(nodes, policy, reconciled)
    # Emergencies in the run that sees them; the other conditions as resumes are, within
    # max_changes_per_run.
    urgent = sum(1 for m in mend if m.emergency)
    room_to_mend = urgent + max(policy.max_changes_per_run - len(resume) - urgent, 0)
    left_alone += [
        Decision(
            m.node, f"{m.condition}: its {m.action} waits for a later run (max_changes_per_run)"
        )
        for m in mend[room_to_mend:]
    ]
    under_way = len(resume) + len(mend)
    mend = mend[:room_to_mend]
    lent = [n for n in pool if n.journal.state == JournalState.LENT]
    free = [n for n in pool if n.journal.state == JournalState.FREE]
    free_idle = [n for n in free if busy.get(n.name, 0) == 0 and n.ready and not n.unschedulable]
    pending = pending_demand(pods, policy)
    demand = application_demand(pending, pool, under_way)
    wanted_free = demand + policy.headroom
    budget = max(policy.max_changes_per_run - len(resume) - len(mend), 0)

    lend: list[Decision] = []
    reclaim: list[Decision] = []
    slurm_demand: dict[str, t.Any] | None = None
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
        room = lend_room(
            pool=len(pool),
            lent=len(lent),
            under_way=under_way,
            free_idle=len(free_idle),
            wanted_free=wanted_free,
            policy=policy,
        )
        blockers = {
            node.name: _lend_blocker_here(node, busy, slurm_nodes, policy, now) for node in free
        }
        if policy.lend_when == LendWhen.DEMAND:
            resumed = {d.node for d in resume}
            lending = [
                n for n in nodes if n.name in resumed and n.journal.state == JournalState.LENDING
            ]
            lend, reclaim, kept, slurm_demand = _lend_on_demand(
                pool,
                [*lent, *lending],
                free,
                blockers,
                slurm_nodes,
                policy,
                now,
                room,
                budget,
                queue,
            )
            left_alone += kept
        else:
            left_alone += [Decision(n.name, "lent") for n in lent]
            for node in free:
                blocker = blockers[node.name]
                if blocker is None and len(lend) < room:
                    why = f"idle; {wanted_free} of {len(free_idle)} free idle kept"
                    lend.append(Decision(node.name, why))
                else:
                    why = blocker or "kept free: headroom, max_lent or max_changes"
                    left_alone.append(Decision(node.name, why))

    return Plan(
        resume=tuple(resume),
        lend=tuple(lend),
        reclaim=tuple(reclaim),
        left_alone=tuple(sorted(left_alone, key=lambda d: d.node)),
        idle_marks=_idle_marks(free, busy, now),
        demand_nodes=demand,
        free_idle=len(free_idle),
        lent=len(lent),
        slurm_demand=slurm_demand,
        reconcile=tuple(mend),
        conditions=tuple(item for _name, item in sorted(reconciled.items()) if item.condition),
    )


def application_demand(pending: Sequence[PodView], pool: Sequence[NodeView], under_way: int) -> int:
    """Pool nodes the pending application pods need (first-fit on the smallest pool node of
    `pool`, the free and lent ones); more than the pool holds changes nothing."""
    shapes = [(n.cpu_m, n.memory_b) for n in pool if n.cpu_m and n.memory_b]
    return demanded_nodes(pending, min(shapes) if shapes else (1, 1), len(pool) + under_way)


def lend_room(
    *, pool: int, lent: int, under_way: int, free_idle: int, wanted_free: int, policy: Policy
) -> int:
    """How many free idle nodes a run may lend: those beyond `wanted_free`, within
    max_lent and max_lent_fraction of the pool (`pool` free and lent nodes, `under_way`
    lending or reclaiming), and within max_changes_per_run less the handovers under way."""
    cap = math.floor(policy.max_lent_fraction * (pool + under_way))
    if policy.max_lent is not None:
        cap = min(cap, policy.max_lent)
    budget = max(policy.max_changes_per_run - under_way, 0)
    return max(min(free_idle - wanted_free, cap - lent - under_way, budget), 0)


def _lend_blocker_here(
    node: NodeView,
    busy: Mapping[str, int],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
    now: float,
) -> str | None:
    """Why a free pool node may not be lent in this run, or None."""
    blocker = lend_blocker(node, busy.get(node.name, 0), policy, now)
    if blocker is None and node.name in slurm_nodes:
        # A record left from an earlier loan (the Node was deleted and came back): a new
        # slurmd would register into it, drained. The rebalance cleans it first.
        blocker = "its Slurm record from an earlier loan is still there (an orphan)"
    return blocker


def _lend_on_demand(
    pool: Sequence[NodeView],
    lent: Sequence[NodeView],
    free: Sequence[NodeView],
    blockers: Mapping[str, str | None],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
    now: float,
    room: int,
    budget: int,
    queue: SlurmQueue | None,
) -> tuple[list[Decision], list[Decision], list[Decision], dict[str, t.Any]]:
    """lend_when demand: (lend, reclaim, left alone, Slurm's demand). `lent` holds the
    nodes lent or being lent; only those lent are given back, and only when the queue was
    read (without it nothing is known to need them)."""
    if queue is None:
        queue = SlurmQueue()
        budget = 0
    by_idle = sorted(
        (n for n in free if blockers[n.name] is None),
        key=lambda n: (n.journal.idle_since if n.journal.idle_since is not None else now, n.name),
    )
    # Each node as Slurm will have it: a lent node in Slurm's own numbers (demand.py).
    lent_names = {n.name for n in lent}
    offers = {
        n.name: queue.offer(n.name, n.labels, _shape(n), lent=n.name in lent_names)
        for n in [*pool, *lent]
    }
    placement = place(
        queue.jobs,
        queue.partitions,
        policy,
        [offers[n.name] for n in pool],
        [(n.name, offers[n.name]) for n in lent if _idle_in_slurm(slurm_nodes.get(n.name))],
        [(n.name, offers[n.name]) for n in by_idle],
        room,
    )
    chosen = list(placement.lend)
    if chosen or placement.unplaced:
        # Headroom: nodes beyond what the waiting jobs need, while any job waits.
        spare = [n.name for n in by_idle if n.name not in chosen]
        chosen += spare[: max(min(policy.demand_headroom, room - len(chosen)), 0)]
    lend = [
        Decision(
            name,
            f"for pending job(s) {_job_ids(placement.jobs_for[name])} of Slurm"
            if name in placement.jobs_for
            else "demand_headroom: jobs wait in Slurm",
        )
        for name in chosen
    ]
    kept = [
        Decision(
            n.name,
            blockers[n.name]
            or (
                f"kept free: job(s) {_job_ids(placement.unplaced)} need more "
                "nodes than this run can lend"
                if placement.unplaced
                else "free; no job waiting in Slurm needs it"
            ),
        )
        for n in free
        if n.name not in chosen
    ]
    lent_now = [n for n in lent if n.journal.state == JournalState.LENT]
    returned = (
        []
        if chosen
        else _idle_lent_to_return(lent_now, slurm_nodes, placement.used_lent, policy, now)
    )
    reclaim = [
        Decision(node.name, f"idle in Slurm {idle_s:.0f} s; no waiting job needs it")
        for node, idle_s in returned[:budget]
    ]
    taken = {d.node for d in reclaim}
    kept += [
        Decision(
            n.name,
            "lent; a waiting job will run there" if n.name in placement.used_lent else "lent",
        )
        for n in lent_now
        if n.name not in taken
    ]
    return lend, reclaim, kept, placement.as_dict()


def _job_ids(ids: Sequence[int], shown: int = 5) -> str:
    """Job ids as a reason names them: the first few, then how many more."""
    more = len(ids) - shown
    return ", ".join(map(str, ids[:shown])) + (f" and {more} more" if more > 0 else "")


def _shape(node: NodeView) -> Shape:
    return Shape(node.cpu_m, node.memory_b, node.gpus)


def _idle_in_slurm(slurm: SlurmNodeView | None) -> bool:
    """A lent node a job could start on now: idle in Slurm, or not registered yet."""
    return slurm is None or ("IDLE" in slurm.states and not slurm.busy and not slurm.kept_from_jobs)


def _idle_lent_to_return(
    lent: Sequence[NodeView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    wanted: set[str],
    policy: Policy,
    now: float,
) -> list[tuple[NodeView, float]]:
    """Lent nodes idle in Slurm for demand_return_idle_s (since their last job, or their
    lend) that no waiting job needs, with their idle seconds; longest idle first. None when
    the policy keeps them lent until the applications need them."""
    if policy.demand_return_idle_s is None:
        return []
    found = []
    for node in lent:
        slurm = slurm_nodes.get(node.name)
        if slurm is None or node.name in wanted or not _idle_in_slurm(slurm):
            continue
        since = max(slurm.last_busy or 0.0, node.journal.since or 0.0)
        if since and now - since >= policy.demand_return_idle_s:
            found.append((node, now - since))
    return sorted(found, key=lambda item: (-item[1], item[0].name))


def status_rows(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
    now: float,
    reconciled: Mapping[str, Reconciled] | None = None,
    markers: HandoverMarkers | None = None,
) -> list[dict[str, t.Any]]:
    """One row per pool node, and per node that left the pool with our marks on it (its
    `in_pool` false): its Kubernetes, journal and Slurm state and its condition, for
    status.yml."""
    app_pods: dict[str, int] = {}
    for pod in pods:
        if pod.node and pod.phase in ("Pending", "Running") and is_application_pod(pod, policy):
            app_pods[pod.node] = app_pods.get(pod.node, 0) + 1
    reconciled = reconciled or {}
    markers = markers or HandoverMarkers()
    with_slurmd = {pod.node for pod in pods if pod.live_slurmd and pod.node}
    rows = []
    for node in sorted(nodes, key=lambda n: n.name):
        item = reconciled.get(node.name)
        in_pool = matches(node.labels, policy.pool_selector)
        if not in_pool and not (item and item.evidence.marked):
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
                if in_state is not None and journal.state == JournalState.LENT
                else None,
                "deadline_in_s": round(journal.deadline - now)
                if journal.deadline is not None and journal.state == JournalState.RECLAIMING
                else None,
                "slurm": "+".join(sorted(slurm.states - {""})) if slurm else "",
                "jobs": [job.job_id for job in slurm.jobs] if slurm else [],
                "admin_drain": journal.admin_drain or admin_drain_of(slurm),
                "in_pool": in_pool,
                "condition": item.condition if item else "",
                "resolution": item.resolution if item else "",
                "emergency": bool(item and item.emergency),
                "lend_label": node.labels.get(markers.lend_label) == markers.lend_label_value,
                "taint": (markers.taint_key, markers.taint_effect) in node.taints,
                "slurmd": node.name in with_slurmd,
                # The Slinky operator's own drain ("slurm-operator: Pod ... scale-in").
                "operator_drain": slurm.reason
                if slurm_record(slurm, markers) == SlurmRecord.DRAINED_OPERATOR and slurm
                else "",
            }
        )
    return rows


def admin_drain_of(slurm: SlurmNodeView | None) -> str:
    """The reason of a drain somebody else set on a Slurm node ("hw: ECC errors"), or ''."""
    if slurm is None or "DRAIN" not in slurm.states:
        return ""
    return slurm.reason if HandoverMarkers().is_admin_reason(slurm.reason) else ""


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


# ---- what needs a person, or a clean-up: orphans and intruders ----------------------------


class OrphanAction:
    """What rebalance does next about an orphan."""

    DRAIN: t.Final = "drain"
    WAIT: t.Final = "wait"  # jobs still run on the drained node
    REMOVE: t.Final = "remove"  # its Slurm record


@dataclass(frozen=True)
class Orphan:
    """A Slurm node of a lendable NodeSet that no lent node stands for."""

    node: str
    action: str  # one of OrphanAction
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"node": self.node, "action": self.action, "reason": self.reason}


def orphans(
    nodes: Sequence[NodeView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    lendable_features: Iterable[str],
    pods: Sequence[PodView] = (),
) -> list[Orphan]:
    """Slurm nodes of the lendable NodeSets (by their feature) that no lent node stands for.

    A lent Node that was deleted (a machine retired, a cluster rebuilt) leaves its Slurm
    node in the lendable partition, where jobs may still be placed; so does one that came
    back before that record was removed (a new Node: free in the journal, no slurmd). It is
    drained first (jobs on it may finish, or meet the partition's escalation once its grace
    has passed), and its record removed once nothing runs there.
    """
    features = frozenset(lendable_features)
    journals = {node.name: node.journal.state for node in nodes}
    with_slurmd = {pod.node for pod in pods if pod.live_slurmd}
    found = []
    for name in sorted(slurm_nodes):
        slurm = slurm_nodes[name]
        if not slurm.features & features:
            continue
        if name not in journals:
            where = "no Kubernetes Node"
        elif journals[name] == JournalState.FREE and name not in with_slurmd:
            where = "its Kubernetes Node came back, free in the journal and without slurmd"
        else:
            continue  # lent, or on its way there or back: the handover owns it
        state = "+".join(sorted(slurm.states - {""}))
        if not slurm.kept_from_jobs:
            action, why = OrphanAction.DRAIN, f"{where}; {state} in Slurm: drain it"
        elif slurm.busy:
            jobs = [job.job_id for job in slurm.jobs]
            action, why = OrphanAction.WAIT, f"{where}; drained, jobs {jobs} still run"
        else:
            action = OrphanAction.REMOVE
            why = f"{where}; {state} and idle: remove its record"
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
        if node.journal.state in UNDER_WAY and matches(node.labels, policy.pool_selector)
    }
    return [
        {
            "pod": f"{pod.namespace}/{pod.name}",
            "node": pod.node,
            "journal": lent[pod.node],
            # The node itself is reconciled (rebalance.yml gives it back); the workload is
            # a person's to fix.
            "advice": "it tolerates the lent taint and shares the node with Slurm jobs: "
            "remove that toleration from its workload",
        }
        for pod in sorted(pods, key=lambda p: (p.namespace, p.name))
        if pod.node in lent
        and pod.phase in ("Pending", "Running")
        and is_application_pod(pod, policy)
    ]


def attention(
    orphaned: Sequence[Orphan],
    apps_on_lent: Sequence[Mapping[str, str]],
    conditions: Sequence[Reconciled] = (),
    admin_drains: Sequence[Mapping[str, str]] = (),
    markers: HandoverMarkers | None = None,
) -> list[dict[str, str]]:
    """What needs a clean-up or a person, one item per line: ``node``, ``condition`` (a
    model.Condition, ``admin_drain`` or ``apps_on_lent_node``) and ``line`` (what was found
    and what to do, or what a run does)."""
    markers = markers or HandoverMarkers()
    todo = {
        OrphanAction.DRAIN: "rebalance.yml drains it, then removes its record once no job runs there",
        OrphanAction.WAIT: (
            "rebalance.yml removes its record once its jobs end, or meet their partition's "
            "escalation when its grace has passed"
        ),
        OrphanAction.REMOVE: "rebalance.yml removes its record",
    }
    items = [
        {
            "node": orphan.node,
            "condition": Condition.ORPHAN_RECORD,
            "line": f"orphaned Slurm node {orphan.node}: {orphan.reason}; {todo[orphan.action]}",
        }
        for orphan in orphaned
    ]
    items += [
        {"node": item.node, "condition": item.condition, "line": condition_line(item, markers)}
        for item in sorted(conditions, key=lambda i: (not i.emergency, i.node))
        # An orphan's record has its own line above.
        if item.condition and item.condition != Condition.ORPHAN_RECORD
    ]
    items += [
        {
            "node": app["node"],
            "condition": "apps_on_lent_node",
            "line": f"application pod {app['pod']} runs on lent node {app['node']} "
            f"({app['journal']}): {app['advice']}",
        }
        for app in apps_on_lent
    ]
    items += [
        {"node": drain["node"], "condition": "admin_drain", "line": drain["line"]}
        for drain in admin_drains
    ]
    return items


def admin_drains(
    nodes: Sequence[NodeView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
) -> list[dict[str, str]]:
    """Lent nodes somebody drained in Slurm, and nodes given back cordoned for such a drain,
    each with what a person does (``node`` and ``line``)."""
    found = []
    for node in sorted(nodes, key=lambda n: n.name):
        journal = node.journal
        reason = admin_drain_of(slurm_nodes.get(node.name))
        if journal.state == JournalState.LENT and reason:
            back = (
                "cordoned, until a person uncordons it"
                if policy.admin_drain == AdminDrainPolicy.CORDON
                else "schedulable (admin_drain: return)"
            )
            found.append(
                {
                    "node": node.name,
                    "line": f"lent node {node.name} was drained in Slurm by someone else "
                    f"({reason!r}): Slurm starts no job there. Once the machine is fit, resume "
                    f"it in Slurm (scontrol update nodename={node.name} state=resume); or give "
                    "it back by name (reclaim.yml -e "
                    f'\'{{"handover_nodes": ["{node.name}"]}}\'): the reclaim removes the '
                    "Slurm record and its reason with it, keeps the reason in the Node's "
                    f"journal (admin_drain) and a Warning Event, and gives the node back {back}",
                }
            )
        elif journal.state == JournalState.FREE and journal.admin_drain and node.unschedulable:
            found.append(
                {
                    "node": node.name,
                    "line": f"node {node.name} came back cordoned: its Slurm node had been "
                    f"drained by someone else ({journal.admin_drain!r}, kept in its journal); "
                    f"uncordon it (kubectl uncordon {node.name}) once it is fit for applications",
                }
            )
    return found
