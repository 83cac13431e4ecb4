# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Kubernetes Lease as a run lock: who holds it, and what a run may do about it.

PRIVATE to the collection: names here can change without notice.

`decide` is pure (the Lease object, who asks, the time); `lease_attempt` does the one write
it names with the resourceVersion it read, so of two runs that race only one write succeeds.
"""

from __future__ import annotations

import time
import typing as t
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    Conflict,
    delete_object,
    get_object,
    write_object,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.timestamps import (
    microtime,
    parse_time,
)


class LeaseAction:
    """What a run does about the Lease (the lease module's decision)."""

    CREATE: t.Final = "create"
    RENEW: t.Final = "renew"
    TAKE_OVER: t.Final = "take_over"  # the holder's time ran out
    RELEASE: t.Final = "release"
    KEEP: t.Final = "keep"  # another run holds it: leave it
    NONE: t.Final = "none"  # nothing to release


@dataclass(frozen=True)
class LeaseDecision:
    action: str  # one of LeaseAction
    holder: str  # who holds it after the action (or now, for keep and none)
    expires_in: float | None = None  # seconds the current holder still has


def decide(
    lease: Mapping[str, t.Any] | None, holder: str, now: float, want: str = "acquired"
) -> LeaseDecision:
    """What a run that wants the Lease `acquired` (or `released`) must do."""
    spec = (lease or {}).get("spec") or {}
    current = str(spec.get("holderIdentity") or "")
    renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds") or 0
    live = bool(current) and renewed is not None and renewed + float(duration) > now
    left = renewed + float(duration) - now if live and renewed is not None else None
    if want == "released":
        if lease is not None and current == holder:
            return LeaseDecision(LeaseAction.RELEASE, "")
        return LeaseDecision(LeaseAction.NONE, current, left)
    if lease is None:
        return LeaseDecision(LeaseAction.CREATE, holder)
    if current == holder:
        return LeaseDecision(LeaseAction.RENEW, holder)
    if live:
        return LeaseDecision(LeaseAction.KEEP, current, left)
    return LeaseDecision(LeaseAction.TAKE_OVER, holder)


def lease_body(
    name: str,
    namespace: str,
    holder: str,
    duration_s: int,
    now: float,
    previous: Mapping[str, t.Any] | None = None,
) -> dict[str, t.Any]:
    """The Lease to write for `holder`, keeping resourceVersion and transitions of `previous`."""
    meta: dict[str, t.Any] = {"name": name, "namespace": namespace}
    spec: dict[str, t.Any] = {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_s,
        "acquireTime": microtime(now),
        "renewTime": microtime(now),
        "leaseTransitions": 0,
    }
    if previous is not None:
        old_meta = previous.get("metadata") or {}
        old_spec = previous.get("spec") or {}
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        meta["labels"] = old_meta.get("labels") or {}
        transitions = int(old_spec.get("leaseTransitions") or 0)
        if old_spec.get("holderIdentity") == holder:
            spec["acquireTime"] = old_spec.get("acquireTime") or spec["acquireTime"]
            spec["leaseTransitions"] = transitions
        else:
            spec["leaseTransitions"] = transitions + 1
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


API_VERSION = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class LeaseRequest:
    """Which Lease, for whom, for how long."""

    name: str
    namespace: str
    holder: str
    duration_s: int = 900


def lease_attempt(
    client: t.Any,
    request: LeaseRequest,
    want: str = "acquired",
    check_mode: bool = False,
    clock: Callable[[], float] = time.time,
) -> dict[str, t.Any]:
    """One look at the Lease and the one write it calls for, as the lease module returns
    it (changed, acquired, decision, holder, expires_in); KubernetesError on failure."""
    result: dict[str, t.Any] = {"changed": False, "acquired": False}
    lease = get_object(client, API_VERSION, "Lease", request.name, request.namespace)
    now = clock()
    decision = decide(lease, request.holder, now, want)
    result.update(decision=decision.action, holder=decision.holder)
    if decision.expires_in is not None:
        result["expires_in"] = round(decision.expires_in, 1)
    if decision.action in (LeaseAction.KEEP, LeaseAction.NONE):
        result["acquired"] = decision.holder == request.holder != ""
        return result
    result["changed"] = True
    result["acquired"] = decision.action != LeaseAction.RELEASE
    if check_mode:
        return result
    try:
        if decision.action == LeaseAction.RELEASE and lease is not None:
            delete_object(
                client,
                API_VERSION,
                "Lease",
                request.name,
                request.namespace,
                lease["metadata"]["resourceVersion"],
            )
        else:
            body = lease_body(
                request.name, request.namespace, request.holder, request.duration_s, now, lease
            )
            write_object(client, body, create=decision.action == LeaseAction.CREATE)
    except Conflict as err:
        # Another run wrote first: it holds the Lease, this one does nothing.
        result.update(changed=False, acquired=False, decision=LeaseAction.KEEP, conflict=str(err))
    return result


def acquire_lease(
    client: t.Any,
    request: LeaseRequest,
    wait_s: float = 0.0,
    poll_s: float = 2.0,
    check_mode: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, t.Any]:
    """Take the Lease, waiting up to wait_s for another holder's to end (never in check
    mode); the last attempt's result with waited_s."""
    started = clock()
    waiting = not check_mode
    while True:
        result = lease_attempt(client, request, check_mode=check_mode)
        left = wait_s - (clock() - started)
        if result["acquired"] or not waiting or left <= 0:
            break
        sleep(min(poll_s, left))
    result["waited_s"] = round(clock() - started, 1) if waiting else 0.0
    return result
