# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the handover event source (``hpcops.slinky.handover_events``) behind its thin plugin.

``run(queue, args)`` checks the arguments, starts a `KindWatch` for Pods, the pool's Nodes
and the handover Lease, feeds what they see to a `PoolWatch`, and puts the events it
announces on ansible-rulebook's queue as ``{"handover": {...}}``. With ``policy.lend_when:
demand`` it also polls Slurm's queue of the lendable partitions every ``slurm.poll_s`` (in a
worker thread: `SlurmQueuePoll`), and the queue goes through the same inbox. Nothing is
announced before each kind has been listed (and the queue read) once. Cancelling the task
stops the watches and the poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import typing as t
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import SlurmQueue
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    LendWhen,
    PolicyError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    handover_argspec,
    policy_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reads import QueuePoll
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_client,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    TOKEN_SECRET_MUTUALLY_EXCLUSIVE,
    cluster_token_source,
    connection_from_params,
    slurmrestd_argument_spec,
    token_secret_argument_spec,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SlurmAuthError,
    SlurmRestClient,
    SlurmRestError,
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

# The slurm option: slurmrestd's connection as the modules take it (doc fragments
# hpcops.slinky.slurmrestd and its FROM_CLUSTER), and how the queue is polled.
SLURM_SOURCE_OPTIONS: dict[str, dict[str, t.Any]] = {
    "poll_s": {"type": "float", "default": 15.0},
    "partitions": {"type": "list", "elements": "str"},
}
# Where slurmrestd's credentials can come from, by option.
SLURM_CREDENTIALS = ("token_secret", "jwt_key_secret", "jwt_key_path", "token")
# What stands for a secret in a line the source logs or raises.
HIDDEN = "********"


def slurm_option() -> dict[str, t.Any]:
    """The source's ``slurm`` option (a fresh copy)."""
    return {
        "type": "dict",
        "options": {
            **slurmrestd_argument_spec(),
            **token_secret_argument_spec(),
            **SLURM_SOURCE_OPTIONS,
        },
        "mutually_exclusive": TOKEN_SECRET_MUTUALLY_EXCLUSIVE,
    }


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
    "slurm": slurm_option(),
}
# Each number's smallest sensible value, and the fix that names it.
_MINIMA = {
    "debounce_s": (0.0, "give seconds, for example 2"),
    "repeat_s": (1.0, "give seconds, 1 or more, for example 30"),
    "watch_timeout_s": (10, "give seconds, 10 or more, for example 300"),
    "backoff_max_s": (0.5, "give seconds, 0.5 or more, for example 30"),
}
SLURM_POLL_MINIMUM = (2.0, "give seconds, 2 or more, for example 15")
# The partitions polled when neither slurm.partitions nor the policy's partitions name any.
DEFAULT_PARTITIONS = ("backfill",)


class SourceArgumentError(ValueError):
    """An argument of the source that cannot work; the message names it and the fix."""


def hidden(text: str, secrets: t.Iterable[str]) -> str:
    """`text` on one line with each secret in it replaced by ********."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return " ".join(text.split())


@dataclass(frozen=True)
class SlurmPollSettings:
    """How the source reads Slurm's queue. `connection` holds the slurmrestd options as the
    modules take them, secrets included: never in a repr, a log line or an error."""

    connection: t.Mapping[str, t.Any] = dataclass_field(repr=False)
    poll_s: float = 15.0
    partitions: tuple[str, ...] = DEFAULT_PARTITIONS
    secrets: frozenset[str] = dataclass_field(default=frozenset(), repr=False)

    @property
    def url(self) -> str:
        return str(self.connection["url"])


@dataclass(frozen=True)
class SourceSettings:
    triggers: TriggerSettings
    kubeconfig: str
    context: str
    lease_namespace: str
    lease_name: str
    watch_timeout_s: int
    backoff_max_s: float
    slurm: SlurmPollSettings | None = None

    @property
    def polls_slurm(self) -> bool:
        """Slurm's queue is read only where it decides: with lend_when demand."""
        return self.slurm is not None and self.triggers.policy.lend_when == LendWhen.DEMAND

    @property
    def node_label_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.triggers.policy.pool_selector.items()))


def source_settings(args: t.Mapping[str, t.Any]) -> SourceSettings:
    """The source's settings from its rulebook arguments; SourceArgumentError when wrong."""
    spec = handover_argspec().update_argspec(**SOURCE_OPTIONS).argument_spec
    result = ArgumentSpecValidator(spec).validate(dict(args))
    secrets = frozenset(str(v) for v in getattr(result, "_no_log_values", ()) if v)
    if result.error_messages:
        raise SourceArgumentError(
            "hpcops.slinky.handover_events: "
            + hidden("; ".join(result.error_messages), secrets)
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
    slurm = params["slurm"]
    if policy.lend_when == LendWhen.DEMAND and not slurm:
        raise SourceArgumentError(
            "hpcops.slinky.handover_events: slurm: is required with policy.lend_when demand "
            "(the source reads Slurm's queue to announce the jobs an idle node would start); "
            "give slurmrestd's url and where its token comes from, for example "
            "{url: http://slurm-restapi.slurm:6820, token_secret: {namespace: slurm, "
            "name: <the Secret of a Slinky Token>}}, or set policy.lend_when: idle"
        )
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
        slurm=_slurm_settings(slurm, sorted(policy.partitions), secrets) if slurm else None,
    )


def _slurm_settings(
    slurm: dict[str, t.Any], policy_partitions: list[str], secrets: frozenset[str]
) -> SlurmPollSettings:
    least, fix = SLURM_POLL_MINIMUM
    if slurm["poll_s"] < least:
        raise SourceArgumentError(
            f"hpcops.slinky.handover_events: slurm.poll_s: {slurm['poll_s']} is below "
            f"{least:g}; {fix}"
        )
    if not any(slurm.get(name) for name in SLURM_CREDENTIALS):
        raise SourceArgumentError(
            "hpcops.slinky.handover_events: slurm: no credentials for slurmrestd; give "
            "token_secret (the Secret of a Slinky Token, which the operator keeps fresh), "
            "jwt_key_secret, jwt_key_path or token"
        )
    try:
        # The Connection checks the url and the credentials; a Secret is read only when polled.
        from_secret = slurm.get("token_secret") or slurm.get("jwt_key_secret")
        connection_from_params(slurm, (lambda: "") if from_secret else None)
    except SlurmRestError as err:
        raise SourceArgumentError(
            f"hpcops.slinky.handover_events: slurm.{hidden(str(err), secrets)}"
        ) from None
    return SlurmPollSettings(
        connection=dict(slurm),
        poll_s=slurm["poll_s"],
        partitions=tuple(slurm["partitions"] or policy_partitions or DEFAULT_PARTITIONS),
        secrets=secrets,
    )


class SlurmQueuePoll:
    """Reads Slurm's queue of the polled partitions through one slurmrestd client (`read`
    runs in a worker thread, one at a time): jobs only when slurmctld says some changed,
    and in full every few minutes (`QueuePoll`). A token_secret or jwt_key_secret is read
    with a Kubernetes client made at the first read, from the source's kubeconfig and
    context."""

    def __init__(
        self, settings: SlurmPollSettings, kubeconfig: str = "", context: str = ""
    ) -> None:
        self.settings = settings
        self._kubeconfig = kubeconfig
        self._context = context
        self._secrets = set(settings.secrets)
        self._token_source: t.Callable[[], str] | None = None
        self.queue_poll = QueuePoll(settings.partitions)
        params = dict(settings.connection)
        from_secret = params.get("token_secret") or params.get("jwt_key_secret")
        self.client = SlurmRestClient(
            connection_from_params(params, self._from_secret if from_secret else None),
            on_new_token=self._secrets.add,
        )

    def _from_secret(self) -> str:
        if self._token_source is None:
            try:
                client = kubernetes_client(self._kubeconfig or None, self._context or None)
            except KubernetesError as err:
                raise SlurmAuthError(f"token_secret or jwt_key_secret: {err}") from None
            self._token_source = cluster_token_source(client, self.settings.connection)
        if self._token_source is None:  # not reached: the settings name a Secret
            raise SlurmAuthError("no token_secret or jwt_key_secret to read")
        return self._token_source()

    def read(self) -> SlurmQueue:
        """The queue now (the last one when no job changed); SlurmRestError on failure."""
        return self.queue_poll.read(self.client)

    def hide(self, text: str) -> str:
        """`text` on one line, without any token or key the poll has used."""
        return hidden(text, self._secrets)


@dataclass(frozen=True)
class QueueUpdate:
    """What one poll of Slurm's queue, begun at `read_at`, found; None when it failed."""

    queue: SlurmQueue | None
    read_at: float = 0.0
    kind: str = WatchedKind.SLURM_QUEUE


async def poll_slurm(poll: SlurmQueuePoll, post: t.Callable[[QueueUpdate], None]) -> None:
    """Read Slurm's queue every poll_s until cancelled. A failed read is logged (one line,
    no secret), forgets the queue (nothing is announced for Slurm on what it last said) and
    is tried again at the next poll; it never ends the source."""
    every_s = poll.settings.poll_s
    failing = False
    while True:
        began = time.monotonic()
        read_at = time.time()
        try:
            queue = await asyncio.to_thread(poll.read)
        except SlurmRestError as err:
            LOG.warning("Slurm's queue: %s; again in %g s", poll.hide(str(err)), every_s)
            failing = True
            post(QueueUpdate(None, read_at))
        except (KubernetesError, OSError, ValueError) as err:  # not the client's own errors
            LOG.warning(
                "Slurm's queue: %s: %s; again in %g s",
                type(err).__name__,
                poll.hide(str(err)),
                every_s,
            )
            failing = True
            post(QueueUpdate(None, read_at))
        else:
            if failing:
                LOG.info("Slurm's queue read again: %d pending job(s)", len(queue.jobs))
                failing = False
            post(QueueUpdate(queue, read_at))
        await asyncio.sleep(max(0.0, began + every_s - time.monotonic()))


def _start_polling(
    settings: SourceSettings, post: t.Callable[[QueueUpdate], None]
) -> asyncio.Task[None] | None:
    """The task that polls Slurm's queue, when the settings ask for one."""
    if settings.slurm is None:
        return None
    if not settings.polls_slurm:
        LOG.info("slurm is given, but policy.lend_when is idle: Slurm's queue is not polled")
        return None
    poll = SlurmQueuePoll(settings.slurm, settings.kubeconfig, settings.context)
    LOG.info(
        "polling Slurm's queue of partition(s) %s at %s every %g s",
        ", ".join(settings.slurm.partitions),
        settings.slurm.url,
        settings.slurm.poll_s,
    )
    return asyncio.create_task(poll_slurm(poll, post))


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _take(pool: PoolWatch, update: WatchUpdate | QueueUpdate, listed: set[str]) -> None:
    if isinstance(update, QueueUpdate):
        pool.take_queue(update.queue, update.read_at)
        if update.queue is not None:
            listed.add(update.kind)
    elif update.update == UpdateKind.LISTED:
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
    inbox: asyncio.Queue[WatchUpdate | QueueUpdate] = asyncio.Queue()

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
    poller = _start_polling(settings, inbox.put_nowait)
    if poller is not None:
        kinds.add(WatchedKind.SLURM_QUEUE)
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
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        for watch in watches:
            watch.stop()
        for watch in watches:
            await asyncio.to_thread(watch.join, 5.0)
        api.close()
