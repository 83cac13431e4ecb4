# SPDX-License-Identifier: GPL-3.0-or-later
"""How slurm_info scales: 2,000 nodes and 10,000 jobs on a real Slurm 26.05.

    sudo .venv/bin/python benchmarks/slurm_info_scale.py [--trials 3] [--jobs 10000]

Starts the lab's `scale` cluster (its own chroot: about 1 minute the first time) (Slurm 26.05 with 2,000 extra node records) and the usual
3-node 26.05 cluster, fills the scale cluster with held jobs, then runs slurm_info
(gather nodes, jobs and partitions) against each through a counting proxy on 127.0.0.1 and
prints, per cluster: the module's wall time through ansible-playbook, the wall time and peak
Python memory of the client work alone (fetch, normalise, filter) and the number of HTTP
requests per call. The request count must be the same for 3 and 2,003 nodes. Clusters
this run started are stopped at the end.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import sys
import threading
import time
import tracemalloc
import typing as t
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(REPO / "tests" / "lab"),
    str(REPO / "tests" / "integration"),
    str(REPO / ".build" / "collections"),
    str(REPO / "benchmarks"),
]

from _common import figure, maximum, median  # noqa: E402
from ansible_runner import run_task  # noqa: E402
from slurm_lab import SlurmLab  # noqa: E402

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (  # noqa: E402
    select_nodes,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (  # noqa: E402
    Connection,
    SlurmRestClient,
)


class CountingProxy:
    """Forwards every request to slurmrestd and counts them."""

    def __init__(self, upstream_port: int) -> None:
        self.count = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                proxy.count += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                payload = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                upstream.close()

            do_GET = do_POST = do_DELETE = _forward

            def log_message(self, *args: t.Any) -> None:
                """Quiet."""

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fill_jobs(lab: SlurmLab, wanted: int) -> int:
    """Submit held jobs until the cluster has `wanted` jobs; returns how many it has."""
    have = len(lab.get("jobs")["jobs"])
    missing = max(0, wanted - have)
    if missing:
        print(f"submitting {missing} held jobs to the scale cluster...", flush=True)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(
                pool.map(
                    lambda i: lab.submit_job("true", name=f"bench-{i}", hold=True), range(missing)
                )
            )
        print(f"  {missing} jobs in {time.monotonic() - started:.0f} s", flush=True)
    return len(lab.get("jobs")["jobs"])


def client_run(lab: SlurmLab) -> tuple[float, int]:
    """Wall time and peak traced memory (bytes) of the client's work for one slurm_info call."""
    client = SlurmRestClient(Connection(url=lab.url, jwt_key_path=str(lab.jwt_key_path)))
    tracemalloc.start()
    started = time.perf_counter()
    nodes = select_nodes(client.nodes(), states=["idle"])
    jobs = client.jobs()
    client.partitions()
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert nodes and jobs is not None
    return elapsed, peak


def measure(lab: SlurmLab, trials: int) -> dict[str, t.Any]:
    proxy = CountingProxy(lab.release.rest_port)
    module_times, requests = [], []
    counts = (0, 0)  # no trial, no figure
    try:
        for _trial in range(trials):
            before = proxy.count
            started = time.perf_counter()
            result = run_task(
                "hpcops.slinky.slurm_info",
                {
                    "url": proxy.url,
                    "jwt_key_path": str(lab.jwt_key_path),
                    "gather": ["nodes", "jobs", "partitions"],
                },
            )
            module_times.append(time.perf_counter() - started)
            requests.append(proxy.count - before)
            if result.failed:
                raise SystemExit(f"slurm_info failed: {result.get('msg')}")
        counts = (len(result["nodes"]), len(result["jobs"]))
    finally:
        proxy.close()
    client = [client_run(lab) for _trial in range(trials)]
    return {
        "nodes": counts[0],
        "jobs": counts[1],
        "module_s": median(module_times),
        "client_s": median(run[0] for run in client),
        "client_peak_mb": maximum(run[1] / 2**20 for run in client),
        "requests": sorted(set(requests)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10000)
    args = parser.parse_args()

    small, scale = SlurmLab("26.05"), SlurmLab("scale")
    started = [lab for lab in (small, scale) if not lab.is_healthy()]
    try:
        for lab in (small, scale):
            lab.up()
        fill_jobs(scale, args.jobs)
        rows = [
            ("Slurm 26.05, 3 nodes", measure(small, args.trials)),
            ("Slurm 26.05, scale", measure(scale, args.trials)),
        ]
    finally:
        # Like the test fixtures: stop what this run started, leave the rest up.
        for lab in started:
            lab.down()

    print(f"\nslurm_info (gather nodes, jobs, partitions), median of {args.trials} trials")
    header = f"{'cluster':<22} {'nodes':>6} {'jobs':>6} {'module s':>9} {'client s':>9} {'client MiB':>10} {'HTTP requests':>14}"
    print(header)
    print("-" * len(header))
    for name, row in rows:
        print(
            f"{name:<22} {row['nodes']:>6} {row['jobs']:>6} {figure(row['module_s']):>9}"
            f" {figure(row['client_s']):>9} {figure(row['client_peak_mb'], 1):>10}"
            f" {','.join(map(str, row['requests'])):>14}"
        )
    if rows[0][1]["requests"] != rows[1][1]["requests"]:
        raise SystemExit("the number of HTTP requests grows with the cluster")


if __name__ == "__main__":
    main()
