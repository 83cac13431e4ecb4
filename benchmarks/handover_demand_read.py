# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What reading Slurm's demand costs: 2,000 nodes and 10,000 pending jobs on a real Slurm 26.05.

    sudo .venv/bin/python benchmarks/handover_demand_read.py [--trials 3] [--jobs 10000]

Starts the lab's `scale` cluster (Slurm 26.05 with 2,000 extra node records; about a minute
the first time), fills it with held jobs, and times each read through a counting proxy on
127.0.0.1, each in a fresh Python process so that its peak memory is its own:

* `queue`: the event source's first poll, `QueuePoll` (every job is pending in the
  partition read, the worst case: all 10,000 are kept as demand);
* `queue unchanged`: the source's next poll (`QueuePoll`) when no job changed since: it asks
  with `update_time` and slurmctld sends no job;
* `plan`: the plan's Slurm reads (`read_slurm_jobs`: running jobs and the queue; the nodes);
* `slurm_info query`: slurm_info's client work with a JMESPath query keeping two fields of
  each pending job;
* `all jobs`: every job normalised and kept, as slurm_info without a query returns them;
* `whole`: `all jobs` decoded at once, as the client read before the streamed read.

It prints per read: HTTP requests, median seconds, the process's peak resident memory above
what it had before the read (MiB), and the peak of Python's own
allocations (tracemalloc). The cluster is stopped at the end if this run started it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tracemalloc
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "lab"), str(REPO / "benchmarks")]

from _common import NO_FIGURE, figure, maximum, median  # noqa: E402

READS = ("queue", "queue unchanged", "plan", "slurm_info query", "all jobs", "whole")
PARTITION = "batch"  # where the scale cluster's held jobs wait


def peak_rss_kib() -> int:
    """This process's peak resident memory (VmHWM: its own, where ru_maxrss would carry
    the peak of the process that started it across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise SystemExit("no VmHWM in /proc/self/status")


def child(read: str, url: str, key_path: str) -> None:
    """One read in this process; prints its figures as JSON."""
    sys.path.insert(0, str(REPO / ".build" / "collections"))
    from ansible_collections.hpcops.slinky.plugins.module_utils._handover import (  # noqa: PLC0415
        reads,
    )
    from ansible_collections.hpcops.slinky.plugins.module_utils._slurm import (  # noqa: PLC0415
        query,
        rest,
    )

    client = rest.SlurmRestClient(rest.Connection(url=url, jwt_key_path=key_path))
    client.api_version  # noqa: B018 (the version request, before the measure)
    pick = query.item_query("state == 'PENDING' && {id: job_id, partition: partition}", "query")
    before = peak_rss_kib()
    tracemalloc.start()
    started = time.perf_counter()
    if read == "queue unchanged":
        poll = reads.QueuePoll([PARTITION])
        poll.read(client)  # the first read, in full, before the measure
        tracemalloc.stop()
        before = peak_rss_kib()
        tracemalloc.start()
        started = time.perf_counter()
        kept = len(poll.read(client).jobs)
    elif read == "queue":
        kept = len(reads.QueuePoll([PARTITION]).read(client).jobs)
    elif read == "plan":
        # read_slurm_jobs finds the lendable partitions by the NodeSets' keys, which this
        # cluster has none of: its own reads, with the partition named.
        _running, queue = reads.running_jobs_and_queue(client, client.partitions(), {PARTITION})
        client.nodes()
        kept = len(queue.jobs)
    elif read == "slurm_info query":
        kept = len(client.jobs(pick))
    elif read == "all jobs":
        kept = len(client.jobs())
    else:  # the body decoded at once, then normalised
        body = client.request("GET", f"/slurm/{client.api_version}/jobs/")
        kept = len([rest.normalize_job(job) for job in body["jobs"]])
    elapsed = time.perf_counter() - started
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    peak = peak_rss_kib()
    figures = {
        "s": elapsed,
        "rss_mib": (peak - before) / 1024,
        "process_mib": peak / 1024,
        "traced_mib": traced / 2**20,
        "kept": kept,
    }
    print(json.dumps(figures))


def measure(read: str, url: str, key_path: str, proxy: object, trials: int) -> dict[str, t.Any]:
    runs, requests = [], set()
    for _trial in range(trials):
        before = proxy.count  # type: ignore[attr-defined]
        out = subprocess.run(
            [sys.executable, __file__, "--child", read, url, key_path],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        # The version request and the read's own.
        requests.add(proxy.count - before)  # type: ignore[attr-defined]
    return {
        "requests": sorted(requests),
        "s": median(r["s"] for r in runs),
        "rss_mib": maximum(r["rss_mib"] for r in runs),
        "process_mib": maximum(r["process_mib"] for r in runs),
        "traced_mib": maximum(r["traced_mib"] for r in runs),
        "kept": runs[-1]["kept"] if runs else NO_FIGURE,
    }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10000)
    args = parser.parse_args()

    from slurm_info_scale import CountingProxy, fill_jobs  # noqa: PLC0415
    from slurm_lab import SlurmLab  # noqa: PLC0415

    scale = SlurmLab("scale")
    started = not scale.is_healthy()
    rows = []
    try:
        scale.up()
        jobs = fill_jobs(scale, args.jobs)
        nodes = len(scale.get("nodes")["nodes"])
        proxy = CountingProxy(scale.release.rest_port)
        try:
            for read in READS:
                rows.append(
                    (read, measure(read, proxy.url, str(scale.jwt_key_path), proxy, args.trials))
                )
        finally:
            proxy.close()
    finally:
        if started:
            scale.down()

    print(f"\nSlurm's demand read: {nodes} nodes, {jobs} jobs, median of {args.trials} trials")
    header = (
        f"{'read':<18} {'requests':>9} {'seconds':>8} {'RSS growth MiB':>15}"
        f" {'process MiB':>12} {'Python MiB':>11} {'kept':>6}"
    )
    print(header)
    print("-" * len(header))
    for read, row in rows:
        print(
            f"{read:<18} {','.join(map(str, row['requests'])) or NO_FIGURE:>9}"
            f" {figure(row['s']):>8} {figure(row['rss_mib'], 1):>15}"
            f" {figure(row['process_mib'], 1):>12} {figure(row['traced_mib'], 1):>11}"
            f" {row['kept']:>6}"
        )
    print(
        "requests: all of the read's process, with the API version request (1) and, for"
        " 'queue unchanged', the full read before it; RSS growth: the process's peak above"
        " what it had before the read; process: its whole peak, Python and the collection"
        " imported"
    )


if __name__ == "__main__":
    main()
