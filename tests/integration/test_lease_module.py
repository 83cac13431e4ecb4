# SPDX-License-Identifier: GPL-3.0-or-later
"""The lease module against the lab's real apiserver: one winner, renewals, take-over."""

from __future__ import annotations

import contextlib
import os
import time
import typing as t
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ansible_runner import run_task
from k8s_lab import K8sLab

pytest_plugins = ["k8s_fixtures"]
pytestmark = pytest.mark.integration

NAMESPACE = "default"


@pytest.fixture
def take(k8s_lab: K8sLab, request: pytest.FixtureRequest) -> Iterator[t.Callable[..., t.Any]]:
    name = f"test-{request.node.name.replace('_', '-')[:40]}".rstrip("-")

    def run(holder: str, **options: t.Any) -> t.Any:
        check = options.pop("_check", False)
        result = run_task(
            "hpcops.slinky.lease",
            {
                "name": name,
                "namespace": NAMESPACE,
                "holder": holder,
                "kubeconfig": str(k8s_lab.kubeconfig_path),
                **options,
            },
            check=check,
        )
        assert not result.failed, result
        return result

    yield run
    k8s_lab.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}")


def test_two_runs_started_together_one_gets_the_lease(take: t.Callable[..., t.Any]) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(take, ["run-a", "run-b"]))
    assert sorted(r["acquired"] for r in results) == [False, True]
    winner = next(r for r in results if r["acquired"])
    loser = next(r for r in results if not r["acquired"])
    assert loser["changed"] is False
    assert loser["holder"] == winner["holder"] or "conflict" in loser


def test_the_holder_renews_and_others_wait(take: t.Callable[..., t.Any], k8s_lab: K8sLab) -> None:
    first = take("run-a", duration_s=300)
    assert (first["acquired"], first["decision"]) == (True, "create")
    assert take("run-a", duration_s=300)["decision"] == "renew"
    blocked = take("run-b")
    assert (blocked["acquired"], blocked["decision"], blocked["holder"]) == (False, "keep", "run-a")
    assert 0 < blocked["expires_in"] <= 300


def test_a_crashed_holders_lease_is_taken_over(
    take: t.Callable[..., t.Any], k8s_lab: K8sLab, request: pytest.FixtureRequest
) -> None:
    # A run that died an hour ago without giving the Lease back.
    name = f"test-{request.node.name.replace('_', '-')[:40]}".rstrip("-")
    hour_ago = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - 3600))
    status, body = k8s_lab.request(
        "POST",
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name},
            "spec": {
                "holderIdentity": "crashed-run",
                "leaseDurationSeconds": 900,
                "renewTime": hour_ago,
                "acquireTime": hour_ago,
            },
        },
    )
    assert status == 201, body
    taken = take("run-b")
    assert (taken["acquired"], taken["decision"], taken["holder"]) == (True, "take_over", "run-b")
    lease = k8s_lab.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}")
    assert lease["spec"]["leaseTransitions"] == 1


def test_release_and_check_mode(take: t.Callable[..., t.Any], k8s_lab: K8sLab) -> None:
    would = take("run-a", _check=True)
    assert (would["changed"], would["acquired"], would["decision"]) == (True, True, "create")
    assert take("run-b")["decision"] == "create"  # check mode wrote nothing
    assert take("run-a", state="released")["decision"] == "none"  # not its Lease
    released = take("run-b", state="released")
    assert (released["changed"], released["acquired"]) == (True, False)
    assert take("run-a")["decision"] == "create"


def test_a_run_may_wait_for_the_holder_to_give_the_lease_back(
    take: t.Callable[..., t.Any],
) -> None:
    take("run-a", duration_s=300)
    held = take("run-b", wait_s=2, poll_interval_s=0.5)
    assert (held["acquired"], held["holder"]) == (False, "run-a")
    assert held["waited_s"] >= 2
    # run-a gives it back while run-b waits: run-b gets it without waiting it out. The
    # release comes 2 s after run-b's module started: on a busy machine ansible-playbook
    # alone may take longer to start than a fixed pause (in a cold `make test` run-b had
    # waited 1.5 s when the release came).
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(take, "run-b", wait_s=60, poll_interval_s=0.5)
        deadline = time.monotonic() + 60
        while not module_running("lease") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert module_running("lease"), "run-b's lease module did not start within 60 s"
        time.sleep(2)
        take("run-a", state="released")
        taken = waiting.result(timeout=90)
    assert (taken["acquired"], taken["holder"], taken["decision"]) == (True, "run-b", "create")
    assert 2 <= taken["waited_s"] < 30


def module_running(name: str) -> bool:
    """Whether a module of that name, started by this test process (not by another lane of
    `make test`), runs now: ansible runs it as AnsiballZ_<name>.py."""
    marker = f"AnsiballZ_{name}.py".encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (proc / "cmdline").read_bytes() and descends_from_us(int(proc.name)):
                    return True
    return False


def descends_from_us(pid: int) -> bool:
    while pid > 1:
        if pid == os.getpid():
            return True
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return False
