# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: when an event-driven handover run is due (pure: no I/O, no clock).

The event source ``extensions/eda/plugins/event_source/handover_events.py`` feeds a
`PoolWatch` what its watches see (Pods, the pool's Nodes, the handover Lease) and asks it,
with the time, which event to emit now and when to look again:

* ``demand``: application pods the planner would count as demand (`pending_demand`) are
  unschedulable. The first is announced at once; pods that follow within ``debounce_s`` of
  an announcement are gathered into the next event. Demand is
  level-triggered: announced again every ``repeat_s`` while such pods stay unschedulable, so
  an event whose run found the Lease held, or failed, is not lost.
* ``slurm_demand`` (``lend_when: demand``, with Slurm's queue polled by the source): pending
  jobs of the lendable partitions that an idle pool node would start, as the planner's
  `place` places them on the free nodes it could lend now (`lend_blocker`, longest idle
  first, within the room its headroom, ``max_lent`` and ``max_changes_per_run`` leave).
  The source does not read Slurm's nodes, so a job that a lent node idle in Slurm would
  start counts too; the run's plan then lends nothing for it. Edge-triggered on new job
  ids (the first at once, those that follow within ``debounce_s`` gathered), and repeated
  every ``repeat_s`` while such jobs wait and a node could be lent for them; a repeat waits
  for a read of the queue that began after the last run that held the Lease ended (one read
  before it may still show the jobs that run has started).
* ``idle``: a free pool node has run no application pod for ``lend_min_idle_s`` (by the
  journal's ``idle_since``, the clock the planner lends by), or is idle and its journal has
  no ``idle_since`` yet (a run records it). Announced once per node and idle period, and
  only while more nodes are idle than the policy's headroom keeps free. With
  ``lend_when: demand`` only the latter: idle nodes alone lend nothing then.

Nothing is announced while another run holds the Lease live: the event waits for its release
(or expiry) instead of starting a run that would find it held.
"""

from __future__ import annotations

import math
import typing as t
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import (
    Placement,
    Shape,
    SlurmQueue,
    place,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    JournalState,
    LendWhen,
    Policy,
    matches,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import (
    application_demand,
    lend_blocker,
    lend_room,
    pending_demand,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    NodeView,
    PodView,
    is_application_pod,
    node_view,
    pod_view,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.lease import (
    LeaseAction,
    decide,
)


class Trigger:
    """What an event announces (``event.handover.trigger``)."""

    DEMAND: t.Final = "demand"
    SLURM_DEMAND: t.Final = "slurm_demand"
    IDLE: t.Final = "idle"


class WatchedKind:
    """The objects the source watches, and Slurm's queue it polls."""

    POD: t.Final = "Pod"
    NODE: t.Final = "Node"
    LEASE: t.Final = "Lease"
    SLURM_QUEUE: t.Final = "SlurmQueue"


# How many pods, nodes or jobs an event's reason names before it says "and N more".
REASON_NAMES = 5

Event = dict[str, t.Any]


@dataclass(frozen=True)
class TriggerSettings:
    policy: Policy
    journal_annotation: str = "hpcops.io/handover"
    debounce_s: float = 2.0
    repeat_s: float = 30.0
    # Who the source is to the Lease: never a holder, so any live holder is another run.
    observer: str = "hpcops-slinky-event-source"


def _pod_key(pod: PodView) -> str:
    return f"{pod.namespace}/{pod.name}"


def _named(names: Sequence[t.Any]) -> str:
    shown = ", ".join(str(name) for name in names[:REASON_NAMES])
    more = len(names) - REASON_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _shape(node: NodeView) -> Shape:
    return Shape(node.cpu_m, node.memory_b, node.gpus)


def _edge_then_level(
    seen: Mapping[t.Any, float],
    announced: Iterable[t.Any],
    announced_at: float | None,
    settings: TriggerSettings,
) -> float:
    """When to announce what is `seen` (key -> when first seen): at once for a key the last
    announcement did not have (keys that follow within debounce_s of an announcement are
    gathered into the next), else every repeat_s."""
    last = float("-inf") if announced_at is None else announced_at
    done = set(announced)
    new = [when for key, when in seen.items() if key not in done]
    if new:
        return max(min(new), last + settings.debounce_s)
    return last + settings.repeat_s


class PoolWatch:
    """The pool as the watches last reported it, Slurm's queue as last polled, and what has
    been announced."""

    def __init__(self, settings: TriggerSettings) -> None:
        self.settings = settings
        self.nodes: dict[str, NodeView] = {}
        self.pods: dict[str, PodView] = {}
        self.lease: Mapping[str, t.Any] | None = None
        self.queue: SlurmQueue | None = None  # None: not read, or the last read failed
        self.queue_read_at: float | None = None  # when the read of `queue` began
        self._demand_seen: dict[str, float] = {}  # pod key -> when first seen pending
        self._demand_announced_at: float | None = None
        self._idle_announced: set[tuple[str, float | None]] = set()
        self._jobs_seen: dict[int, float] = {}  # job id -> when first seen to start on a lend
        self._jobs_announced: frozenset[int] = frozenset()
        self._jobs_announced_at: float | None = None
        self._queue_read = 0  # counts the queues taken, to know when to place again
        self._placed: tuple[tuple[t.Any, ...], Placement] | None = None
        # When the Lease was first seen free after another run held it (its run has ended).
        self._lease_held = False
        self._lease_free_since: float | None = None

    # What the watches report.

    def replace(self, kind: str, objects: Iterable[Mapping[str, t.Any]]) -> None:
        """Everything of `kind` after a (re)list: what is not listed is gone."""
        if kind == WatchedKind.POD:
            self.pods = {_pod_key(p): p for p in (pod_view(o) for o in objects)}
        elif kind == WatchedKind.NODE:
            self.nodes = {}
            for obj in objects:
                self.apply(kind, "ADDED", obj)
        elif kind == WatchedKind.LEASE:
            listed = list(objects)
            self.lease = listed[0] if listed else None

    def apply(self, kind: str, event_type: str, obj: Mapping[str, t.Any]) -> None:
        """One watch event (ADDED, MODIFIED or DELETED) of `kind`."""
        deleted = event_type == "DELETED"
        if kind == WatchedKind.POD:
            pod = pod_view(obj)
            if deleted:
                self.pods.pop(_pod_key(pod), None)
            else:
                self.pods[_pod_key(pod)] = pod
        elif kind == WatchedKind.NODE:
            node = node_view(obj, self.settings.journal_annotation)
            policy = self.settings.policy
            in_pool = matches(node.labels, policy.pool_selector) and not (
                policy.never_touch_selector and matches(node.labels, policy.never_touch_selector)
            )
            if deleted or not in_pool:
                self.nodes.pop(node.name, None)
            else:
                self.nodes[node.name] = node
        elif kind == WatchedKind.LEASE:
            self.lease = None if deleted else obj

    def take_queue(self, queue: SlurmQueue | None, read_at: float | None = None) -> None:
        """Slurm's queue as a poll that began at `read_at` read it; None when the poll
        failed (nothing is then known of Slurm's demand until a read succeeds again)."""
        self.queue = queue
        self.queue_read_at = read_at if queue is not None else None
        self._queue_read += 1

    # What to announce.

    def lease_held_for(self, now: float) -> float | None:
        """Seconds another run still holds the Lease; None when nobody holds it live."""
        decision = decide(self.lease, self.settings.observer, now)
        if decision.action != LeaseAction.KEEP:
            return None
        return decision.expires_in if decision.expires_in is not None else 0.0

    def _looks(self, now: float) -> list[tuple[str, Event | None, float | None]]:
        """Each trigger's event due now (or None) and when it will be due, in the order
        they go out: application pods first (a reclaim), then Slurm's jobs, then idle nodes."""
        return [
            (Trigger.DEMAND, *self._demand(now)),
            (Trigger.SLURM_DEMAND, *self._slurm_demand(now)),
            (Trigger.IDLE, *self._idle(now)),
        ]

    def due(self, now: float) -> tuple[Event | None, float | None]:
        """The event to emit now (or None), and when to look again (None: at the next change)."""
        held = self.lease_held_for(now)
        if held is not None:
            self._lease_held = True
        elif self._lease_held:
            self._lease_held = False
            self._lease_free_since = now
        looks = self._looks(now)
        wake = min((at for _name, _event, at in looks if at is not None), default=None)
        wanted = next(((name, event) for name, event, _at in looks if event is not None), None)
        if wanted is None:
            return None, wake
        if held is not None:
            # The run that holds it may well do what the event asks; look once it ends.
            return None, now + max(held, 0.5)
        name, event = wanted
        if name == Trigger.DEMAND:
            self._demand_announced_at = now
        elif name == Trigger.SLURM_DEMAND:
            self._jobs_announced_at = now
            self._jobs_announced = frozenset(event["jobs"])
        else:
            self._idle_announced.update(self._idle_keys(now))
        return event, self._next_wake(now)

    def _next_wake(self, now: float) -> float | None:
        # Another trigger's event due now too goes out at the next look, at once.
        return min(
            (now if event is not None else at for _name, event, at in self._looks(now)),
            key=lambda at: math.inf if at is None else at,
            default=None,
        )

    def _demand(self, now: float) -> tuple[Event | None, float | None]:
        pending = sorted(
            _pod_key(p) for p in pending_demand(list(self.pods.values()), self.settings.policy)
        )
        self._demand_seen = {key: self._demand_seen.get(key, now) for key in pending}
        if not pending:
            self._demand_announced_at = None
            return None, None
        last = self._demand_announced_at
        unannounced = [seen for seen in self._demand_seen.values() if last is None or seen > last]
        if unannounced:
            # The first pod of a burst is announced at once (a run takes seconds, and its
            # plan counts every pod pending by then); those that follow within debounce_s
            # of an announcement are gathered into the next one.
            at = max(min(unannounced), (last or float("-inf")) + self.settings.debounce_s)
        else:
            at = (last or now) + self.settings.repeat_s
        if now < at:
            return None, at
        reason = f"{len(pending)} unschedulable application pod(s): {_named(pending)}"
        event = {"trigger": Trigger.DEMAND, "reason": reason, "pods": pending, "nodes": []}
        return event, None

    def _app_pods_per_node(self) -> dict[str, int]:
        policy = self.settings.policy
        busy: dict[str, int] = {}
        for pod in self.pods.values():
            if pod.node and pod.phase in ("Pending", "Running") and is_application_pod(pod, policy):
                busy[pod.node] = busy.get(pod.node, 0) + 1
        return busy

    def _idle_free_nodes(self) -> list[NodeView]:
        busy = self._app_pods_per_node()
        return [
            n
            for n in self.nodes.values()
            if n.journal.state == JournalState.FREE
            and n.ready
            and not n.unschedulable
            and n.name not in busy
        ]

    # Slurm's demand (lend_when demand).

    def _lend_room(self, free_idle: int) -> int:
        """How many free nodes a run could lend now, by the planner's own limits."""
        policy = self.settings.policy
        states = [n.journal.state for n in self.nodes.values()]
        under_way = sum(s in (JournalState.LENDING, JournalState.RECLAIMING) for s in states)
        pool = [
            n
            for n in self.nodes.values()
            if n.journal.state in (JournalState.FREE, JournalState.LENT)
        ]
        pending = pending_demand(list(self.pods.values()), policy)
        return lend_room(
            pool=len(pool),
            lent=sum(s == JournalState.LENT for s in states),
            under_way=under_way,
            free_idle=free_idle,
            wanted_free=policy.headroom + application_demand(pending, pool, under_way),
            policy=policy,
        )

    def _lendable_now(self, now: float) -> list[NodeView]:
        """The free pool nodes the planner could lend now (its lend_blocker), longest idle
        first (a node with no idle_since yet counts as idle since now, as in the plan)."""
        busy = self._app_pods_per_node()
        policy = self.settings.policy
        lendable = [
            n
            for n in self.nodes.values()
            if n.journal.state == JournalState.FREE
            and lend_blocker(n, busy.get(n.name, 0), policy, now) is None
        ]
        return sorted(
            lendable,
            key=lambda n: (
                n.journal.idle_since if n.journal.idle_since is not None else now,
                n.name,
            ),
        )

    def _placement(self, queue: SlurmQueue, now: float) -> Placement:
        """demand.place() over the queue and the nodes lendable now; placed again only when
        the queue, those nodes or the room change."""
        policy = self.settings.policy
        free = [(n.name, _shape(n)) for n in self._lendable_now(now)]
        room = min(len(free), self._lend_room(len(self._idle_free_nodes())))
        shapes = [
            _shape(n)
            for n in self.nodes.values()
            if n.journal.state in (JournalState.FREE, JournalState.LENT)
        ]
        key = (self._queue_read, tuple(free), room, tuple(sorted(set(shapes), key=repr)))
        if self._placed is None or self._placed[0] != key:
            # No idle lent nodes: the source does not read Slurm's nodes (see the docstring).
            placement = place(queue.jobs, queue.partitions, policy, shapes, [], free, room)
            self._placed = (key, placement)
        return self._placed[1]

    def _stale_queue(self) -> bool:
        """Whether the queue was read before the last run that held the Lease ended: a job
        announced again on it may be one that run has started since."""
        free_since = self._lease_free_since
        read_at = self.queue_read_at
        return free_since is not None and (read_at is None or read_at < free_since)

    def _upcoming_lendable(self, now: float) -> float | None:
        """When the next free idle node becomes lendable by the clock (its lend_min_idle_s
        or its cool-down), if one will."""
        policy = self.settings.policy
        times = [
            max(
                n.journal.idle_since + policy.lend_min_idle_s,
                (n.journal.last_reclaim or 0.0) + policy.relend_cooldown_s,
            )
            for n in self._idle_free_nodes()
            if n.journal.idle_since is not None
        ]
        return min((at for at in times if at > now), default=None)

    def _slurm_demand(self, now: float) -> tuple[Event | None, float | None]:
        queue = self.queue
        if self.settings.policy.lend_when != LendWhen.DEMAND or queue is None:
            return None, None
        placement = self._placement(queue, now)
        jobs = sorted({job for name in placement.lend for job in placement.jobs_for[name]})
        if not jobs:
            self._jobs_seen = {}
            self._jobs_announced = frozenset()
            self._jobs_announced_at = None
            return None, self._upcoming_lendable(now) if queue.jobs else None
        self._jobs_seen = {job: self._jobs_seen.get(job, now) for job in jobs}
        if set(jobs) <= self._jobs_announced and self._stale_queue():
            return None, None  # the next read looks again
        at = _edge_then_level(
            self._jobs_seen, self._jobs_announced, self._jobs_announced_at, self.settings
        )
        if now < at:
            return None, at
        nodes = list(placement.lend)
        reason = (
            f"{len(jobs)} job(s) waiting in Slurm that {len(nodes)} idle pool node(s) would "
            f"start: {_named(jobs)}"
        )
        event = {
            "trigger": Trigger.SLURM_DEMAND,
            "reason": reason,
            "pods": [],
            "nodes": nodes,
            "jobs": jobs,
        }
        return event, None

    # Idle nodes.

    def _idle_keys(self, now: float) -> list[tuple[str, float | None]]:
        """The idle nodes a run could act on now: record idle_since, or (lend_when idle)
        lend."""
        policy = self.settings.policy
        idle = self._idle_free_nodes()
        if len(idle) <= policy.headroom:
            return []
        on_demand = policy.lend_when == LendWhen.DEMAND
        keys = []
        for node in idle:
            since = node.journal.idle_since
            last_reclaim = node.journal.last_reclaim
            cooled = last_reclaim is None or last_reclaim + policy.relend_cooldown_s <= now
            lendable = not on_demand and since is not None
            if since is None or (lendable and since + policy.lend_min_idle_s <= now and cooled):
                keys.append((node.name, since))
        return [key for key in keys if key not in self._idle_announced]

    def _idle(self, now: float) -> tuple[Event | None, float | None]:
        policy = self.settings.policy
        idle = self._idle_free_nodes()
        # A node that was lent or busy since its announcement is announced afresh.
        idle_names = {n.name for n in idle}
        self._idle_announced = {key for key in self._idle_announced if key[0] in idle_names}
        if len(idle) <= policy.headroom:
            return None, None  # the next pod or node change looks again
        keys = self._idle_keys(now)
        # When the next idle node becomes lendable, if none is now (lend_when demand: never
        # for being idle alone).
        later = [
            max(
                n.journal.idle_since + policy.lend_min_idle_s,
                (n.journal.last_reclaim or 0.0) + policy.relend_cooldown_s,
            )
            for n in idle
            if n.journal.idle_since is not None
            and (n.name, n.journal.idle_since) not in self._idle_announced
            and policy.lend_when != LendWhen.DEMAND
        ]
        upcoming = min((at for at in later if at > now), default=None)
        if not keys:
            return None, upcoming
        names = sorted(name for name, _since in keys)
        reason = f"{len(names)} idle free pool node(s): {_named(names)}"
        return {"trigger": Trigger.IDLE, "reason": reason, "pods": [], "nodes": names}, None
