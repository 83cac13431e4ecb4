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
* ``idle``: a free pool node has run no application pod for ``lend_min_idle_s`` (by the
  journal's ``idle_since``, the clock the planner lends by), or is idle and its journal has
  no ``idle_since`` yet (a run records it). Announced once per node and idle period, and
  only while more nodes are idle than the policy's headroom keeps free.

Nothing is announced while another run holds the Lease live: the event waits for its release
(or expiry) instead of starting a run that would find it held.
"""

from __future__ import annotations

import typing as t
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    JournalState,
    Policy,
    matches,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import (
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
    IDLE: t.Final = "idle"


class WatchedKind:
    """The objects the source watches."""

    POD: t.Final = "Pod"
    NODE: t.Final = "Node"
    LEASE: t.Final = "Lease"


# How many pods or nodes an event's reason names before it says "and N more".
REASON_NAMES = 5


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


def _named(names: list[str]) -> str:
    shown = ", ".join(names[:REASON_NAMES])
    more = len(names) - REASON_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


class PoolWatch:
    """The pool as the watches last reported it, and what has been announced."""

    def __init__(self, settings: TriggerSettings) -> None:
        self.settings = settings
        self.nodes: dict[str, NodeView] = {}
        self.pods: dict[str, PodView] = {}
        self.lease: Mapping[str, t.Any] | None = None
        self._demand_seen: dict[str, float] = {}  # pod key -> when first seen pending
        self._demand_announced_at: float | None = None
        self._idle_announced: set[tuple[str, float | None]] = set()

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

    # What to announce.

    def lease_held_for(self, now: float) -> float | None:
        """Seconds another run still holds the Lease; None when nobody holds it live."""
        decision = decide(self.lease, self.settings.observer, now)
        if decision.action != LeaseAction.KEEP:
            return None
        return decision.expires_in if decision.expires_in is not None else 0.0

    def due(self, now: float) -> tuple[dict[str, t.Any] | None, float | None]:
        """The event to emit now (or None), and when to look again (None: at the next change)."""
        demand_event, demand_at = self._demand(now)
        idle_event, idle_at = self._idle(now)
        wanted = demand_event or idle_event
        wake = min((at for at in (demand_at, idle_at) if at is not None), default=None)
        if wanted is None:
            return None, wake
        held = self.lease_held_for(now)
        if held is not None:
            # The run that holds it may well do what the event asks; look once it ends.
            return None, now + max(held, 0.5)
        if demand_event is not None:
            self._demand_announced_at = now
        else:
            self._idle_announced.update(self._idle_keys(now))
        return wanted, self._next_wake(now)

    def _next_wake(self, now: float) -> float | None:
        _event, demand_at = self._demand(now)
        _event, idle_at = self._idle(now)
        return min((at for at in (demand_at, idle_at) if at is not None), default=None)

    def _demand(self, now: float) -> tuple[dict[str, t.Any] | None, float | None]:
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

    def _idle_free_nodes(self) -> list[NodeView]:
        policy = self.settings.policy
        busy = {
            p.node
            for p in self.pods.values()
            if p.node and p.phase in ("Pending", "Running") and is_application_pod(p, policy)
        }
        return [
            n
            for n in self.nodes.values()
            if n.journal.state == JournalState.FREE
            and n.ready
            and not n.unschedulable
            and n.name not in busy
        ]

    def _idle_keys(self, now: float) -> list[tuple[str, float | None]]:
        """The idle nodes a run could act on now: record idle_since, or lend."""
        policy = self.settings.policy
        idle = self._idle_free_nodes()
        if len(idle) <= policy.headroom:
            return []
        keys = []
        for node in idle:
            since = node.journal.idle_since
            last_reclaim = node.journal.last_reclaim
            cooled = last_reclaim is None or last_reclaim + policy.relend_cooldown_s <= now
            if since is None or (since + policy.lend_min_idle_s <= now and cooled):
                keys.append((node.name, since))
        return [key for key in keys if key not in self._idle_announced]

    def _idle(self, now: float) -> tuple[dict[str, t.Any] | None, float | None]:
        policy = self.settings.policy
        idle = self._idle_free_nodes()
        # A node that was lent or busy since its announcement is announced afresh.
        idle_names = {n.name for n in idle}
        self._idle_announced = {key for key in self._idle_announced if key[0] in idle_names}
        if len(idle) <= policy.headroom:
            return None, None  # the next pod or node change looks again
        keys = self._idle_keys(now)
        # When the next idle node becomes lendable, if none is now.
        later = [
            max(
                n.journal.idle_since + policy.lend_min_idle_s,
                (n.journal.last_reclaim or 0.0) + policy.relend_cooldown_s,
            )
            for n in idle
            if n.journal.idle_since is not None
            and (n.name, n.journal.idle_since) not in self._idle_announced
        ]
        upcoming = min((at for at in later if at > now), default=None)
        if not keys:
            return None, upcoming
        names = sorted(name for name, _since in keys)
        reason = f"{len(names)} idle free pool node(s): {_named(names)}"
        return {"trigger": Trigger.IDLE, "reason": reason, "pods": [], "nodes": names}, None
