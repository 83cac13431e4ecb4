# SPDX-License-Identifier: GPL-3.0-or-later
"""benchmarks/handover_kind.py: what the recipe's teardown does about what the recipe left.

The run that motivated it: a killed job stayed COMPLETING (slurmrestd refused to delete the
node with HTTP 422) and the re-created slurmd pod hung in Init:ContainerStatusUnknown.
"""

from __future__ import annotations

import sys
import typing as t
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import handover_kind as bench

PATIENCE = bench.TEARDOWN_PATIENCE_S


def pod(name: str, *, deleting: bool = False, init_reason: str = "") -> dict[str, t.Any]:
    status: dict[str, t.Any] = {"phase": "Pending" if init_reason else "Running"}
    if init_reason:
        status["initContainerStatuses"] = [
            {"name": "init", "state": {"terminated": {"reason": init_reason, "exitCode": 137}}}
        ]
    metadata: dict[str, t.Any] = {"name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"metadata": metadata, "status": status}


def job(job_id: int, state: str, *flags: str) -> dict[str, t.Any]:
    return {"job_id": job_id, "state": state, "state_flags": list(flags)}


NODE = {"name": "kind-worker", "state": "IDLE", "state_flags": []}


def test_a_clean_node_needs_nothing() -> None:
    assert bench.next_steps([], [job(7, "COMPLETED")], None, 0) == []


def test_the_node_record_is_deleted_once_nothing_holds_it() -> None:
    assert bench.next_steps([], [job(7, "CANCELLED")], NODE, 0) == [("delete node", "kind-worker")]


def test_a_hung_pod_is_force_deleted_at_once_a_healthy_one_waited_for() -> None:
    hung = pod("slurm-worker-a", init_reason="ContainerStatusUnknown")
    going = pod("slurm-worker-b", deleting=True)
    assert bench.pod_hung(hung) and not bench.pod_hung(going)
    assert bench.next_steps([hung, going], [], None, 0) == [
        ("force-delete pod", "slurm-worker-a"),
        ("wait pod", "slurm-worker-b"),
    ]
    # After the patience, any pod still there goes with grace 0.
    assert bench.next_steps([going], [], None, PATIENCE) == [("force-delete pod", "slurm-worker-b")]


def test_running_jobs_are_cancelled_and_completing_ones_waited_out_then_forced() -> None:
    jobs = [job(7, "RUNNING"), job(8, "CANCELLED", "COMPLETING"), job(9, "COMPLETED")]
    assert bench.next_steps([], jobs, NODE, 0) == [("cancel job", "7"), ("wait job", "8")]
    # Still COMPLETING after the patience: the node goes DOWN (slurmctld then lets the job
    # go) and its deletion is tried, again each round until Slurm lets it go.
    forced = bench.next_steps([], jobs[1:], NODE, PATIENCE)
    assert forced == [("down node", "kind-worker"), ("delete node", "kind-worker")]
    down = {**NODE, "state": "DOWN"}
    assert bench.next_steps([], jobs[1:], down, PATIENCE + 10) == [("delete node", "kind-worker")]


class FakeCluster:
    """Slurm refuses the node's deletion (HTTP 422) as long as job 8 is COMPLETING; DOWN ends it."""

    def __init__(self, refuse_forever: bool = False) -> None:
        self.submitted = [8]
        self.state = "IDLE"
        self.node_known = True
        self.refuse_forever = refuse_forever
        self.pods = [pod("slurm-worker-a", init_reason="ContainerStatusUnknown")]
        self.calls: list[str] = []
        self.slurm = self

    def node(self, name: str) -> dict[str, t.Any] | None:
        return {**NODE, "state": self.state} if self.node_known else None

    def slurm_job(self, job_id: int) -> dict[str, t.Any]:
        if self.state == "DOWN":
            return job(job_id, "CANCELLED")
        return job(job_id, "CANCELLED", "COMPLETING")

    def update_node(self, name: str, changes: dict[str, t.Any]) -> None:
        self.calls.append(f"update {name} {changes['state']}")
        self.state = changes["state"][0]

    def delete_node(self, name: str) -> None:
        self.calls.append(f"delete {name}")
        if self.refuse_forever or self.state != "DOWN":
            raise bench.SlurmRestError("slurmrestd refused DELETE node with HTTP 422", status=422)
        self.node_known = False

    def force_delete(self, namespace: str, name: str) -> None:
        self.calls.append(f"force-delete {name}")
        self.pods = []

    def cancel(self, job_id: int) -> None:
        self.calls.append(f"cancel {job_id}")


def test_settle_cleans_what_the_recipe_left_and_says_so(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cluster = FakeCluster()
    clock = iter(range(0, 10_000, 20))
    monkeypatch.setattr(bench.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(bench.time, "sleep", lambda _s: None)
    cleanup = bench.Cleanup()
    bench.settle(cluster, "kind-worker", lambda: cluster.pods, cleanup, bound_s=200)  # type: ignore[arg-type]
    assert cleanup.left == []
    assert cleanup.cleaned == [
        "force-delete pod slurm-worker-a",
        "down node kind-worker",
        "delete node kind-worker",
    ]
    assert cluster.calls[0] == "force-delete slurm-worker-a"
    assert "delete kind-worker" in cluster.calls[1:]  # refused (422) until the node was DOWN


def test_settle_gives_up_at_its_bound_and_names_what_is_left(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cluster = FakeCluster(refuse_forever=True)
    clock = iter(range(0, 10_000, 20))
    monkeypatch.setattr(bench.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(bench.time, "sleep", lambda _s: None)
    cleanup = bench.Cleanup()
    bench.settle(cluster, "kind-worker", lambda: cluster.pods, cleanup, bound_s=200)  # type: ignore[arg-type]
    assert len(cleanup.left) == 1
    assert cleanup.left[0].startswith("delete node kind-worker (SlurmRestError: ")
    assert "422" in cleanup.left[0]
    assert "Left: delete node kind-worker" in cleanup.report()


def test_a_failing_teardown_step_is_reported_not_raised() -> None:
    cleanup = bench.Cleanup()
    cleanup.step("label removed", lambda: None)
    cleanup.step("NodeSet spec restored", lambda: 1 / 0)
    assert cleanup.cleaned == ["label removed"]
    assert cleanup.left == ["NodeSet spec restored: ZeroDivisionError: division by zero"]


def test_a_failed_case_is_a_row_with_its_reason_and_the_report_still_prints(capsys) -> None:  # type: ignore[no-untyped-def]
    results = bench.Results()

    def recipe_trial(number: int) -> bench.Trial:
        if number:
            raise bench.LabError("timed out after 180 s waiting for the recipe's slurmd pod")
        return bench.Trial(seconds=31.0, ran=True, together=True)

    results.run("recipe", 3, recipe_trial)
    results.run("idle", 2, lambda _n: bench.Trial(seconds=1.2, ran=True))

    def no_rulebook(_number: int) -> bench.Trial:
        raise RuntimeError("no rulebook")

    results.run("events", 2, no_rulebook)
    args = bench.argparse.Namespace(grace=10, settle=5.0, cases=list(bench.CASES))
    bench.print_report(results, args)
    out = capsys.readouterr().out
    lines = {line.split("  ")[0]: line for line in out.splitlines() if line.strip()}
    recipe = lines["recipe: app pod runs (capped)"]
    assert "failed: LabError: timed out after 180 s" in recipe and " 1 " in recipe
    assert lines["protocol: busy node, 10 s grace (lent 5 s)"].split()[9:13] == ["0", "-", "-", "-"]
    assert "failed: RuntimeError: no rulebook" in lines["events: pod created to Running"]
    assert "protocol: idle lent node back (lent 5 s): p95 1.20 s, target 2 s: met" in out
    assert "events: pod created to Running: p95 - s, target 5 s: not run" in out
    assert "protocol: busy node, 10 s grace (lent 5 s): p95 - s, target 13 s: not run" in out
    assert "overlaps, target 0): recipe 1, idle 0" in out


def test_a_slurmd_pod_counts_as_running_until_its_kubelet_says_every_container_stopped() -> None:
    """The overlap check: a terminating pod whose containers still run is running; one in a
    terminal phase, or whose containers (sidecar too) all stopped, is not."""

    def slurmd(phase: str, main: str, sidecar: str, *, deleting: bool = False) -> dict[str, t.Any]:
        meta: dict[str, t.Any] = {"name": "slurm-worker-x"}
        if deleting:
            meta["deletionTimestamp"] = "2026-11-30T04:00:00Z"
        return {
            "metadata": meta,
            "status": {
                "phase": phase,
                "initContainerStatuses": [{"name": "logfile", "state": {sidecar: {}}}],
                "containerStatuses": [{"name": "slurmd", "state": {main: {}}}],
            },
        }

    assert bench.running(slurmd("Running", "running", "running"))
    assert bench.running(slurmd("Running", "running", "running", deleting=True))
    assert bench.running(slurmd("Running", "terminated", "running", deleting=True))
    assert not bench.running(slurmd("Running", "terminated", "terminated", deleting=True))
    assert not bench.running(slurmd("Failed", "terminated", "terminated", deleting=True))
    assert not bench.running(slurmd("Pending", "waiting", "waiting"))
