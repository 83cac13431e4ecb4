# SPDX-License-Identifier: GPL-3.0-or-later
"""The kind cluster as the scenarios' pytest checks see it: kubectl, slurmrestd, jobs.

molecule's verify playbooks run the checks with this folder on PYTHONPATH and say where
things are in the environment: the Slurm namespace, slurmrestd's address as this host
reaches it, and the Secret a Slinky Token of SlurmUser keeps (tasks/verify_token.yml).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
# The inventory the checks run the collection's playbooks with, as a user does.
INVENTORY = REPO / "inventories" / "kind"
NAMESPACE = os.environ.get("HPCOPS_KIND_SLURM_NAMESPACE", "slurm")
SLURMRESTD = os.environ.get("HPCOPS_KIND_SLURMRESTD", "")
TOKEN_SECRET = os.environ.get("HPCOPS_KIND_TOKEN_SECRET", "")
# The JSON report of the last preflight (site.yml runs it first on the node containers).
PREFLIGHT_REPORT = os.environ.get("HPCOPS_KIND_PREFLIGHT_REPORT", "")
# The Slinky release site.yml deployed (the inventory's slinky_version), e.g. "1.2.1".
SLINKY_VERSION = os.environ.get("HPCOPS_KIND_SLINKY_VERSION", "")
API = "v0.0.44"
# The token is SlurmUser's, which may act for any user: the jobs run as alice.
JOB_USER = "alice"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL"}


def slinky_line() -> tuple[int, int]:
    """The deployed Slinky release's (major, minor): its operator's behaviour differs per line."""
    major, minor = SLINKY_VERSION.split(".")[:2]
    return int(major), int(minor)


def configured() -> bool:
    """Whether a verify playbook started these checks (else they are skipped)."""
    return bool(SLURMRESTD and TOKEN_SECRET)


def kubectl(*args: str, input_text: str | None = None) -> str:
    return subprocess.run(
        ["kubectl", *args], capture_output=True, text=True, check=True, input=input_text
    ).stdout


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def token() -> str:
    secret = kubectl_json("get", "secret", "-n", NAMESPACE, TOKEN_SECRET)
    return base64.b64decode(secret["data"]["auth-token"]).decode()


def slurmrestd(
    method: str, path: str, body: dict[str, Any] | None = None, *, plugin: str = "slurm"
) -> dict[str, Any]:
    """A request to slurmctld's API (plugin `slurm`) or slurmdbd's (`slurmdb`)."""
    request = urllib.request.Request(  # noqa: S310 - the scenario's own slurmrestd
        f"{SLURMRESTD}/{plugin}/{API}/{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={
            "X-SLURM-USER-TOKEN": token(),
            "X-SLURM-USER-NAME": JOB_USER,
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            answer: dict[str, Any] = json.load(response)
    except urllib.error.HTTPError as err:  # slurmrestd explains itself in the body
        answer = json.loads(err.read() or b"{}")
        answer.setdefault("errors", [{"error": f"HTTP {err.code}"}])
    return answer


def submit(name: str, script: str, *, partition: str, memory_mib: int = 100, **job: Any) -> int:
    """Submit a one-CPU batch job as JOB_USER; more job fields in `job`."""
    answer = slurmrestd(
        "POST",
        "job/submit",
        {
            "job": {
                "name": name,
                "partition": partition,
                "cpus_per_task": 1,
                "memory_per_node": {"set": True, "number": memory_mib},
                "current_working_directory": "/tmp",
                "environment": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
                "standard_output": "/tmp/hpcops-%j.out",
                "script": script,
                **job,
            }
        },
    )
    assert not answer.get("errors"), answer["errors"]
    return int(answer["job_id"])


def job(job_id: int) -> dict[str, Any]:
    jobs: list[dict[str, Any]] = slurmrestd("GET", f"job/{job_id}")["jobs"]
    return jobs[0]


def wait_for_state(job_id: int, wanted: set[str], timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        record = job(job_id)
        if set(record["job_state"]) & wanted:
            return record
        assert time.monotonic() < deadline, (
            f"job {job_id} still {record['job_state']} after {timeout_s:.0f} s"
        )
        time.sleep(1)


def slurm_nodes() -> dict[str, dict[str, Any]]:
    """Slurm's nodes by name."""
    return {node["name"]: node for node in slurmrestd("GET", "nodes")["nodes"]}


def wait(check: Any, timeout_s: float, what: str) -> Any:
    """check()'s first true value, polled every half second; AssertionError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.5)
