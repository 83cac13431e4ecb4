# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The event source's arguments (defaults, the selector it watches Nodes with, bad input),
its poll of Slurm's queue, and what it announces from the watches and the poll together."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import (
    LendablePartition,
    PendingJob,
    Shape,
    SlurmQueue,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import KubernetesError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SlurmAuthError,
    SlurmConnectionError,
)
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover import event_source
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.event_source import (
    SOURCE_OPTIONS,
    QueueUpdate,
    SlurmPollSettings,
    SlurmQueuePoll,
    SourceArgumentError,
    poll_slurm,
    source_settings,
)
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.watches import (
    UpdateKind,
    WatchTarget,
    WatchUpdate,
)

POLICY = {"pool_selector": {"hpcops.io/pool": "interactive", "site": "a"}}


def test_defaults_and_the_node_selector() -> None:
    settings = source_settings({"policy": POLICY})
    assert settings.node_label_selector == "hpcops.io/pool=interactive,site=a"
    assert (settings.lease_namespace, settings.lease_name) == ("slurm", "hpcops-slinky-handover")
    assert settings.triggers.debounce_s == 2.0 and settings.triggers.repeat_s == 30.0
    assert settings.triggers.journal_annotation == "hpcops.io/handover"
    assert settings.triggers.policy.headroom == 1  # the handover policy's own default
    assert settings.kubeconfig == "" and settings.watch_timeout_s == 300


def test_numbers_given_as_rulebook_strings_are_taken() -> None:
    # A rulebook's "{{ ... }}" may render a number as text.
    settings = source_settings({"policy": POLICY, "debounce_s": "0.5", "repeat_s": "10"})
    assert (settings.triggers.debounce_s, settings.triggers.repeat_s) == (0.5, 10.0)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ({}, ["policy"]),
        ({"policy": {}}, ["pool_selector"]),
        ({"policy": {**POLICY, "headroom": "two"}}, ["headroom"]),
        ({"policy": {**POLICY, "headroom": -1}}, ["policy.headroom"]),
        ({"policy": POLICY, "repeat_s": 0}, ["repeat_s", "1 or more"]),
        ({"policy": POLICY, "debounce_s": "soon"}, ["debounce_s"]),
        ({"policy": POLICY, "lease_nmespace": "slurm"}, ["lease_nmespace", "lease_namespace"]),
    ],
)
def test_bad_arguments_name_themselves(args: dict[str, t.Any], names: list[str]) -> None:
    with pytest.raises(SourceArgumentError) as caught:
        source_settings(args)
    message = str(caught.value)
    assert message.startswith("hpcops.slinky.handover_events: ")
    for name in names:
        assert name in message


# -- the slurm option (lend_when demand) ------------------------------------------------

DEMAND = {**POLICY, "lend_when": "demand"}
SLURM = {
    "url": "http://slurm-restapi.slurm:6820",
    "token_secret": {"namespace": "slurm", "name": "hpcops-slinky-handover-slurm-token"},
}
TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.c2lnbmVk"  # what must never be shown


def test_lend_when_demand_needs_slurm_and_says_how_to_give_it() -> None:
    with pytest.raises(SourceArgumentError) as caught:
        source_settings({"policy": DEMAND})
    message = str(caught.value)
    assert message.startswith("hpcops.slinky.handover_events: slurm: is required with ")
    assert "policy.lend_when demand" in message and "token_secret" in message


def test_the_slurm_option_polls_the_policys_partitions_every_15_s_by_default() -> None:
    settings = source_settings({"policy": DEMAND, "slurm": SLURM})
    assert settings.polls_slurm
    assert settings.slurm is not None
    assert settings.slurm.poll_s == 15.0 and settings.slurm.partitions == ("backfill",)
    assert settings.slurm.url == SLURM["url"]
    assert settings.slurm.connection["token_secret"]["key"] == "auth-token"  # the spec's default
    named = {**DEMAND, "partitions": {"batch": {"grace_s": 60}, "debug": {"grace_s": 60}}}
    settings = source_settings({"policy": named, "slurm": {**SLURM, "poll_s": "2"}})
    assert settings.slurm is not None
    assert settings.slurm.partitions == ("batch", "debug") and settings.slurm.poll_s == 2.0
    settings = source_settings({"policy": named, "slurm": {**SLURM, "partitions": ["gpu"]}})
    assert settings.slurm is not None and settings.slurm.partitions == ("gpu",)


def test_with_lend_when_idle_slurm_may_be_given_and_is_not_polled() -> None:
    settings = source_settings({"policy": POLICY, "slurm": SLURM})
    assert settings.slurm is not None and not settings.polls_slurm
    assert not source_settings({"policy": POLICY}).polls_slurm


@pytest.mark.parametrize(
    ("slurm", "names"),
    [
        ({**SLURM, "poll_s": 1}, ["slurm.poll_s: 1.0 is below 2; give seconds, 2 or more, for "]),
        ({"url": SLURM["url"]}, ["slurm: no credentials", "token_secret"]),
        ({"token_secret": SLURM["token_secret"]}, ["url", "slurm"]),
        ({**SLURM, "url": "slurm:6820"}, ["slurm.url 'slurm:6820' must start with http://"]),
        ({**SLURM, "token": TOKEN}, ["token|token_secret", "slurm"]),
        ({**SLURM, "timout": 5}, ["timout", "slurm"]),
        ({**SLURM, "partitions": "backfill,batch", "poll_s": "often"}, ["poll_s"]),
    ],
)
def test_bad_slurm_arguments_name_themselves_and_never_the_token(
    slurm: dict[str, t.Any], names: list[str]
) -> None:
    with pytest.raises(SourceArgumentError) as caught:
        source_settings({"policy": DEMAND, "slurm": slurm})
    message = str(caught.value)
    assert message.startswith("hpcops.slinky.handover_events: ")
    for name in names:
        assert name in message
    assert TOKEN not in message


def test_a_token_in_a_message_of_the_validator_is_hidden() -> None:
    # The token pasted where it does not belong as well: the validator's message quotes it.
    slurm = {"url": SLURM["url"], "token": TOKEN, "api_version": TOKEN}
    with pytest.raises(SourceArgumentError) as caught:
        source_settings({"policy": DEMAND, "slurm": slurm})
    assert "api_version must be one of" in str(caught.value)
    assert "got: ********" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_the_settings_never_show_the_token() -> None:
    settings = source_settings({"policy": DEMAND, "slurm": {"url": SLURM["url"], "token": TOKEN}})
    assert settings.slurm is not None and settings.slurm.connection["token"] == TOKEN
    assert TOKEN not in repr(settings)
    assert TOKEN not in str(settings.slurm)


# -- the poll ---------------------------------------------------------------------------

QUEUE = SlurmQueue(
    (PendingJob(7, ("backfill",), per_node=Shape(1000, 1 << 30), time_limit_s=60.0),),
    {"backfill": LendablePartition("backfill")},
)


def polled(poll: SlurmQueuePoll, answers: list[t.Any], wanted: int) -> list[QueueUpdate]:
    """The first `wanted` updates poll_slurm posts for `answers` (a queue, or an error to
    raise), read in turn. On a loaded machine the poller may post once more before this
    loop wakes, so the rest is cut off."""

    def read() -> SlurmQueue:
        answer = answers.pop(0) if answers else QUEUE
        if isinstance(answer, Exception):
            raise answer
        return t.cast(SlurmQueue, answer)

    poll.read = read  # type: ignore[method-assign]
    posted: list[QueueUpdate] = []

    async def main() -> None:
        task = asyncio.create_task(poll_slurm(poll, posted.append))
        while len(posted) < wanted:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(main(), 10))
    return posted[:wanted]


def test_a_failed_poll_is_one_line_without_the_token_and_the_next_poll_reads_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = SlurmPollSettings(
        connection={"url": "http://slurmrestd:6820", "token": TOKEN},
        poll_s=0.01,
        secrets=frozenset({TOKEN}),
    )
    poll = SlurmQueuePoll(settings)
    caplog.set_level(logging.INFO, logger="hpcops.slinky.handover_events")
    failures = [
        SlurmAuthError(f"slurmrestd rejected the token {TOKEN}\n(HTTP 401)"),
        SlurmConnectionError("cannot reach slurmrestd at http://slurmrestd:6820"),
        ValueError("a bug's message"),
    ]
    posted = polled(poll, failures, 5)
    assert [update.queue for update in posted] == [None, None, None, QUEUE, QUEUE]
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == (
        "Slurm's queue: slurmrestd rejected the token ******** (HTTP 401); again in 0.01 s"
    )
    assert lines[1].startswith("Slurm's queue: cannot reach slurmrestd at http://slurmrestd")
    assert lines[2] == "Slurm's queue: ValueError: a bug's message; again in 0.01 s"
    assert lines[3] == "Slurm's queue read again: 1 pending job(s)"
    assert all(TOKEN not in line for line in caplog.text.splitlines())


def test_a_token_secret_the_cluster_will_not_give_fails_the_poll_not_the_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreachable(kubeconfig: str | None, context: str | None) -> t.Any:
        assert (kubeconfig, context) == ("/etc/hpcops-slinky/kubeconfig", None)
        raise KubernetesError("cannot reach the cluster: connection refused")

    monkeypatch.setattr(event_source, "kubernetes_client", unreachable)
    settings = source_settings(
        {"policy": DEMAND, "slurm": SLURM, "kubeconfig": "/etc/hpcops-slinky/kubeconfig"}
    )
    assert settings.slurm is not None
    poll = SlurmQueuePoll(settings.slurm, settings.kubeconfig, settings.context)
    with pytest.raises(SlurmAuthError, match=r"^token_secret or jwt_key_secret: cannot reach"):
        poll.read()


# -- the source as a whole, its watches and poll replaced -------------------------------

GIB = 1 << 30
IDLE_NODE = {
    "metadata": {
        "name": "int01",
        "labels": {"hpcops.io/pool": "interactive", "site": "a"},
        "annotations": {"hpcops.io/handover": json.dumps({"state": "free", "idle_since": 1.0})},
    },
    "spec": {},
    "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "allocatable": {"cpu": "32", "memory": "256Gi"},
    },
}
# int02 is idle with no idle_since yet: announced to be recorded, but not before the queue.
NEW_NODE = {**IDLE_NODE, "metadata": {**IDLE_NODE["metadata"], "name": "int02", "annotations": {}}}
LISTED = {"Pod": (), "Node": (IDLE_NODE, NEW_NODE), "Lease": ()}


class ListedOnce:
    """A KindWatch that lists its kind once, at start."""

    def __init__(self, target: WatchTarget, post: t.Callable[[WatchUpdate], None], **_: t.Any):
        self.target = target
        self.post = post

    def start(self) -> None:
        objects = LISTED[self.target.kind]
        self.post(WatchUpdate(self.target.kind, UpdateKind.LISTED, objects=objects))

    def stop(self) -> None:
        pass

    def join(self, timeout: float) -> None:
        pass


class Closable:
    def close(self) -> None:
        pass


def test_the_source_announces_slurms_demand_only_once_the_queue_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_source, "api_client", lambda kubeconfig, context: Closable())
    monkeypatch.setattr(
        event_source,
        "watch_targets",
        lambda api, **_: [WatchTarget(kind, list) for kind in ("Pod", "Node", "Lease")],
    )
    monkeypatch.setattr(event_source, "KindWatch", ListedOnce)
    reads: list[int] = []

    def read(self: SlurmQueuePoll) -> SlurmQueue:
        reads.append(1)
        if len(reads) == 1:
            raise SlurmConnectionError("cannot reach slurmrestd")
        return QUEUE

    monkeypatch.setattr(SlurmQueuePoll, "read", read)
    policy = {**DEMAND, "lend_min_idle_s": 0, "relend_cooldown_s": 0, "headroom": 0}
    args = {"policy": policy, "slurm": {**SLURM, "poll_s": 2}}

    async def main() -> list[t.Any]:
        out: asyncio.Queue[t.Any] = asyncio.Queue()
        source = asyncio.create_task(event_source.run(out, args))
        # The watches have listed, but the first read failed: nothing yet, not even the
        # idle node; the next poll (2 s later) reads the queue.
        await asyncio.sleep(0.5)
        assert out.empty() and reads == [1]
        events = [await asyncio.wait_for(out.get(), 5) for _i in range(2)]
        source.cancel()
        with pytest.raises(asyncio.CancelledError):
            await source
        return events

    slurm, idle = (event["handover"] for event in asyncio.run(main()))
    assert slurm["trigger"] == "slurm_demand" and slurm["jobs"] == [7]
    assert slurm["nodes"] == ["int01"] and slurm["at"].endswith("Z")  # the longest idle
    assert idle["trigger"] == "idle" and idle["nodes"] == ["int02"]
    assert len(reads) == 2


# -- the plugin's documentation ---------------------------------------------------------

PLUGIN = Path(__file__).parents[4] / "extensions/eda/plugins/event_source/handover_events.py"


def plugin_docs() -> dict[str, t.Any]:
    """DOCUMENTATION and EXAMPLES of the plugin, read as antsibull-docs reads them (not run)."""
    found = {}
    for node in ast.parse(PLUGIN.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            name = getattr(node.targets[0], "id", "")
            if name in ("DOCUMENTATION", "EXAMPLES"):
                found[name] = yaml.safe_load(node.value.value)
    return found


def documented(options: dict[str, t.Any], spec: dict[str, dict[str, t.Any]]) -> None:
    """Each option of `spec` documented with its type and default, and no other."""
    assert sorted(options) == sorted(spec)
    for name, option in spec.items():
        assert options[name]["type"] == option["type"], name
        if "default" in option:
            assert options[name].get("default") == option["default"], name


def test_the_documentation_says_what_the_source_takes() -> None:
    docs = plugin_docs()
    options = docs["DOCUMENTATION"]["options"]
    spec = {
        "policy": {"type": "dict"},
        "journal_annotation": {"type": "str", "default": "hpcops.io/handover"},
        **SOURCE_OPTIONS,
    }
    documented(options, spec)
    documented(options["slurm"]["suboptions"], SOURCE_OPTIONS["slurm"]["options"])
    # Each example's source arguments are ones the source takes.
    for play in docs["EXAMPLES"]:
        (source,) = play["sources"]
        args = source["hpcops.slinky.handover_events"]
        settings = source_settings(args)
        assert (settings.slurm is not None) == ("slurm" in args)
