# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""KEDA scaling a NodeSet on Slurm's queue, on real kubelets: seconds per step, both paths.

    HPCOPS_KIND_IMAGES=local molecule converge -s autoscale   # kind, monitoring, site.yml
    HPCOPS_KIND_IMAGES=local .venv/bin/python benchmarks/autoscale_kind.py [--trials 3]
    molecule destroy -s autoscale

Runs on the kind cluster of the autoscale scenario: the Slurm pool `hpc` is a StatefulSet
NodeSet that KEDA scales between zero and one replica on the pending jobs of partition
`batch`. Each trial starts at zero, submits one short job and measures, from the submission:
the NodeSet scaled out (its replicas set by KEDA's HPA), the job running (slurmd pod started
and registered); then, from the job's end (the queue empty): the NodeSet's replicas back at
zero, and its slurmd pod gone. Each metric path (keda_metrics_source) is set with site.yml,
as a site sets it: prometheus (slurmctld → ServiceMonitor → Prometheus → KEDA) and slurmctld
(KEDA's metrics-api trigger on slurmctld's /metrics/partitions). KEDA's polling interval and
cooldown, and the Prometheus scrape interval, are printed beside the figures: they bound them.
The script leaves the site on the path it found, at zero replicas.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import figure, maximum, median  # noqa: E402
from _kind import KIND_DIR, NAMESPACE, ask_token, drop_token, kubectl, slurmrestd_url  # noqa: E402

BENCH_OBJECTS = "bench-autoscale"  # the Slinky Token and its Secret
PARTITION = "batch"
JOB_S = 5
STEPS = ("scaled_out", "job_running", "zero_replicas", "pod_gone")


def trial(autoscale: types.ModuleType, path: str) -> dict[str, float]:
    """One trip from zero and back; seconds of each step."""
    loop = autoscale.Loop(autoscale.nodeset_name())
    loop.submit(PARTITION, [JOB_S])
    loop.wait_scaled_out()
    loop.wait_first_running()
    loop.wait_done(loop.jobs)
    ended = time.monotonic()
    autoscale.wait(lambda: autoscale.replicas(loop.nodeset) == 0, 300, "replicas back at zero")
    zero = time.monotonic() - ended
    autoscale.wait_at_zero(loop.nodeset)
    gone = time.monotonic() - ended
    figures = {
        "scaled_out": loop.seconds["scaled_out"],
        "job_running": loop.seconds["first_job_running"],
        "zero_replicas": round(zero, 1),
        "pod_gone": round(gone, 1),
    }
    print(f"  {path} trial: {figures}", flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--paths", default="prometheus,slurmctld")
    args = parser.parse_args()
    if "HPCOPS_KIND_IMAGES" not in os.environ:
        # Switching paths runs site.yml on inventories/kind, which must find the same charts.
        print("set HPCOPS_KIND_IMAGES as for `molecule converge`", file=sys.stderr)
        return 2
    if not (KIND_DIR / "kubeconfig").exists():
        print("no kind cluster: run `molecule converge -s autoscale` first", file=sys.stderr)
        return 2
    os.environ["KUBECONFIG"] = str(KIND_DIR / "kubeconfig")
    os.environ["PATH"] = f"{KIND_DIR / 'bin'}:{os.environ['PATH']}"
    os.environ.update(
        HPCOPS_KIND_SLURMRESTD=slurmrestd_url(),
        HPCOPS_KIND_TOKEN_SECRET=f"{BENCH_OBJECTS}-token",
        HPCOPS_KIND_SLURM_NAMESPACE=NAMESPACE,
    )
    sys.path.insert(0, str(REPO / "molecule/shared/tests"))
    import kind_autoscale as autoscale  # noqa: PLC0415 - reads the environment set above

    ask_token(BENCH_OBJECTS)
    found = autoscale.metric_path()
    results: dict[str, list[dict[str, float]]] = {}
    timing: dict[str, dict[str, int]] = {}
    scrape = ""
    try:
        for path in args.paths.split(","):
            if autoscale.metric_path() != path:
                took = autoscale.switch_metric_path(path)
                print(f"site.yml with keda_metrics_source={path}: {took:.0f} s", flush=True)
            timing[path] = autoscale.keda_timing()
            if path == "prometheus":  # the slurmctld path has no ServiceMonitor
                # Timed from when Prometheus has the figures, not from its configuration's reload.
                waited = autoscale.wait_for_scrapes(PARTITION)
                print(f"Prometheus scraping the partition after {waited:.0f} s", flush=True)
                scrape = kubectl("get", "servicemonitor", "-n", NAMESPACE, "-o",
                                 "jsonpath={.items[0].spec.endpoints[0].interval}")  # fmt: skip
            results[path] = [trial(autoscale, path) for _trial in range(args.trials)]
    finally:
        if autoscale.metric_path() != found:
            autoscale.switch_metric_path(found)
        drop_token(BENCH_OBJECTS)
    print(f"\nmedian (max) seconds over {args.trials} trials; a {JOB_S} s job at zero replicas")
    print(f"{'path':<11}" + "".join(f"{step:>18}" for step in STEPS) + "   KEDA")
    for path, figures in results.items():
        cells = [
            f"{figure(median(f[step] for f in figures), 1)}"
            f" ({figure(maximum(f[step] for f in figures), 1)})"
            for step in STEPS
        ]
        keda = f"polling {timing[path]['polling_s']} s, cooldown {timing[path]['cooldown_s']} s"
        if path == "prometheus":
            keda += f", scrape {scrape}"
        print(f"{path:<11}" + "".join(f"{cell:>18}" for cell in cells) + f"   {keda}")
    print("scaled_out, job_running: from submission; zero_replicas, pod_gone: from the job's end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
