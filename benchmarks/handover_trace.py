# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Both sides of the trade over a week: lend_when idle against lend_when demand, timer and events.

    .venv/bin/python benchmarks/handover_trace.py [--days 7] [--nodes 16] [--seeds 3]

A mixed trace (notebooks and Slurm jobs arriving at random, more notebooks by day) is
played against a pool of interactive nodes. Every decision is the collection's own planner
(`plan`, with the site's policy defaults: headroom 1, lend_min_idle_s 600,
relend_cooldown_s 1800, backfill's 300 s grace and requeue); what the cluster does between
decisions is modelled with the latencies measured in the lab and in kind:

* a run starts `EVENT_S` after its event (the rulebook and ansible-playbook's start) or at
  the timer, and takes `RUN_S`; one run at a time (the Lease);
* a lend makes the node usable by Slurm after `LEND_S`; a reclaim drains the node, gives
  its jobs the partition's grace, requeues those still running, and frees it `RECLAIM_S`
  after its last job left;
* Kubernetes places a notebook on a free node with room at once; Slurm starts a job on a
  lent node with room at once (in order of arrival, whole jobs only).

Printed per mode (median over the seeds): lends and reclaims, jobs requeued, application
wait (creation to running) and job wait (submission to start), mean and p95, and how much
of the lent node time ran jobs. The single-job wait on a real cluster (a job submitted to
an idle pool, event-driven and on the timer) is `benchmarks/handover_events.py --jobs`.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import typing as t
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / ".build" / "collections"), str(REPO / "benchmarks")]

from _common import NO_FIGURE, figure, mean, median, percentile  # noqa: E402

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import (  # noqa: E402
    LendablePartition,
    PendingJob,
    Shape,
    SlurmQueue,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (  # noqa: E402
    Journal,
    PartitionPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import (  # noqa: E402
    plan,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (  # noqa: E402
    JobView,
    NodeView,
    PodView,
    SlurmNodeView,
)

# Measured latencies (README: "Measured"): seconds.
EVENT_S = 2.2  # event to the run's start: rulebook, ansible-playbook, module start
RUN_S = 3.2  # a rebalance run
LEND_S = 6.0  # taint and label to slurmd registered
RECLAIM_S = 2.0  # last job gone to the node free for the applications
TIMER_S = 300.0  # handover_schedule_every_min 5
POLL_S = 15.0  # the event source's Slurm poll
STEP_S = 2.0
GRACE_S = 300
CPU_M, MEMORY_B = 32_000, 256 << 30
GIB = 1 << 30
# The trace: notebooks per pool node and hour by night (by day: --apps-by-day), their mean
# life (lognormal), jobs per pool node and hour, their mean run time (exponential, at most
# backfill's 4 h MaxTime).
APPS_BY_NIGHT, APP_S = 0.05, 5400.0
JOBS_PER_NODE_HOUR, JOB_S = 0.25, 2700.0


@dataclass
class App:
    arrive: float
    duration: float
    cpu_m: int
    start: float | None = None
    node: str = ""


@dataclass
class Job:
    job_id: int
    arrive: float
    duration: float
    cpu_m: int
    time_limit_s: float
    start: float | None = None
    node: str = ""
    requeues: int = 0
    first_start: float | None = None


@dataclass
class Node:
    name: str
    state: str = "free"  # free, lending, lent, reclaiming
    since: float = 0.0
    idle_since: float | None = 0.0
    last_reclaim: float | None = None
    ready_at: float = 0.0  # lending: usable by Slurm; reclaiming: grace over
    last_busy: float = 0.0
    apps: list[App] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    lent_s: float = 0.0
    busy_cpu_s: float = 0.0

    def room(self) -> int:
        return CPU_M - sum(a.cpu_m for a in self.apps) - sum(j.cpu_m for j in self.jobs)


def trace(
    seed: int, days: float, nodes: int, apps_by_day: float = 0.6
) -> tuple[list[App], list[Job]]:
    """Notebooks (more by day) and jobs, arriving at random."""
    rng = random.Random(seed)  # noqa: S311 (a reproducible trace, not a secret)
    end = days * 86400
    apps, jobs = [], []
    at = 0.0
    while at < end:
        day = 8 <= (at / 3600) % 24 < 18
        at += rng.expovariate((apps_by_day if day else APPS_BY_NIGHT) * nodes / 3600)
        apps.append(App(at, rng.lognormvariate(math.log(APP_S), 0.8), rng.choice((8, 16)) * 1000))
    at = 0.0
    while at < end:
        at += rng.expovariate(JOBS_PER_NODE_HOUR * nodes / 3600)
        duration = min(rng.expovariate(1 / JOB_S), 4 * 3600)
        limit = min(max(duration * 2, 600), 4 * 3600)
        jobs.append(Job(len(jobs) + 1, at, duration, rng.choice((16, 32)) * 1000, limit))
    return apps, jobs


class Cluster:
    """The pool, its notebooks and Slurm's jobs, with the planner deciding the handover."""

    def __init__(self, policy: Policy, nodes: int, events: bool) -> None:
        self.policy = policy
        self.events = events
        self.nodes = [Node(f"int{i:02d}") for i in range(nodes)]
        self.pending_apps: list[App] = []
        self.queue: list[Job] = []
        self.done_apps: list[App] = []
        self.done_jobs: list[Job] = []
        self.lends = self.reclaims = self.requeued = self.runs = 0
        self.run_at: float | None = None  # a run due (event or timer)
        self.next_timer = TIMER_S
        self.next_poll = POLL_S
        self.announced: set[str] = set()
        self.apps_announced: set[int] = set()
        self.apps_repeat_at = 0.0
        self.busy_until = 0.0  # the run in progress holds the Lease

    # -- the cluster between runs -------------------------------------------------------

    def step(self, now: float) -> None:
        for node in self.nodes:
            for app in [a for a in node.apps if now >= a.start + a.duration]:
                node.apps.remove(app)
                self.done_apps.append(app)
            for job in [j for j in node.jobs if now >= j.start + j.duration]:
                node.jobs.remove(job)
                node.last_busy = now
                self.done_jobs.append(job)
            if node.state == "lending" and now >= node.ready_at:
                node.state, node.since = "lent", now
            if node.state == "reclaiming" and (not node.jobs or now >= node.ready_at):
                for job in node.jobs:  # the grace is over: requeued
                    job.start, job.node = None, ""
                    job.requeues += 1
                    self.requeued += 1
                    self.queue.append(job)
                node.jobs = []
                node.state, node.since, node.last_reclaim = "free", now + RECLAIM_S, now
                node.idle_since = None
            if node.state == "lent":
                node.lent_s += STEP_S
                node.busy_cpu_s += STEP_S * sum(j.cpu_m for j in node.jobs) / 1000
        for app in list(self.pending_apps):
            home = next(
                (
                    n
                    for n in self.nodes
                    if n.state == "free" and n.since <= now and n.room() >= app.cpu_m
                ),
                None,
            )
            if home is not None:
                app.start, app.node = now, home.name
                home.apps.append(app)
                self.pending_apps.remove(app)
        self.queue.sort(key=lambda j: j.arrive)
        for job in list(self.queue):
            home = next(
                (n for n in self.nodes if n.state == "lent" and n.room() >= job.cpu_m), None
            )
            if home is not None:
                job.start, job.node = now, home.name
                job.first_start = job.first_start if job.first_start is not None else now
                home.jobs.append(job)
                self.queue.remove(job)

    # -- what starts a run ----------------------------------------------------------------

    def triggers(self, now: float) -> None:
        if now >= self.next_timer:
            self.next_timer += TIMER_S
            self._due(now)
        if not self.events:
            return
        waiting = {id(a) for a in self.pending_apps}
        # New waiting notebooks at once; the same ones again every 30 s (repeat_s).
        if waiting - self.apps_announced or (waiting and now >= self.apps_repeat_at):
            self.apps_announced |= waiting
            self.apps_repeat_at = now + 30.0
            self._due(now + EVENT_S)
        # A node that just became idle: a run records its idle_since (both modes).
        unmarked = {
            n.name for n in self.nodes if n.state == "free" and not n.apps and n.idle_since is None
        }
        if unmarked - self.announced:
            self.announced |= unmarked
            self._due(now + EVENT_S)
        if self.policy.lend_when == "idle":
            idle = [n for n in self._idle_free(now) if n.name not in self.announced]
            if len(self._idle_free(now)) > self.policy.headroom and idle:
                self.announced.update(n.name for n in idle)
                self._due(now + EVENT_S)
        elif now >= self.next_poll:
            self.next_poll += POLL_S
            # The source announces when the planner's placement would lend a node.
            if self.queue and plan(*self._views(now), self.policy, now, self._queue_view()).lend:
                self._due(now + EVENT_S)
        self.announced &= {n.name for n in self._idle_free(now)} | unmarked

    def _idle_free(self, now: float) -> list[Node]:
        return [
            n
            for n in self.nodes
            if n.state == "free"
            and not n.apps
            and n.idle_since is not None
            and now - n.idle_since >= self.policy.lend_min_idle_s
            and (n.last_reclaim is None or now - n.last_reclaim >= self.policy.relend_cooldown_s)
        ]

    def _due(self, at: float) -> None:
        self.run_at = at if self.run_at is None else min(self.run_at, at)

    # -- a run: the planner's decisions, applied --------------------------------------------

    def maybe_run(self, now: float) -> None:
        if self.run_at is None or now < max(self.run_at, self.busy_until):
            return
        self.run_at = None
        self.runs += 1
        result = plan(*self._views(now), self.policy, now, self._queue_view())
        done = now + RUN_S
        self.busy_until = done
        for decision in result.lend:
            node = self._node(decision.node)
            node.state, node.since, node.ready_at = "lending", done, done + LEND_S
            self.lends += 1
        for decision in result.reclaim:
            node = self._node(decision.node)
            node.state, node.since = "reclaiming", done
            node.ready_at = done + (GRACE_S if node.jobs else 0.0)
            self.reclaims += 1
        for name, mark in result.idle_marks.items():
            self._node(name).idle_since = mark

    def _node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def _views(self, now: float) -> tuple[list[NodeView], list[PodView], dict[str, SlurmNodeView]]:
        nodes = [
            NodeView(
                n.name,
                {"hpcops.io/pool": "interactive"},
                journal=Journal(
                    state=n.state,
                    since=n.since,
                    last_reclaim=n.last_reclaim,
                    idle_since=n.idle_since,
                ),
                cpu_m=CPU_M,
                memory_b=MEMORY_B,
            )
            for n in self.nodes
        ]
        pods = [
            PodView("jupyterhub", f"nb{id(a)}", node=n.name, cpu_m=a.cpu_m, memory_b=8 * GIB)
            for n in self.nodes
            for a in n.apps
        ] + [
            PodView(
                "jupyterhub",
                f"nb{id(a)}",
                phase="Pending",
                unschedulable=True,
                cpu_m=a.cpu_m,
                memory_b=8 * GIB,
            )
            for a in self.pending_apps
        ]
        slurm = {
            n.name: SlurmNodeView(
                n.name,
                frozenset({"MIXED" if n.jobs else "IDLE"}),
                tuple(JobView(j.job_id, "backfill", j.start + j.time_limit_s) for j in n.jobs),
                last_busy=n.last_busy,
            )
            for n in self.nodes
            if n.state in ("lent", "reclaiming")
        }
        return nodes, pods, slurm

    def _queue_view(self) -> SlurmQueue:
        return SlurmQueue(
            tuple(
                PendingJob(
                    j.job_id,
                    ("backfill",),
                    per_node=Shape(j.cpu_m, 4 * GIB * j.cpu_m // 1000),
                    time_limit_s=j.time_limit_s,
                    reason="Resources",
                )
                for j in self.queue
            ),
            {"backfill": LendablePartition("backfill", 4 * 3600.0)},
        )


# The modes compared: lend_when, and demand_return_idle_s.
MODES = (("idle", None), ("demand", None), ("demand", 600))


def play(
    mode: tuple[str, int | None],
    events: bool,
    seed: int,
    days: float,
    nodes: int,
    apps_by_day: float,
) -> dict[str, float]:
    policy = Policy(
        pool_selector={"hpcops.io/pool": "interactive"},
        lend_when=mode[0],
        demand_return_idle_s=mode[1],
        partitions={"backfill": PartitionPolicy(GRACE_S, "requeue")},
    )
    apps, jobs = trace(seed, days, nodes, apps_by_day)
    cluster = Cluster(policy, nodes, events)
    end = days * 86400
    now = 0.0
    while now < end:
        while apps and apps[0].arrive <= now:
            cluster.pending_apps.append(apps.pop(0))
        while jobs and jobs[0].arrive <= now:
            cluster.queue.append(jobs.pop(0))
        cluster.step(now)
        cluster.triggers(now)
        cluster.maybe_run(now)
        now += STEP_S
    app_waits = [a.start - a.arrive for a in cluster.done_apps] + [
        end - a.arrive for a in cluster.pending_apps
    ]
    job_waits = [j.first_start - j.arrive for j in cluster.done_jobs if j.first_start is not None]
    lent_s = sum(n.lent_s for n in cluster.nodes)
    return {
        "lends": cluster.lends,
        "reclaims": cluster.reclaims,
        "requeued": cluster.requeued,
        "app_mean": mean(app_waits),
        "app_p95": percentile(app_waits, 0.95),
        "job_mean": minutes(mean(job_waits)),
        "job_p95": minutes(percentile(job_waits, 0.95)),
        "jobs": len(job_waits),
        "used": sum(n.busy_cpu_s for n in cluster.nodes) / max(lent_s * CPU_M / 1000, 1),
        "runs": cluster.runs,
    }


def minutes(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 60


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--apps-by-day", type=float, default=0.6, help="notebooks per pool node and hour, 8 to 18 h"
    )
    args = parser.parse_args()
    print(
        f"{args.nodes} pool nodes, {args.days:g} days, {args.apps_by_day:g} notebooks per node "
        f"and hour by day, median of {args.seeds} seeds; "
        f"timer every {TIMER_S:.0f} s, event source polling Slurm every {POLL_S:.0f} s"
    )
    header = (
        f"{'lend_when':<19} {'runs on':<7} {'lends':>6} {'reclaims':>8} {'requeued':>8}"
        f" {'app wait s':>11} {'app p95 s':>9} {'job wait min':>12} {'job p95 min':>11}"
        f" {'lent CPU used':>13} {'runs':>6}"
    )
    print(header)
    print("-" * len(header))
    for mode in MODES:
        for events in (False, True):
            rows = [
                play(mode, events, seed, args.days, args.nodes, args.apps_by_day)
                for seed in range(args.seeds)
            ]

            def mid(key: str, digits: int, rows: list[dict[str, t.Any]] = rows) -> str:
                """The median over the seeds ("-" where no seed has the figure)."""
                return figure(median(r[key] for r in rows if r[key] is not None), digits)

            used = median(r["used"] for r in rows)
            print(
                f"{mode[0] + (f', return {mode[1]}' if mode[1] is not None else ''):<19}"
                f" {'events' if events else 'timer':<7} {mid('lends', 0):>6}"
                f" {mid('reclaims', 0):>8} {mid('requeued', 0):>8} {mid('app_mean', 1):>11}"
                f" {mid('app_p95', 1):>9} {mid('job_mean', 1):>12} {mid('job_p95', 1):>11}"
                f" {NO_FIGURE if used is None else f'{used:.0%}':>13} {mid('runs', 0):>6}"
            )


if __name__ == "__main__":
    main()
