# SPDX-License-Identifier: GPL-3.0-or-later
"""KEDA scales the autoscaled pool's NodeSet on Slurm's queue: molecule's verify of the
autoscale scenario, on real kubelets, real slurmd containers and real Slurm jobs.

The kind site's Slurm pool `hpc` is a StatefulSet NodeSet KEDA scales between zero and one
replica on the pending jobs of its partition. Each check starts with the pool at zero,
submits jobs, and waits for KEDA to scale the NodeSet out, the slurmd pod to register and
the jobs to run, then for the queue to empty and the NodeSet to go back to zero with
nothing left. A long job keeps its node through the scale-in: the operator drains its Slurm
node and deletes the pod only when the job has ended. Both metric paths: Prometheus (the
converge), then slurmctld's own endpoint with Prometheus stopped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kind_autoscale import (
    Loop,
    job_states,
    keda_timing,
    metric_path,
    nodeset_name,
    pods,
    replicas,
    slurm_node_of,
    switch_metric_path,
    wait_for_scrapes,
)
from kind_cluster import configured, job, kubectl, wait

pytestmark = pytest.mark.skipif(
    not configured(), reason="run by molecule verify (molecule/shared/verify_autoscale.yml)"
)

PARTITION = "batch"
# Long enough to outlive the queue emptying, KEDA's cooldown and the operator's drain check.
LONG_JOB_S = 90


def report(path: str, loop: Loop) -> None:
    print(f"{path}: {loop.seconds} after submission; KEDA {keda_timing()}")


def test_prometheus_path_scales_out_and_a_long_job_keeps_its_node_through_scale_in() -> None:
    assert metric_path() == "prometheus"
    wait_for_scrapes(PARTITION)
    loop = Loop(nodeset_name())
    loop.submit(PARTITION, [LONG_JOB_S, 2, 2])
    long_job, short_jobs = loop.jobs[0], loop.jobs[1:]
    loop.wait_scaled_out()
    loop.wait_first_running()
    (pod,) = wait(lambda: [p for p in pods(loop.nodeset) if p], 60, "the slurmd pod")
    node = wait(lambda: slurm_node_of(pod), 120, "the slurmd pod's Slurm node")
    assert job(long_job)["nodes"] == node["name"], job(long_job)["nodes"]
    loop.wait_done(short_jobs)
    # The queue is empty and the long job runs: KEDA scales in after its cooldown; the
    # operator drains the Slurm node and keeps the pod until the job has ended.
    wait(lambda: replicas(loop.nodeset) == 0, 180, "KEDA scaling in")
    loop.mark("scaled_in_asked")
    assert "RUNNING" in job_states(long_job), job(long_job)["job_state"]

    def draining() -> dict[str, object] | None:
        current = slurm_node_of(pod)
        return current if current and "DRAIN" in current["state"] else None

    drained = wait(draining, 90, f"{node['name']} drained for the scale-in")
    assert "RUNNING" in job_states(long_job), job(long_job)["job_state"]
    still = pods(loop.nodeset)
    assert [p["metadata"]["uid"] for p in still] == [pod["metadata"]["uid"]], still
    assert not still[0]["metadata"].get("deletionTimestamp"), "pod deleted under a running job"
    print(f"{node['name']} {drained['state']} while job {long_job} runs; its pod stays")
    loop.wait_done([long_job], timeout_s=LONG_JOB_S + 60)
    record = job(long_job)
    assert record["restart_cnt"] == 0 and record["exit_code"]["return_code"]["number"] == 0, record
    loop.wait_at_zero()
    # Gone, or kept from jobs: the operator drained it for the scale-in and the pod's
    # preStop marks it DOWN; the record of a dynamic node may outlive its pod a moment.
    left = slurm_node_of(pod)
    assert left is None or {"DRAIN", "DOWN"} & set(left["state"]), left["state"]
    report("prometheus", loop)


@pytest.fixture
def slurmctld_path() -> Iterator[float]:
    """site.yml run with keda_metrics_source=slurmctld (its seconds), then Prometheus scaled
    to none, so that only slurmctld's endpoint can feed KEDA; Prometheus back afterwards."""
    took = switch_metric_path("slurmctld")
    scale_prometheus(0)
    wait(lambda: not kubectl("get", "pods", "-n", "monitoring", "-l",
                             "app.kubernetes.io/name=prometheus", "-o", "name").strip(),
         120, "Prometheus stopped")  # fmt: skip
    yield took
    scale_prometheus(1)


def scale_prometheus(replicas: int) -> None:
    patch = f'{{"spec":{{"replicas":{replicas}}}}}'
    kubectl("patch", "prometheus", "-n", "monitoring", "prometheus", "--type=merge", "-p", patch)


def test_slurmctld_path_scales_out_and_back_without_prometheus(slurmctld_path: float) -> None:
    print(f"site.yml with keda_metrics_source=slurmctld: {slurmctld_path:.1f} s")
    assert metric_path() == "slurmctld"
    loop = Loop(nodeset_name())
    loop.submit(PARTITION, [3, 3])
    loop.wait_scaled_out()
    loop.wait_first_running()
    loop.wait_done(loop.jobs)
    loop.wait_at_zero()
    report("slurmctld", loop)
