# SPDX-License-Identifier: GPL-3.0-or-later
"""Accounting faults on real kubelets: the database down, and a wrong database password.

site.yml pointing slurmdbd at a database that does not answer (a Service with no server
behind it): the run stops saying the database does not answer and how to fix it. site.yml
with a password Secret that is not the database user's: the operator rolls slurmdbd,
slurmdbd cannot log in, and the run stops naming the Secret and the fix. Meanwhile
slurmctld keeps the cluster: a job submitted while slurmdbd is away runs and ends, and once
site.yml runs again with the right Secret slurmdbd comes back and records it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kind_cluster import (
    INVENTORY,
    NAMESPACE,
    REPO,
    configured,
    kubectl,
    kubectl_json,
    slurmrestd,
    submit,
    wait,
    wait_for_state,
)

PARTITION = "batch"
WRONG_SECRET = "molecule-wrong-db-password"
# A database Service with no server behind it: connections to it are refused.
DOWN_DATABASE = "molecule-db-down"
# How long each faulty run waits for slurmdbd before it reads the log: the operator's new
# slurmdbd pod starts and logs its first refused connection within seconds in kind.
FAULT_WAIT_S = 60

pytestmark = pytest.mark.skipif(
    not configured(), reason="run by molecule verify (molecule/shared/verify_kind.yml)"
)


def site(tmp_path: Path, **extra: Any) -> subprocess.CompletedProcess[str]:
    """site.yml for the Slurm cluster alone, as a user reruns it after a change."""
    extra_file = tmp_path / f"extra-{len(list(tmp_path.iterdir()))}.json"
    extra_file.write_text(json.dumps({"slinky_components": ["slurm_cluster"], **extra}))
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(INVENTORY),
         "--limit", "slinky_controller", str(REPO / "playbooks" / "site.yml"),
         "-e", f"@{extra_file}"],
        capture_output=True, text=True, timeout=900, check=False,
        env=dict(os.environ, ANSIBLE_NOCOLOR="true"),
    )  # fmt: skip


def slurmdbd_ready() -> bool:
    pods = kubectl_json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=slurmdbd")
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for pod in pods["items"]
        for c in pod["status"].get("conditions") or []
    )


def test_a_database_down_or_a_wrong_password_is_named_and_no_job_is_lost(
    tmp_path: Path,
) -> None:
    wrong = base64.b64encode(b"not-the-database-password").decode()
    kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": WRONG_SECRET, "namespace": NAMESPACE},
        "data": {"password": wrong},
    }))  # fmt: skip
    kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": DOWN_DATABASE, "namespace": NAMESPACE},
        "spec": {"selector": {"app": DOWN_DATABASE}, "ports": [{"port": 3306}]},
    }))  # fmt: skip
    try:
        down = site(
            tmp_path,
            slurm_cluster_accounting_database={"host": DOWN_DATABASE},
            slurm_cluster_wait_timeout_s=FAULT_WAIT_S,
        )
        out = down.stdout + down.stderr
        assert down.returncode != 0, out[-3000:]
        assert f"The database at {DOWN_DATABASE}:3306 does not answer slurmdbd" in out, out[-3000:]
        assert not slurmdbd_ready()
        broken = site(
            tmp_path,
            slurm_cluster_accounting_database={"password_secret": {"name": WRONG_SECRET}},
            slurm_cluster_wait_timeout_s=FAULT_WAIT_S,
        )
        out = broken.stdout + broken.stderr  # ansible-core 2.19 writes errors to stderr
        assert broken.returncode != 0, out[-3000:]
        assert "The database refuses slurmdbd's login" in out and WRONG_SECRET in out, out[-3000:]
        assert "not-the-database-password" not in out, "the password in the output"
        assert not slurmdbd_ready()
        # slurmctld runs on without slurmdbd: a job submitted now runs and ends.
        job_id = submit("hpcops-dbd-away", "#!/bin/sh\nsleep 2\n", partition=PARTITION)
        assert "COMPLETED" in wait_for_state(job_id, {"COMPLETED", "FAILED"}, 120)["job_state"]
    finally:
        fixed = site(tmp_path)
        kubectl("delete", "secret", "-n", NAMESPACE, WRONG_SECRET, "--ignore-not-found")
        kubectl("delete", "service", "-n", NAMESPACE, DOWN_DATABASE, "--ignore-not-found")
    assert fixed.returncode == 0, (fixed.stdout + fixed.stderr)[-3000:]
    assert slurmdbd_ready()

    # slurmctld hands slurmdbd what it kept: the job's record arrives.
    def recorded() -> list[dict[str, Any]]:
        return slurmrestd("GET", f"job/{job_id}", plugin="slurmdb").get("jobs") or []

    (record,) = wait(recorded, 120, f"slurmdbd to record job {job_id}")
    assert record["state"]["current"] == ["COMPLETED"], record["state"]
