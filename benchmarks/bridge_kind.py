# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A pod to Running through slurm-bridge, beside the handover, on the same kind workers.

    HPCOPS_KIND_IMAGES=local molecule converge -s default   # kind, site.yml with the bridge
    .venv/bin/python benchmarks/bridge_kind.py [--trials 5] [--pending 100,1000] [--handover]
    HPCOPS_KIND_IMAGES=local molecule destroy -s default

Runs on the default scenario's kind cluster, where slurm-bridge schedules the pods of
namespace `bridge` on its node (partition slurm-bridge, account kubernetes). Cases:

* idle: a pod created while the bridge's node is free: seconds until it runs (the bridge
  submits an external job, Slurm allocates the node, the scheduler binds the pod).
* busy: a batch job of --job-s seconds holds the node (the bridge's jobs take whole nodes by
  default); a pod created meanwhile waits in Slurm's queue: seconds from the batch job's end
  to the pod running. Nothing is killed or requeued: Slurm orders the two (a site that wants
  the pod first gives it the priority, or lets Slurm preempt).
* reads: the bridge's reads of Slurm's job list while a pod it cannot place is pending, with
  N held batch jobs in the queue (--pending): slurmctld's REQUEST_JOB_INFO RPCs per minute
  (sdiag, after a reset) beside the same minute with no pending pod, and the average RPC
  time. Every read is a whole /jobs listing: its cost grows with the queue.
* --handover: benchmarks/handover_kind.py on the same cluster (the protocol's idle and busy
  reclaims and the seeds' PriorityClass recipe), its table printed after this one.

Nodes idle meanwhile: the bridge holds the node only while its job runs (no lending, no
reclaim); the table says how long the node stood idle with a pod waiting (none: the pod waits
only on the batch job).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import attempt, summary, table  # noqa: E402
from _kind import KIND_DIR, NAMESPACE, ask_token, drop_token, kubectl, slurmrestd_url  # noqa: E402

BRIDGE_NAMESPACE = "bridge"
PARTITION = "slurm-bridge"
BENCH = "bench-bridge"  # the Token, its Secret, the pods' and jobs' names
IMAGE = "hpcops.local/library/busybox:1.38"


def wait(
    predicate: t.Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.1
) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(poll_s)
    return time.monotonic() - started


def job_state(kind: types.ModuleType, job_id: int) -> str:
    jobs = kind.slurmrestd("GET", f"job/{job_id}").get("jobs") or []
    return str(jobs[0]["job_state"][0]) if jobs else "GONE"


def cancel(kind: types.ModuleType, job_ids: t.Iterable[int]) -> None:
    for job_id in job_ids:
        kind.slurmrestd("DELETE", f"job/{job_id}")


def sdiag_job_info(kind: types.ModuleType) -> tuple[int, float]:
    """slurmctld's REQUEST_JOB_INFO RPCs since its last reset: count, average µs."""
    for rpc in kind.slurmrestd("GET", "diag")["statistics"].get("rpcs_by_message_type") or []:
        if rpc.get("message_type") == "REQUEST_JOB_INFO":
            average = rpc.get("average_time") or 0
            if isinstance(average, dict):  # a "no value" struct from v0.0.40 on
                average = average.get("number") or 0
            return int(rpc["count"]), float(average)
    return 0, 0.0


def reset_sdiag() -> None:
    kubectl("exec", "-n", NAMESPACE, "slurm-controller-0", "-c", "slurmctld", "--",
            "sdiag", "--reset")  # fmt: skip


def pod_manifest(name: str, cpu: str = "100m") -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": BRIDGE_NAMESPACE},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "3600"],
                                 "resources": {"requests": {"cpu": cpu, "memory": "32Mi"},
                                               "limits": {"memory": "64Mi"}}}]},
    })  # fmt: skip


def pod_phase(name: str) -> str:
    return kubectl("get", "pod", "-n", BRIDGE_NAMESPACE, name, "-o",
                   "jsonpath={.status.phase}", check=False)  # fmt: skip


def delete_pod(name: str) -> None:
    kubectl("delete", "pod", "-n", BRIDGE_NAMESPACE, name, "--ignore-not-found",
            "--grace-period=0", "--force", "--wait=true")  # fmt: skip


def node_free(kind: types.ModuleType) -> bool:
    return not any(
        job["partition"] == PARTITION and set(job["job_state"]) & {"RUNNING", "COMPLETING"}
        for job in kind.slurmrestd("GET", "jobs")["jobs"]
    )


def idle_trial(kind: types.ModuleType, index: int) -> float:
    name = f"{BENCH}-idle-{index}"
    wait(lambda: node_free(kind), 120, "the bridge's node free", 0.5)
    started = time.monotonic()
    kubectl("apply", "-f", "-", stdin=pod_manifest(name))
    wait(lambda: pod_phase(name) == "Running", 120, f"pod {name} running")
    took = time.monotonic() - started
    delete_pod(name)
    print(f"  idle trial {index}: {took:.2f} s", flush=True)
    return took


def busy_trial(kind: types.ModuleType, index: int, job_s: int) -> float:
    name = f"{BENCH}-busy-{index}"
    wait(lambda: node_free(kind), 120, "the bridge's node free", 0.5)
    job = kind.submit(f"{BENCH}-hold-{index}", f"#!/bin/sh\nsleep {job_s}\n", partition=PARTITION)
    wait(lambda: job_state(kind, job) == "RUNNING", 60, f"batch job {job} running", 0.5)
    kubectl("apply", "-f", "-", stdin=pod_manifest(name))
    wait(lambda: job_state(kind, job) not in ("RUNNING", "PENDING"), job_s + 60,
         f"batch job {job} ended", 0.1)  # fmt: skip
    ended = time.monotonic()
    wait(lambda: pod_phase(name) == "Running", 120, f"pod {name} running")
    took = time.monotonic() - ended
    delete_pod(name)
    print(f"  busy trial {index}: {took:.2f} s after the batch job's end", flush=True)
    return took


def reads_case(kind: types.ModuleType, pending: int, window_s: int) -> tuple[float, float, float]:
    """REQUEST_JOB_INFO per minute with no waiting pod and with one; average µs with it."""
    held = [kind.submit(f"{BENCH}-queue", "#!/bin/sh\nsleep 60\n", partition="batch", hold=True)
            for _index in range(pending)]  # fmt: skip
    try:
        reset_sdiag()
        time.sleep(window_s)
        quiet = sdiag_job_info(kind)[0]
        name = f"{BENCH}-unplaceable"
        # More CPUs than the node has: Slurm never allocates it, the scheduler retries.
        kubectl("apply", "-f", "-", stdin=pod_manifest(name, cpu="64"))
        try:
            reset_sdiag()
            time.sleep(window_s)
            busy, average_us = sdiag_job_info(kind)
        finally:
            delete_pod(name)
    finally:
        cancel(kind, held)
    per_minute = 60 / window_s
    print(f"  {pending} pending: {quiet * per_minute:.0f}/min quiet, "
          f"{busy * per_minute:.0f}/min with a waiting pod, {average_us:.0f} µs each", flush=True)  # fmt: skip
    return quiet * per_minute, busy * per_minute, average_us


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--job-s", type=int, default=10, help="the batch job of the busy case")
    parser.add_argument("--pending", default="0,100,1000", help="queue lengths of the reads case")
    parser.add_argument("--window-s", type=int, default=60, help="each reads measurement")
    parser.add_argument("--handover", action="store_true", help="run handover_kind.py after")
    args = parser.parse_args()
    if not (KIND_DIR / "kubeconfig").exists():
        print("no kind cluster: run `molecule converge -s default` first", file=sys.stderr)
        return 2
    if not kubectl("get", "deploy", "-n", NAMESPACE, "slurm-bridge-scheduler",
                   "--ignore-not-found", "-o", "name"):  # fmt: skip
        print("slurm-bridge is not deployed (its release sources were not here)", file=sys.stderr)
        return 2
    os.environ.update(
        HPCOPS_KIND_SLURMRESTD=slurmrestd_url(),
        HPCOPS_KIND_TOKEN_SECRET=ask_token(BENCH),
        HPCOPS_KIND_SLURM_NAMESPACE=NAMESPACE,
        KUBECONFIG=str(KIND_DIR / "kubeconfig"),
        PATH=f"{KIND_DIR / 'bin'}:{os.environ['PATH']}",
    )
    sys.path.insert(0, str(REPO / "molecule/shared/tests"))
    import kind_cluster as kind  # noqa: PLC0415 - reads the environment set above

    failed: dict[str, str] = {}
    try:
        idle = attempt("idle", lambda: [idle_trial(kind, i) for i in range(args.trials)], failed)
        busy = attempt(
            "busy", lambda: [busy_trial(kind, i, args.job_s) for i in range(args.trials)], failed
        )
        reads = {
            n: attempt(f"reads {n}", lambda n=n: [reads_case(kind, n, args.window_s)], failed)
            for n in (int(x) for x in args.pending.split(",") if x)
        }
    finally:
        cancel(
            kind,
            [
                j["job_id"]
                for j in kind.slurmrestd("GET", "jobs")["jobs"]
                if str(j["name"]).startswith(BENCH) and set(j["job_state"]) & {"PENDING", "RUNNING"}
            ],
        )
        kubectl("delete", "pod", "-n", BRIDGE_NAMESPACE, "--all", "--ignore-not-found")
        drop_token(BENCH)
    print(f"\npod to Running through slurm-bridge, seconds over {args.trials} trials")
    rows = [("case", "p50", "p95", "max", "jobs killed or requeued", "note")]
    rows.append(("idle node", *summary(idle), "0", failed.get("idle", "from the pod's creation")))
    rows.append(("busy node", *summary(busy), "0",
                 failed.get("busy", f"from the end of a {args.job_s} s batch job")))  # fmt: skip
    table(rows)
    print(f"\nslurmctld's REQUEST_JOB_INFO (a whole /jobs read), per minute over {args.window_s} s")
    read_rows = [("held jobs", "quiet", "a pod waiting", "µs each", "note")]
    for pending, result in reads.items():
        if result:
            quiet, waiting, average_us = result[0]
            cells = (f"{quiet:.0f}", f"{waiting:.0f}", f"{average_us:.0f}", "")
        else:
            cells = ("-", "-", "-", failed.get(f"reads {pending}", ""))
        read_rows.append((str(pending), *cells))
    table(read_rows)
    if args.handover:
        print("\nbenchmarks/handover_kind.py on the same cluster:", flush=True)
        subprocess.run([sys.executable, str(REPO / "benchmarks/handover_kind.py"),
                        "--trials", str(args.trials)], check=False)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
