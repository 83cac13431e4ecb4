# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's pods go the way a kubelet lets them go: hooks, then the programs, then the object.

kwok deletes a terminating pod at once; the pods the runner runs carry its annotation, which
kwok's deletion stage leaves alone, and the runner deletes them (no grace left, their uid as
a precondition) only after their preStop hooks ran and their programs stopped. Each pod's
program is signalled once its own hook has run, as its node's kubelet does; the runner follows
the stops look after look and never waits on one. Real processes here; the apiserver is a
recorder.
"""

from __future__ import annotations

import subprocess
import sys
import time
import typing as t
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))

import k8s_lab
import pod_runner


class Apiserver:
    """Answers the runner's lists from `pods` and records what it writes."""

    def __init__(self, pods: list[dict[str, t.Any]]) -> None:
        self.pods = pods
        self.writes: list[tuple[str, str, t.Any]] = []

    def get(self, path: str) -> dict[str, t.Any]:
        if path.startswith("/api/v1/nodes"):
            return {"items": [{"metadata": {"name": "hpc-0"}}]}
        return {"metadata": {"resourceVersion": "7"}, "items": self.pods}

    def request(self, method: str, path: str, body: t.Any = None, **_kw: t.Any) -> t.Any:
        self.writes.append((method, path, body))
        return 200, {}


class Slurm:
    """The part of a SlurmPod that stopping uses: its preStop hook."""

    def __init__(self, hook_dir: Path, name: str) -> None:
        self.pre_stop = ["sh", "-c", f"touch {hook_dir}/{name}"]

    def start_exec(self, *argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


class Slinky:
    """The cluster's files: which pods were released after their programs stopped."""

    def __init__(self) -> None:
        self.released: list[str] = []
        self.batches = 0

    def release_pods(self, pods: t.Any) -> None:
        self.released.extend(uid for uid, _pod in pods)
        self.batches += 1

    def write_hosts(self, _services: t.Any) -> None:
        pass

    def services(self) -> list[t.Any]:
        return []


PROGRAMS: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def no_program_left() -> t.Iterator[None]:
    """A test that fails before the runner stopped its pods must not leave their shells
    looping (a red run once left 14 of them behind)."""
    yield
    while PROGRAMS:
        program = PROGRAMS.pop()
        if program.poll() is None:
            program.kill()
            program.wait()


def running_pod(tmp_path: Path, name: str) -> pod_runner.RunningPod:
    """A pod whose program, when told to stop, writes down which preStop hooks had run."""
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    trapped = tmp_path / f"{name}.trapped"
    program = (
        f"trap 'ls {hooks} > {tmp_path}/{name}.seen; exit 0' TERM; touch {trapped};"
        " while :; do sleep 0.05; done"
    )
    pod = pod_runner.RunningPod(
        uid=f"uid-{name}", name=f"slurm/{name}", argv=[], env={}, log_path=tmp_path / name
    )
    pod.process = subprocess.Popen(["sh", "-c", program])
    PROGRAMS.append(pod.process)
    # A TERM sent before the shell has set its trap kills it (-15): CI's loaded machine did.
    deadline = time.monotonic() + 10
    while not trapped.exists():
        assert pod.process.poll() is None and time.monotonic() < deadline, "the shell never ran"
        time.sleep(0.01)
    pod.slurm = t.cast(t.Any, Slurm(hooks, name))
    return pod


def runner_for(apiserver: Apiserver, pods: list[pod_runner.RunningPod]) -> pod_runner.PodRunner:
    runner = pod_runner.PodRunner.__new__(pod_runner.PodRunner)
    runner.lab = apiserver
    runner.pods = {pod.uid: pod for pod in pods}
    runner.stopping = False
    runner.slinky = t.cast(t.Any, Slinky())
    runner.next_refresh = float("inf")
    runner.ending = {}
    runner.writer = ThreadPoolExecutor(max_workers=pod_runner.WRITE_WORKERS)
    runner.reporting = set()
    runner.deleting = set()
    return runner


def sync_until_stopped(runner: pod_runner.PodRunner) -> int:
    """Look again, as the runner's loop does, until no pod is stopping and every delete was
    answered; how many looks that took."""
    deadline = time.monotonic() + 30
    looks = 0
    while True:
        runner.sync()
        looks += 1
        if not runner.ending:
            break
        assert time.monotonic() < deadline, f"still stopping: {sorted(runner.ending)}"
        time.sleep(pod_runner.STOP_LOOK_S)
    runner.writer.shutdown(wait=True)
    return looks


def manifest(pod: pod_runner.RunningPod, *, deleting: bool, ours: bool = True) -> dict[str, t.Any]:
    namespace, name = pod.name.split("/")
    meta: dict[str, t.Any] = {"uid": pod.uid, "namespace": namespace, "name": name}
    if ours:
        meta["annotations"] = {pod_runner.RUN_BY_ANNOTATION: pod_runner.RUN_BY_VALUE}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T14:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "hpc-0"}, "status": {"phase": "Running"}}


def test_kwok_leaves_the_deletion_of_the_runners_pods_to_the_runner() -> None:
    [stage] = [s for s in k8s_lab.pod_stages() if s["metadata"]["name"] == "pod-deleted"]
    rules = stage["spec"]["selector"]["matchExpressions"]
    assert {"key": ".metadata.deletionTimestamp", "operator": "Exists"} in rules
    assert {
        "key": f'.metadata.annotations["{pod_runner.RUN_BY_ANNOTATION}"]',
        "operator": "DoesNotExist",
    } in rules


def test_each_program_is_signalled_after_its_own_hook_and_released_once(
    tmp_path: Path,
) -> None:
    pods = [
        running_pod(tmp_path, "slurm-worker-hpc-0"),
        running_pod(tmp_path, "slurm-worker-hpc-1"),
    ]
    runner = runner_for(Apiserver([]), [])
    runner.start_stopping(pods, hooks=dict.fromkeys((p.uid for p in pods), True))
    assert set(runner.ending) == {pod.uid for pod in pods}  # begun, not waited for
    deadline = time.monotonic() + 30
    while runner.ending:
        assert time.monotonic() < deadline, f"still stopping: {sorted(runner.ending)}"
        runner.follow_stops()
        time.sleep(pod_runner.STOP_LOOK_S)
    for pod in pods:
        assert pod.process is not None and pod.process.returncode == 0  # its TERM trap ran
        name = pod.name.split("/")[1]
        assert name in (tmp_path / f"{name}.seen").read_text().split()
    assert sorted(t.cast(Slinky, runner.slinky).released) == sorted(pod.uid for pod in pods)


def test_a_deleted_pod_goes_only_after_its_program_stopped_and_only_that_pod(
    tmp_path: Path,
) -> None:
    pod = running_pod(tmp_path, "slurm-worker-hpc-0")
    apiserver = Apiserver([manifest(pod, deleting=True)])
    runner = runner_for(apiserver, [pod])
    runner.sync()
    assert apiserver.writes == []  # its hook and program are still under way
    assert sync_until_stopped(runner) > 1
    runner.sync()  # a list that still shows the pod sends no second delete
    assert pod.process is not None and pod.process.returncode == 0
    assert runner.pods == {}
    assert apiserver.writes == [
        (
            "DELETE",
            "/api/v1/namespaces/slurm/pods/slurm-worker-hpc-0",
            {"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid}},
        )
    ]


def test_a_deleted_pods_object_goes_in_the_look_its_program_stopped(tmp_path: Path) -> None:
    """As a kubelet deletes the object once its containers ended: no second list is needed
    (32 nodes given back together waited a look, up to 0.25 s on a busy machine, for it)."""
    pod = running_pod(tmp_path, "slurm-worker-hpc-0")
    apiserver = Apiserver([manifest(pod, deleting=True)])
    runner = runner_for(apiserver, [pod])
    runner.sync()  # the only list: it shows the pod deleted
    runner.follow_exits(30)  # its hook's end, then its program's, each followed at once
    assert runner.ending == {}
    runner.writer.shutdown(wait=True)
    assert pod.process is not None and pod.process.returncode == 0
    assert apiserver.writes == [
        (
            "DELETE",
            "/api/v1/namespaces/slurm/pods/slurm-worker-hpc-0",
            {"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid}},
        )
    ]


def test_pods_stopped_with_the_runner_keep_their_objects(tmp_path: Path) -> None:
    """The runner stopping (the lab going down) stops the programs and deletes nothing."""
    pod = running_pod(tmp_path, "slurm-worker-hpc-0")
    apiserver = Apiserver([manifest(pod, deleting=False)])
    runner = runner_for(apiserver, [pod])
    runner.start_stopping([pod], hooks={pod.uid: True})
    runner.follow_exits(30)
    assert runner.ending == {}
    runner.writer.shutdown(wait=True)
    assert pod.process is not None and pod.process.returncode == 0
    assert apiserver.writes == []


def test_a_pod_on_a_node_that_is_gone_is_killed_without_its_hook_and_left_to_the_pod_gc(
    tmp_path: Path,
) -> None:
    pod = running_pod(tmp_path, "slurm-worker-hpc-9")
    gone = manifest(pod, deleting=False)
    gone["spec"]["nodeName"] = "hpc-9"  # not among the apiserver's Nodes
    apiserver = Apiserver([gone])
    runner = runner_for(apiserver, [pod])
    sync_until_stopped(runner)
    assert pod.process is not None and pod.process.returncode == -9
    assert not (tmp_path / "hooks" / "slurm-worker-hpc-9").exists()
    assert apiserver.writes == []


def test_pods_deleted_together_are_each_released_and_deleted_once_by_their_uid(
    tmp_path: Path,
) -> None:
    names = [f"slurm-worker-hpc-{i}" for i in range(10)]
    pods = [running_pod(tmp_path, name) for name in names]
    apiserver = Apiserver([manifest(pod, deleting=True) for pod in pods])
    runner = runner_for(apiserver, pods)
    looks = sync_until_stopped(runner)
    assert runner.pods == {}
    slinky = t.cast(Slinky, runner.slinky)
    assert sorted(slinky.released) == sorted(pod.uid for pod in pods)
    # Pods that end in the same look are released together (one scan of the chroot).
    assert 1 <= slinky.batches < looks
    assert sorted(apiserver.writes, key=lambda write: write[1]) == [
        (
            "DELETE",
            f"/api/v1/namespaces/slurm/pods/{pod.name.split('/')[1]}",
            {"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid}},
        )
        for pod in sorted(pods, key=lambda pod: pod.name)
    ]


class ReplacedPodApiserver(Apiserver):
    """The pod was replaced (same name, new uid) between the runner's list and its claim:
    the apiserver refuses the annotation as it refuses a changed metadata.uid."""

    def request(self, method: str, path: str, body: t.Any = None, **_kw: t.Any) -> t.Any:
        self.writes.append((method, path, body))
        return 422, {"message": 'metadata.uid: Invalid value: "new": field is immutable'}


def test_a_pod_not_claimed_gives_back_the_address_its_spec_took(tmp_path: Path) -> None:
    """A spec sets aside an address and a network namespace; a pod that is then not started
    (claimed too late) must give them back, or its hostname gets a second, empty address."""
    pod = pod_runner.RunningPod(
        uid="uid-ctld", name="slurm/slurm-controller-0", argv=[], env={}, log_path=tmp_path / "l"
    )
    pod.slurm = t.cast(t.Any, object())
    apiserver = ReplacedPodApiserver([manifest(pod, deleting=False, ours=False)])
    runner = runner_for(apiserver, [])
    runner.spec_for = lambda _manifest: pod  # type: ignore[method-assign]
    runner.sync()
    assert runner.pods == {}
    assert [write[0] for write in apiserver.writes] == ["PATCH"]
    assert t.cast(Slinky, runner.slinky).released == ["uid-ctld"]
