# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's slurmd pods are Ready when slurmd answers its readiness probe, as on a kubelet.

kwok's pod stages (k8s_lab.pod_stages) leave slurmd pods not Ready and every other pod
Ready; the pod runner probes a running slurmd's /readyz (here: an HTTP server on 127.0.0.1
that answers 204 or 503, as slurmd does) and keeps the pod's Ready condition saying what
the probe found, also after another writer (the Slinky operator) put an older copy back.
"""

from __future__ import annotations

import http.server
import socket
import sys
import threading
import time
import typing as t
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))

import k8s_lab
import pod_runner


class Slurmd(http.server.BaseHTTPRequestHandler):
    ready = False

    def do_GET(self) -> None:
        self.send_response(204 if self.path == "/readyz" and Slurmd.ready else 503)
        self.end_headers()

    def log_message(self, *_args: t.Any) -> None:
        pass


@pytest.fixture
def slurmd() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slurmd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Slurmd.ready = False
    yield f"http://127.0.0.1:{server.server_address[1]}/readyz"
    server.shutdown()
    server.server_close()


class Apiserver:
    """What the runner writes: the PATCHes of pod status."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, t.Any, str]] = []

    def request(self, method: str, path: str, body: t.Any = None, **kwargs: t.Any) -> t.Any:
        self.patches.append((path, body, kwargs.get("content_type", "")))
        return 200, {}


class Running:
    """A process that runs (poll() is None) or has exited."""

    def __init__(self, alive: bool = True) -> None:
        self.alive = alive

    def poll(self) -> int | None:
        return None if self.alive else 1


def manifest(ready: bool) -> dict[str, t.Any]:
    status = "True" if ready else "False"
    return {
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": status},
            ],
            "containerStatuses": [{"name": "slurmd", "ready": ready, "state": {"running": {}}}],
        }
    }


def runner_with(
    pod: pod_runner.RunningPod, apiserver: Apiserver | None = None
) -> tuple[pod_runner.PodRunner, Apiserver]:
    runner = pod_runner.PodRunner.__new__(pod_runner.PodRunner)
    apiserver = apiserver or Apiserver()
    runner.lab = apiserver
    runner.pods = {pod.uid: pod}
    runner.writer = ThreadPoolExecutor(max_workers=pod_runner.WRITE_WORKERS)
    runner.reporting = set()
    return runner, apiserver


def look(runner: pod_runner.PodRunner, pod: pod_runner.RunningPod, *, shown: bool) -> None:
    """One look at the pod, its status showing Ready or not; what it writes is written."""
    runner.keep_readiness(pod, manifest(ready=shown), probe_until_answered(pod.ready_url or ""))
    runner.writer.shutdown(wait=True)
    runner.writer = ThreadPoolExecutor(max_workers=pod_runner.WRITE_WORKERS)


def slurmd_pod(url: str, *, alive: bool = True) -> pod_runner.RunningPod:
    pod = pod_runner.RunningPod(
        uid="u1", name="slurm/slurm-worker-hpc-0", argv=["slurmd"], env={}, log_path=Path("/x")
    )
    pod.ready_url = url
    pod.process = Running(alive)  # type: ignore[assignment]
    return pod


def test_a_slurmd_that_does_not_answer_ready_leaves_its_pod_not_ready(slurmd: str) -> None:
    pod = slurmd_pod(slurmd)
    runner, apiserver = runner_with(pod)
    look(runner, pod, shown=False)
    assert apiserver.patches == []
    assert not pod.ready


def marked_ready(url: str) -> tuple[pod_runner.PodRunner, pod_runner.RunningPod, Apiserver]:
    """A pod whose slurmd answers ready, after the runner's first look at it."""
    pod = slurmd_pod(url)
    runner, apiserver = runner_with(pod)
    Slurmd.ready = True
    look(runner, pod, shown=False)
    return runner, pod, apiserver


def test_the_pod_is_marked_ready_once_slurmd_answers_and_its_containers_with_it(
    slurmd: str,
) -> None:
    _runner, _pod, apiserver = marked_ready(slurmd)
    [(path, patch, content_type)] = apiserver.patches
    assert path == "/api/v1/namespaces/slurm/pods/slurm-worker-hpc-0/status"
    assert content_type == "application/strategic-merge-patch+json"
    assert {(c["type"], c["status"]) for c in patch["status"]["conditions"]} == {
        ("Ready", "True"),
        ("ContainersReady", "True"),
    }
    # The whole list, as PodStatus has no merge key for it: the container's state is kept.
    assert patch["status"]["containerStatuses"] == [
        {"name": "slurmd", "ready": True, "state": {"running": {}}}
    ]


def test_ready_is_written_again_when_another_writer_put_an_older_status_back(
    slurmd: str,
) -> None:
    runner, pod, apiserver = marked_ready(slurmd)
    look(runner, pod, shown=True)  # the status as written: nothing to do
    assert len(apiserver.patches) == 1
    look(runner, pod, shown=False)  # undone by an older copy
    assert len(apiserver.patches) == 2


class SlowApiserver(Apiserver):
    """An apiserver that answers a write only once `answer` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()

    def request(self, method: str, path: str, body: t.Any = None, **kwargs: t.Any) -> t.Any:
        assert self.answer.wait(30), "the test never let the apiserver answer"
        return super().request(method, path, body, **kwargs)


def test_looks_go_on_while_a_report_is_written_and_send_it_once(slurmd: str) -> None:
    """A report is written beside the looks (32 written one after the other held up the stop
    of pods deleted meanwhile by 0.5 s); looks that still see the old status meanwhile do
    not write it again."""
    pod = slurmd_pod(slurmd)
    apiserver = SlowApiserver()
    runner = runner_with(pod, apiserver)[0]
    Slurmd.ready = True
    for _look in range(3):  # not waited for: the apiserver has not answered yet
        runner.keep_readiness(pod, manifest(ready=False), probe_until_answered(slurmd))
    assert pod.ready and runner.reporting == {pod.uid}
    apiserver.answer.set()
    runner.writer.shutdown(wait=True)
    assert len(apiserver.patches) == 1
    assert runner.reporting == set()


def test_a_slurmd_that_exited_makes_its_pod_not_ready(slurmd: str) -> None:
    pod = slurmd_pod(slurmd, alive=False)
    pod.ready = True
    runner, apiserver = runner_with(pod)
    look(runner, pod, shown=True)
    [(_path, patch, _type)] = apiserver.patches
    assert {c["status"] for c in patch["status"]["conditions"]} == {"False"}
    assert not pod.ready


def test_the_probe_is_slurmds_port_on_the_pods_address() -> None:
    slurm = t.cast(t.Any, type("SlurmPod", (), {"kind": "slurmd", "address": "198.18.28.11"}))
    pod = {"spec": {"containers": [{"ports": [{"name": "slurmd", "containerPort": 6818}]}]}}
    assert pod_runner.readiness_url(pod, slurm) == "http://198.18.28.11:6818/readyz"
    slurm.kind = "slurmctld"
    assert pod_runner.readiness_url(pod, slurm) is None


def test_kwok_leaves_slurmd_pods_not_ready_and_others_ready() -> None:
    stages = {stage["metadata"]["name"]: stage["spec"] for stage in k8s_lab.pod_stages()}
    key = '.metadata.labels["app.kubernetes.io/name"]'

    def label_rule(name: str) -> tuple[str, list[str]]:
        [rule] = [r for r in stages[name]["selector"]["matchExpressions"] if r["key"] == key]
        return rule["operator"], rule["values"]

    assert label_rule("pod-running") == ("NotIn", ["slurmd"])
    assert label_rule("slurmd-pod-running") == ("In", ["slurmd"])
    assert "{type: Ready, status: 'True'" in stages["pod-running"]["next"]["statusTemplate"]
    assert "{type: Ready, status: 'False'" in stages["slurmd-pod-running"]["next"]["statusTemplate"]
    # kwok uses none of its own pod stages once one is configured: deletion is here too.
    assert stages["pod-deleted"]["next"] == {"finalizers": {"empty": True}, "delete": True}


def probe_until_answered(url: str) -> bool:
    """The runner's probe, looked at as the runner does (never waiting on it)."""
    probe = pod_runner.ReadinessProbe(url)
    looks = 0
    while (answer := probe.answer()) is None:
        looks += 1
        time.sleep(0.01)
    assert looks < 200, "the probe outlived its timeout"
    return answer


def test_the_runners_probe_answers_what_slurmd_says_without_blocking(slurmd: str) -> None:
    assert probe_until_answered(slurmd) is False  # 503 while slurmd registers
    Slurmd.ready = True
    assert probe_until_answered(slurmd) is True
    # The first look returns at once, whatever the other end does.
    probe = pod_runner.ReadinessProbe(slurmd)
    assert probe.answer() is None
    probe.close()


def test_the_runners_probe_of_a_port_nobody_listens_on_is_not_ready() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert probe_until_answered(f"http://127.0.0.1:{port}/readyz") is False
