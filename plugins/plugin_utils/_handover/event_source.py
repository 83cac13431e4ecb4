# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the handover event source (``hpcops.slinky.handover_events``) behind its thin plugin.

``run(queue, args)`` checks the arguments, starts a `KindWatch` for Pods, the pool's Nodes
and the handover Lease, feeds what they see to a `PoolWatch`, and puts the events it
announces on ansible-rulebook's queue as ``{"handover": {...}}``. Nothing is announced
before each kind has been listed once. Cancelling the task stops the watches.
"""

from __future__ import annotations

import asyncio
import logging
import time
import typing as t
from dataclasses import dataclass
from datetime import UTC, datetime

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import PolicyError
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    handover_argspec,
    policy_from_params,
)
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.triggers import (
    PoolWatch,
    TriggerSettings,
    WatchedKind,
)
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.watches import (
    KindWatch,
    UpdateKind,
    WatchUpdate,
    api_client,
    watch_targets,
)

LOG = logging.getLogger("hpcops.slinky.handover_events")

# The source's arguments beside the handover options (policy, journal_annotation).
SOURCE_OPTIONS: dict[str, dict[str, t.Any]] = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
    "lease_namespace": {"type": "str", "default": "slurm"},
    "lease_name": {"type": "str", "default": "hpcops-slinky-handover"},
    "debounce_s": {"type": "float", "default": 2.0},
    "repeat_s": {"type": "float", "default": 30.0},
    "watch_timeout_s": {"type": "int", "default": 300},
    "backoff_max_s": {"type": "float", "default": 30.0},
}
# Each number's smallest sensible value, and the fix that names it.
_MINIMA = {
    "debounce_s": (0.0, "give seconds, for example 2"),
    "repeat_s": (1.0, "give seconds, 1 or more, for example 30"),
    "watch_timeout_s": (10, "give seconds, 10 or more, for example 300"),
    "backoff_max_s": (0.5, "give seconds, 0.5 or more, for example 30"),
}


class SourceArgumentError(ValueError):
    """An argument of the source that cannot work; the message names it and the fix."""


@dataclass(frozen=True)
class SourceSettings:
    triggers: TriggerSettings
    kubeconfig: str
    context: str
    lease_namespace: str
    lease_name: str
    watch_timeout_s: int
    backoff_max_s: float

    @property
    def node_label_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.triggers.policy.pool_selector.items()))


def source_settings(args: t.Mapping[str, t.Any]) -> SourceSettings:
    """The source's settings from its rulebook arguments; SourceArgumentError when wrong."""
    spec = handover_argspec().update_argspec(**SOURCE_OPTIONS).argument_spec
    result = ArgumentSpecValidator(spec).validate(dict(args))
    if result.error_messages:
        raise SourceArgumentError(
            "hpcops.slinky.handover_events: "
            + "; ".join(result.error_messages)
            + " (the source takes the handover role's policy as `policy` and "
            + ", ".join(sorted(SOURCE_OPTIONS))
            + ")"
        )
    params = result.validated_parameters
    for name, (least, fix) in _MINIMA.items():
        if params[name] < least:
            raise SourceArgumentError(
                f"hpcops.slinky.handover_events: {name}: {params[name]} is below {least}; {fix}"
            )
    try:
        policy = policy_from_params(params["policy"])
        policy.check()
    except PolicyError as err:
        raise SourceArgumentError(f"hpcops.slinky.handover_events: policy.{err}") from None
    return SourceSettings(
        triggers=TriggerSettings(
            policy=policy,
            journal_annotation=params["journal_annotation"],
            debounce_s=params["debounce_s"],
            repeat_s=params["repeat_s"],
        ),
        kubeconfig=params["kubeconfig"] or "",
        context=params["context"] or "",
        lease_namespace=params["lease_namespace"],
        lease_name=params["lease_name"],
        watch_timeout_s=params["watch_timeout_s"],
        backoff_max_s=params["backoff_max_s"],
    )


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _take(pool: PoolWatch, update: WatchUpdate, listed: set[str]) -> None:
    if update.update == UpdateKind.LISTED:
        pool.replace(update.kind, update.objects)
        listed.add(update.kind)
    elif update.update == UpdateKind.CHANGED:
        for obj in update.objects:
            pool.apply(update.kind, update.event_type, obj)


async def run(queue: asyncio.Queue[t.Any], args: t.Mapping[str, t.Any]) -> None:
    """Watch until cancelled, putting each announced event on `queue`."""
    settings = source_settings(args)
    api = api_client(settings.kubeconfig, settings.context)
    pool = PoolWatch(settings.triggers)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[WatchUpdate] = asyncio.Queue()

    def post(update: WatchUpdate) -> None:
        loop.call_soon_threadsafe(inbox.put_nowait, update)

    watches = [
        KindWatch(
            target,
            post,
            watch_timeout_s=settings.watch_timeout_s,
            backoff_max_s=settings.backoff_max_s,
        )
        for target in watch_targets(
            api,
            node_label_selector=settings.node_label_selector,
            lease_namespace=settings.lease_namespace,
            lease_name=settings.lease_name,
        )
    ]
    kinds = {WatchedKind.POD, WatchedKind.NODE, WatchedKind.LEASE}
    listed: set[str] = set()
    LOG.info(
        "watching Pods, Nodes (%s) and Lease %s/%s",
        settings.node_label_selector,
        settings.lease_namespace,
        settings.lease_name,
    )
    for watch in watches:
        watch.start()
    wake: float | None = None
    try:
        while True:
            timeout = None if wake is None else max(0.0, wake - time.time())
            try:
                update = await asyncio.wait_for(inbox.get(), timeout)
            except TimeoutError:
                pass
            else:
                _take(pool, update, listed)
                while not inbox.empty():  # a burst is judged once, after all of it
                    _take(pool, inbox.get_nowait(), listed)
            if listed != kinds:
                continue
            now = time.time()
            event, wake = pool.due(now)
            if event is not None:
                LOG.info("announcing %s: %s", event["trigger"], event["reason"])
                await queue.put({"handover": {**event, "at": _stamp(now)}})
    finally:
        for watch in watches:
            watch.stop()
        for watch in watches:
            await asyncio.to_thread(watch.join, 5.0)
        api.close()
