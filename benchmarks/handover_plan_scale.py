# SPDX-License-Identifier: GPL-3.0-or-later
"""How the handover planner scales: 50,000 nodes and 500,000 jobs, no cluster needed.

    .venv/bin/python benchmarks/handover_plan_scale.py [--trials 5] [--nodes 50000] [--jobs 500000]

Builds a synthetic site (a lendable pool of half the nodes, a third of it lent and running
the jobs, the rest dedicated or never-touch) and plans it twice: with a few hundred pending
application pods (idle nodes to lend) and with more pending pods than free nodes (1.2 per
node of the site, so every lent node is ranked to reclaim the cheapest). It prints, per
trial and as median, p95 and max: the wall time of one plan (untraced) and the peak Python
memory a plan allocates (tracemalloc, in a run of its own: tracing made the plan about
three times slower). Target (issue 41): 0.5 s per plan at 50,000 nodes and 500,000 jobs; about 15 s
in all with the default 5 trials (`--nodes 10000 --jobs 100000`: the earlier size).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / ".build" / "collections"), str(REPO / "benchmarks")]

from _common import figure, maximum, median, percentile, within  # noqa: E402

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (  # noqa: E402
    Journal,
    PartitionPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import plan  # noqa: E402
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (  # noqa: E402
    JobView,
    NodeView,
    PodView,
    SlurmNodeView,
)

NOW = 1_800_000_000.0
POOL = {"hpcops.io/pool": "interactive"}
GIB = 1024**3
TARGET_S = 0.5  # one plan at 50,000 nodes and 500,000 jobs (issue 41)


def reclaim_pending(node_count: int) -> int:
    """Pending pods enough to need more than the free nodes: the plan ranks every lent node."""
    return node_count * 6 // 5


def site(
    node_count: int, job_count: int, pending: int
) -> tuple[list[NodeView], list[PodView], dict[str, SlurmNodeView]]:
    nodes: list[NodeView] = []
    pods: list[PodView] = []
    lent: list[str] = []
    for i in range(node_count):
        name = f"node{i:05d}"
        if i % 2:
            nodes.append(
                NodeView(name, {"hpcops.io/pool": "slurm"}, cpu_m=64000, memory_b=512 * GIB)
            )
            continue
        state = "lent" if i % 3 == 0 else "free"
        journal = Journal.parse(
            json.dumps({"state": state, "op": f"op{i}", "idle_since": NOW - 3600})
        )
        nodes.append(NodeView(name, POOL, journal=journal, cpu_m=64000, memory_b=512 * GIB))
        if state == "lent":
            lent.append(name)
        elif i % 4 == 0:
            pods.append(
                PodView("jupyterhub", f"server-{i}", node=name, cpu_m=8000, memory_b=32 * GIB)
            )
    pods += [
        PodView(
            "jupyterhub",
            f"pending-{i}",
            phase="Pending",
            unschedulable=True,
            cpu_m=16000,
            memory_b=64 * GIB,
        )
        for i in range(pending)
    ]
    jobs: dict[str, list[JobView]] = {name: [] for name in lent}
    for j in range(job_count):
        jobs[lent[j % len(lent)]].append(
            JobView(j, "backfill" if j % 5 else "precious", NOW + (j % 9000))
        )
    slurm = {
        name: SlurmNodeView(name, frozenset({"ALLOCATED"}), tuple(node_jobs))
        for name, node_jobs in jobs.items()
    }
    return nodes, pods, slurm


POLICY = Policy(
    pool_selector=POOL,
    headroom=4,
    lend_min_idle_s=600,
    max_changes_per_run=32,
    partitions={"precious": PartitionPolicy(600, "wait")},
)


def measure(
    scenario: str, pending: int, trials: int, node_count: int, job_count: int, verbose: bool = False
) -> tuple[list[float], list[float]]:
    """Seconds and peak MiB of one plan, per trial, on a synthetic site."""
    nodes, pods, slurm = site(node_count, job_count, pending)
    if verbose:
        print(
            f"planner, {scenario}: {node_count} nodes, {job_count} jobs, {len(pods)} pods, "
            f"{len(slurm)} lent nodes"
        )
        print(f"{'trial':>6}  {'seconds':>8}  {'peak MiB':>8}  {'reclaim':>7}  {'lend':>5}")
    # The peak of a plan's allocations, traced once: tracing slows the plan, so the timed
    # trials run untraced.
    tracemalloc.start()
    plan(nodes, pods, slurm, POLICY, NOW)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    times, peaks = [], []
    for trial in range(1, trials + 1):
        started = time.perf_counter()
        result = plan(nodes, pods, slurm, POLICY, NOW)
        elapsed = time.perf_counter() - started
        times.append(elapsed)
        peaks.append(peak)
        if verbose:
            print(
                f"{trial:>6}  {elapsed:>8.3f}  {peak:>8.1f}  {len(result.reclaim):>7}  "
                f"{len(result.lend):>5}"
            )
    return times, peaks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=50000)
    parser.add_argument("--jobs", type=int, default=500000)
    args = parser.parse_args()
    # 300 pending pods leave idle nodes to lend; reclaim_pending need more than the free
    # ones, so the plan ranks every lent node to reclaim the cheapest.
    for scenario, pending in (("lend", 300), ("reclaim", reclaim_pending(args.nodes))):
        times, peaks = measure(scenario, pending, args.trials, args.nodes, args.jobs, True)
        p95 = percentile(times, 0.95)
        print(f"{'median':>6}  {figure(median(times), 3):>8}  {figure(median(peaks), 1):>8}")
        print(f"{'p95':>6}  {figure(p95, 3):>8}")
        print(
            f"{'max':>6}  {figure(maximum(times), 3):>8}  {figure(maximum(peaks), 1):>8}"
            f"   (target: {TARGET_S} s per plan at p95: {within(p95, TARGET_S)})\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
