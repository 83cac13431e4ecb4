# SPDX-License-Identifier: GPL-3.0-or-later
"""KEDA scaling the autoscaled pool's NodeSet in kind, step by step, timed.

Shared by the autoscale scenario's checks (molecule/autoscale/tests) and
benchmarks/autoscale_kind.py: both submit jobs to the pool's partition and watch the
ScaledObject, the NodeSet, its slurmd pods and the Slurm nodes they register.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kind_cluster import (
    ENDED,
    INVENTORY,
    NAMESPACE,
    REPO,
    job,
    kubectl,
    kubectl_json,
    slurm_nodes,
    submit,
    wait,
)

CONVERGE = REPO / "molecule" / "shared" / "converge_autoscale.yml"
# KEDA's trigger type on each metric path (keda_metrics_source).
TRIGGER_TYPES = {"prometheus": "prometheus", "slurmctld": "metrics-api"}
# Where the scenario runs the site's Prometheus (molecule/shared/tasks/kind_prometheus.yml).
MONITORING = "monitoring"


def scaled_object() -> dict[str, Any]:
    """The one ScaledObject site.yml made for the kind site's autoscaled pool."""
    found: list[dict[str, Any]] = kubectl_json("get", "scaledobjects", "-n", NAMESPACE)["items"]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def metric_path() -> str:
    """Which of the two paths the ScaledObject reads (by its triggers' type)."""
    types = {trigger["type"] for trigger in scaled_object()["spec"]["triggers"]}
    (path,) = [name for name, kind in TRIGGER_TYPES.items() if kind in types]
    return path


def nodeset_name() -> str:
    name: str = scaled_object()["spec"]["scaleTargetRef"]["name"]
    return name


def replicas(nodeset: str) -> int:
    spec = kubectl_json("get", "nodesets.slinky.slurm.net", "-n", NAMESPACE, nodeset)["spec"]
    return int(spec.get("replicas") or 0)


def pods(nodeset: str) -> list[dict[str, Any]]:
    """The NodeSet's slurmd pods, whatever their phase."""
    found: list[dict[str, Any]] = kubectl_json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=slurmd"
    )["items"]
    return [
        pod
        for pod in found
        if any(owner["name"] == nodeset for owner in pod["metadata"].get("ownerReferences", []))
    ]


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def job_states(job_id: int) -> set[str]:
    return set(job(job_id)["job_state"])


def switch_metric_path(path: str) -> float:
    """site.yml (the scenario's converge) with keda_metrics_source=path, as a site switches
    paths; the seconds it took."""
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(INVENTORY),
            str(CONVERGE),
            "-e",
            f"keda_metrics_source={path}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, "\n".join(proc.stdout.splitlines()[-40:]) + proc.stderr
    return time.monotonic() - started


def keda_timing() -> dict[str, int]:
    spec = scaled_object()["spec"]
    return {"polling_s": int(spec["pollingInterval"]), "cooldown_s": int(spec["cooldownPeriod"])}


def prometheus_has(series: str) -> bool:
    """Whether the site's Prometheus has scraped `series` (a PromQL selector) yet."""
    query = urllib.parse.quote(series)
    answer = json.loads(
        kubectl(
            "get",
            "--raw",
            f"/api/v1/namespaces/{MONITORING}/services/prometheus-operated:web/proxy"
            f"/api/v1/query?query={query}",
        )
    )
    return bool(answer["data"]["result"])


def wait_for_scrapes(partition: str, timeout_s: float = 300) -> float:
    """Until Prometheus has the partition's pending jobs; seconds waited. A ServiceMonitor
    just made reaches the scrape configuration only after the operator rewrote it and the
    config reloader reloaded Prometheus: a minute or more (measured: up to 150 s)."""
    started = time.monotonic()
    selector = f'slurm_partition_jobs_pending{{partition="{partition}"}}'
    wait(lambda: prometheus_has(selector), timeout_s, f"Prometheus scraping {selector}")
    return time.monotonic() - started


def wait_at_zero(nodeset: str, timeout_s: float = 300) -> None:
    """Until the NodeSet asks for no replica and none of its pods is left."""
    wait(lambda: replicas(nodeset) == 0 and not pods(nodeset), timeout_s, f"{nodeset} at zero")


@dataclass
class Loop:
    """One trip: jobs submitted at zero, the NodeSet out, the jobs run, back to zero."""

    nodeset: str
    seconds: dict[str, float] = field(default_factory=dict)
    jobs: list[int] = field(default_factory=list)
    started: float = 0.0

    def mark(self, name: str) -> None:
        self.seconds[name] = round(time.monotonic() - self.started, 1)

    def submit(self, partition: str, runtimes_s: list[int]) -> None:
        wait_at_zero(self.nodeset)
        self.started = time.monotonic()
        for index, runtime in enumerate(runtimes_s):
            script = f"#!/bin/sh\nsleep {runtime}\n"
            self.jobs.append(submit(f"autoscale-{index}", script, partition=partition))

    def wait_scaled_out(self, timeout_s: float = 180) -> None:
        wait(lambda: replicas(self.nodeset) >= 1, timeout_s, f"{self.nodeset} scaled out")
        self.mark("scaled_out")

    def wait_first_running(self, timeout_s: float = 300) -> None:
        def running() -> bool:
            return any("RUNNING" in job_states(j) or job_states(j) & ENDED for j in self.jobs)

        wait(running, timeout_s, "a job of the autoscaled partition running")
        self.mark("first_job_running")

    def wait_done(self, job_ids: list[int], timeout_s: float = 300) -> None:
        wait(lambda: all(job_states(j) & ENDED for j in job_ids), timeout_s, f"jobs {job_ids}")
        for job_id in job_ids:
            assert "COMPLETED" in job_states(job_id), (job_id, job(job_id)["job_state"])

    def wait_at_zero(self, timeout_s: float = 300) -> None:
        wait_at_zero(self.nodeset, timeout_s)
        self.mark("back_at_zero")


def slurm_node_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    hostname = pod["spec"].get("hostname") or pod["metadata"]["name"]
    return slurm_nodes().get(hostname)
