# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slurm lab itself: real slurmctld, slurmd and slurmrestd per release, driven over REST."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_lab import (
    JOB_DIR,
    STATIC_NODES,
    SlurmLab,
    lab_jwt,
    lab_links,
    lab_netns,
    ping_responding,
)
from toolbox import mounts_under, pids_in_chroot, wait_until

pytestmark = pytest.mark.integration

LAB_CLI = Path(__file__).resolve().parents[2] / "lab" / "slurm_lab.py"


def job_in_state(lab: SlurmLab, job_id: int, state: str) -> dict[str, Any] | None:
    job = lab.job(job_id)
    return job if state in job["job_state"] else None


def cancel(lab: SlurmLab, job_id: int) -> None:
    status, body = lab.request("DELETE", f"/slurm/{lab.latest_api()}/job/{job_id}")
    assert status == 200, body


def process_names(root: Path) -> list[str]:
    names = []
    for pid in pids_in_chroot(root):
        with contextlib.suppress(OSError):  # exited meanwhile
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
    return names


def test_minted_token_pings_every_api_version(slurm_lab: SlurmLab) -> None:
    cli = subprocess.run(
        [
            sys.executable,
            str(LAB_CLI),
            "token",
            "--release",
            slurm_lab.release.name,
            "--user",
            "root",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    token = cli.stdout.strip()
    for version in slurm_lab.api_versions():
        status, body = slurm_lab.request("GET", f"/slurm/{version}/ping", token=token)
        assert status == 200, body
        assert ping_responding(body["pings"][0])
        assert body["meta"]["slurm"]["cluster"] == slurm_lab.release.cluster


def test_requests_without_a_valid_token_are_refused(slurm_lab: SlurmLab) -> None:
    api = slurm_lab.latest_api()
    status, body = slurm_lab.request("GET", f"/slurm/{api}/nodes", auth=False)
    assert status == 401
    assert body == "Authentication failure"

    # slurmrestd only forwards the token; slurmctld rejects it, which REST reports as 511.
    wrong = lab_jwt(b"not the lab key, 32 bytes long!!", "root")
    status, body = slurm_lab.request("GET", f"/slurm/{api}/nodes", token=wrong)
    assert status == 511
    assert body["errors"][0]["error"] == "Protocol authentication error"
    status, body = slurm_lab.request("GET", f"/slurm/{api}/ping", token=wrong)
    assert status == 200
    assert body["pings"][0]["responding"] is False


def test_api_versions_offered(slurm_lab: SlurmLab) -> None:
    assert slurm_lab.api_versions() == list(slurm_lab.release.api_versions)


def test_static_nodes_are_idle(slurm_lab: SlurmLab) -> None:
    states = slurm_lab.node_states()
    assert {name: states.get(name) for name in STATIC_NODES} == {
        name: ["IDLE"] for name in STATIC_NODES
    }
    node = slurm_lab.node("cpu01")
    assert 0 < node["real_memory"] <= 4096
    assert sorted(node["partitions"]) == ["backfill", "batch"]


def test_partitions_batch_and_backfill(slurm_lab: SlurmLab) -> None:
    status, body = slurm_lab.request("GET", f"/slurm/{slurm_lab.latest_api()}/partitions")
    assert status == 200, body
    partitions = {p["name"]: p for p in body["partitions"]}
    assert partitions["batch"]["priority"]["tier"] == 10
    assert partitions["backfill"]["priority"]["tier"] == 1
    assert partitions["backfill"]["maximums"]["time"]["number"] == 240
    assert partitions["backfill"]["grace_time"] == 30
    # REST does not expose PreemptMode or Default; scontrol does.
    batch = slurm_lab.run(["scontrol", "show", "partition", "batch"], check=True).stdout
    backfill = slurm_lab.run(["scontrol", "show", "partition", "backfill"], check=True).stdout
    assert "Default=YES" in batch and "PreemptMode=OFF" in batch
    assert "PreemptMode=REQUEUE" in backfill


def test_submitted_job_runs_and_completes(slurm_lab: SlurmLab) -> None:
    job_id = slurm_lab.submit_job(
        f"hostname > {JOB_DIR}/hpcops-lab-$SLURM_JOB_ID.out", requeue=True
    )
    job = wait_until(
        lambda: job_in_state(slurm_lab, job_id, "COMPLETED"), 60, f"job {job_id} to complete"
    )
    assert job["user_name"] == "alice"
    assert job["nodes"] in STATIC_NODES
    assert job["exit_code"]["status"] == ["SUCCESS"]
    output = slurm_lab.run(["cat", f"{JOB_DIR}/hpcops-lab-{job_id}.out"], check=True).stdout
    assert output.strip() == job["nodes"]


def test_drain_and_resume_over_rest(slurm_lab: SlurmLab) -> None:
    api = slurm_lab.latest_api()
    status, body = slurm_lab.request(
        "POST", f"/slurm/{api}/node/cpu03", {"state": ["DRAIN"], "reason": "hpcops: test"}
    )
    assert status == 200, body
    node = slurm_lab.node("cpu03")
    assert "DRAIN" in node["state"]
    assert node["reason"] == "hpcops: test"

    status, body = slurm_lab.request("POST", f"/slurm/{api}/node/cpu03", {"state": ["RESUME"]})
    assert status == 200, body
    # RESUME first shows IDLE+NOT_RESPONDING until slurmd registers again.
    wait_until(lambda: slurm_lab.node("cpu03")["state"] == ["IDLE"], 30, "cpu03 to be IDLE again")


def test_job_with_mcs_label_labels_job_and_node(slurm_lab: SlurmLab) -> None:
    job_id = slurm_lab.submit_job("sleep 120", user="bob", mcs_label="tenantA", requeue=True)
    try:
        job = wait_until(
            lambda: job_in_state(slurm_lab, job_id, "RUNNING"), 30, f"job {job_id} to run"
        )
        assert job["mcs_label"] == "tenantA"
        assert slurm_lab.node(job["nodes"])["mcs_label"] == "tenantA"
    finally:
        cancel(slurm_lab, job_id)


def test_dynamic_node_joins_and_leaves(slurm_lab: SlurmLab) -> None:
    if not slurm_lab.release.dynamic_nodes:
        pytest.skip(f"the Slurm {slurm_lab.release.name} lab has no dynamic nodes")
    slurm_lab.add_dynamic_node("dyn01")
    try:
        wait_until(lambda: "dyn01" in slurm_lab.node_states(), 30, "dyn01 to register")
        node = slurm_lab.node("dyn01")
        assert "DYNAMIC_NORM" in node["state"]
        assert node["address"] == slurm_lab.release.address(100)
        assert sorted(node["partitions"]) == ["backfill", "batch"]
    finally:
        slurm_lab.remove_dynamic_node("dyn01")
    assert "dyn01" not in slurm_lab.node_states()


def test_down_leaves_nothing_behind(slurm_lab: SlurmLab, first_release: str) -> None:
    """down ends daemons and the job processes slurmd leaves behind, mounts and namespaces."""
    if slurm_lab.release.name != first_release:
        pytest.skip("up/down is checked on one release only, to keep the run short")
    job_id = slurm_lab.submit_job("sleep 300")
    try:
        wait_until(lambda: job_in_state(slurm_lab, job_id, "RUNNING"), 30, f"job {job_id} to run")
        wait_until(
            lambda: "sleep" in process_names(slurm_lab.root), 30, f"the sleep of job {job_id}"
        )
    finally:
        slurm_lab.down()
    try:
        assert pids_in_chroot(slurm_lab.root) == []
        assert mounts_under(slurm_lab.root) == []
        assert lab_netns(slurm_lab.release) == []
        assert lab_links(slurm_lab.release) == []
        assert slurm_lab.leftovers() == {}
        slurm_lab.down()  # idempotent
        status = subprocess.run(
            [sys.executable, str(LAB_CLI), "status", "--release", slurm_lab.release.name],
            capture_output=True,
            text=True,
            check=False,
        )
        assert status.returncode == 3, status.stdout
    finally:
        slurm_lab.up()  # other tests of this session share the lab
