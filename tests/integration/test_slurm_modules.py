# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_info, slurm_node, slurm_job and the slurm inventory plugin against real slurmrestd.

Every module runs through ansible-playbook against the lab's Slurm 26.05 and 24.11, once
per API version that both the server and the collection speak (the matrix in docs/development.md).
"""

from __future__ import annotations

import time
import typing as t
from pathlib import Path

import pytest
import yaml
from ansible_runner import inventory_list, run_play, run_task

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SUPPORTED_API_VERSIONS,
)

pytestmark = pytest.mark.integration


def versions_of(lab: t.Any) -> list[str]:
    return [version for version in lab.release.api_versions if version in SUPPORTED_API_VERSIONS]


def connection(lab: t.Any, api_version: str | None = None) -> dict[str, t.Any]:
    args: dict[str, t.Any] = {"url": lab.url, "jwt_key_path": str(lab.jwt_key_path)}
    if api_version:
        args["api_version"] = api_version
    return args


def wait_for(probe: t.Callable[[], t.Any], what: str, timeout: float = 60.0) -> t.Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def reset(lab: t.Any) -> None:
    """Cancel the jobs of these tests and resume every static node."""
    lab.run(["scancel", "--name=hpcops-it"])
    for node in lab.node_names:
        lab.run(["scontrol", "update", f"nodename={node}", "state=resume"])


@pytest.fixture
def clean_nodes(slurm_lab: t.Any) -> t.Iterator[t.Any]:
    yield slurm_lab
    reset(slurm_lab)


@pytest.fixture
def clean_api_nodes(slurm_api: tuple[t.Any, str]) -> t.Iterator[tuple[t.Any, str]]:
    yield slurm_api
    reset(slurm_api[0])


# -- the API version matrix -------------------------------------------------------------


def test_negotiates_the_newest_common_version(slurm_lab: t.Any) -> None:
    result = run_task("hpcops.slinky.slurm_info", {**connection(slurm_lab), "gather": ["ping"]})
    assert not result.failed, result.get("msg")
    assert result["api_version"] == versions_of(slurm_lab)[-1]
    assert [ping["responding"] for ping in result["ping"]] == [True]


def test_a_pin_the_server_lacks_names_what_it_offers(slurm_lab: t.Any) -> None:
    missing = next(
        version for version in SUPPORTED_API_VERSIONS if version not in versions_of(slurm_lab)
    )
    result = run_task("hpcops.slinky.slurm_info", connection(slurm_lab, missing))
    assert result.failed
    offered = ", ".join(slurm_lab.api_versions())
    assert (
        f"api_version '{missing}' is not offered by this slurmrestd; it offers {offered}"
        in result["msg"]
    )
    assert "Traceback" not in result.output


def test_slurm_info_per_api_version(clean_api_nodes: tuple[t.Any, str]) -> None:
    slurm_lab, api_version = clean_api_nodes
    job_id = slurm_lab.submit_job("sleep 300", name="hpcops-it", partition="backfill", requeue=True)
    running = wait_for(
        lambda: slurm_lab.job(job_id)["job_state"] == ["RUNNING"] and slurm_lab.job(job_id),
        f"job {job_id} to run",
    )
    node = running["nodes"]
    result = run_task(
        "hpcops.slinky.slurm_info",
        {
            **connection(slurm_lab, api_version),
            "gather": ["all"],
            "nodes": [node],
            "job_states": ["running"],
        },
    )
    assert not result.failed, result.get("msg")
    assert result["changed"] is False
    assert result["api_version"] == api_version
    assert [n["name"] for n in result["nodes"]] == [node]
    assert result["nodes"][0]["state"] in ("ALLOCATED", "MIXED")
    assert [job["job_id"] for job in result["jobs"]] == [job_id]
    assert result["jobs"][0]["partition"] == "backfill" and result["jobs"][0]["requeue"] is True
    partitions = {p["name"]: p for p in result["partitions"]}
    assert partitions["backfill"]["priority_tier"] < partitions["batch"]["priority_tier"]
    assert result["diag"]["jobs_submitted"] >= 1
    assert isinstance(result["reservations"], list)

    idle = run_task(
        "hpcops.slinky.slurm_info",
        {**connection(slurm_lab, api_version), "gather": ["nodes"], "node_states": ["idle"]},
    )
    assert node not in [n["name"] for n in idle["nodes"]]
    assert len(idle["nodes"]) == len(slurm_lab.node_names) - 1


def test_slurm_node_per_api_version(clean_api_nodes: tuple[t.Any, str]) -> None:
    slurm_lab, api_version = clean_api_nodes
    conn = connection(slurm_lab, api_version)
    first, second = slurm_lab.node_names[:2]
    drain = {**conn, "names": [f"{first},{second}"], "state": "drain", "reason": "it maintenance"}

    checked = run_task("hpcops.slinky.slurm_node", drain, check=True, diff=True)
    assert checked["changed"] and not checked.failed
    assert checked["diff"]["after"][first]["state"] == "IDLE+DRAIN"
    assert "DRAIN" not in slurm_lab.node(first)["state"], "check mode changed the node"

    drained = run_task("hpcops.slinky.slurm_node", drain, diff=True)
    assert drained["changed"], drained.get("msg")
    for name in (first, second):
        node = slurm_lab.node(name)
        assert "DRAIN" in node["state"] and node["reason"] == "hpcops: it maintenance"
    assert not run_task("hpcops.slinky.slurm_node", drain)["changed"], "drain is not idempotent"

    # An administrator's drain is kept by drain, and never cleared by resume without force.
    slurm_lab.run(
        ["scontrol", "update", f"nodename={second}", "state=drain", "reason=bad DIMM"], check=True
    )
    kept = run_task("hpcops.slinky.slurm_node", drain)
    assert not kept["changed"]
    assert [d["name"] for d in kept["foreign_drains"]] == [second]
    assert slurm_lab.node(second)["reason"] == "bad DIMM"
    refused = run_task(
        "hpcops.slinky.slurm_node", {**conn, "names": [first, second], "state": "resume"}
    )
    assert refused.failed and "'bad DIMM'" in refused["msg"] and "force: true" in refused["msg"]
    assert "DRAIN" in slurm_lab.node(first)["state"], "a refusal must change nothing"

    resumed = run_task("hpcops.slinky.slurm_node", {**conn, "names": [first], "state": "resume"})
    assert resumed["changed"] and "DRAIN" not in slurm_lab.node(first)["state"]
    forced = run_task(
        "hpcops.slinky.slurm_node", {**conn, "names": [second], "state": "resume", "force": True}
    )
    assert forced["changed"] and "DRAIN" not in slurm_lab.node(second)["state"]

    # Attributes: only what differs is sent, and a second run changes nothing.
    attrs = {
        **conn,
        "names": [first],
        "weight": 7,
        "comment": "rack 4",
        "features": ["ib", "avx512"],
    }
    assert run_task("hpcops.slinky.slurm_node", attrs)["changed"]
    node = slurm_lab.node(first)
    assert node["weight"] == 7 and node["comment"] == "rack 4"
    assert sorted(node["features"]) == ["avx512", "ib"]
    assert not run_task("hpcops.slinky.slurm_node", attrs)["changed"]
    reset_attrs = {**conn, "names": [first], "weight": 1, "comment": "", "features": []}
    assert run_task("hpcops.slinky.slurm_node", reset_attrs)["changed"]
    node = slurm_lab.node(first)
    assert node["features"] == [] and node["weight"] == 1 and node["comment"] == ""


def test_down_requeues_a_requeueable_job(slurm_lab: t.Any, clean_nodes: t.Any) -> None:
    job_id = slurm_lab.submit_job("sleep 300", name="hpcops-it", partition="backfill", requeue=True)
    job = wait_for(
        lambda: slurm_lab.job(job_id)["job_state"] == ["RUNNING"] and slurm_lab.job(job_id),
        f"job {job_id} to run",
    )
    args = {
        **connection(slurm_lab),
        "names": [job["nodes"]],
        "state": "down",
        "reason": "requeue test",
    }
    checked = run_task("hpcops.slinky.slurm_node", args, check=True)
    assert [j["job_id"] for j in checked["jobs_affected"]] == [job_id]
    assert slurm_lab.job(job_id)["job_state"] == ["RUNNING"], "check mode touched the job"
    downed = run_task("hpcops.slinky.slurm_node", args)
    assert downed["changed"]
    requeued = wait_for(
        lambda: (state := slurm_lab.job(job_id))["job_state"][0] == "PENDING" and state,
        f"job {job_id} to be requeued",
    )
    assert requeued["restart_cnt"] >= 1, "the job was killed, not requeued"
    node = slurm_lab.node(job["nodes"])
    assert node["reason"] == "hpcops: requeue test"
    # Measured on 24.11 and 26.05: when DOWN lands within seconds of the job's start, slurmctld
    # may keep the killed job's allocation (26.05 logs "could not find JobId by SLUID") and
    # the node shows MIXED instead of DOWN. The job is requeued either way; the handover
    # protocol must not rely on the DOWN state sticking (it deletes the node afterwards).
    assert node["state"][0] in ("DOWN", "MIXED"), node["state"]
    assert requeued["nodes"] == "", "the requeued job still holds the node"


def test_upgrade_resume_clears_the_drain_a_replaced_pods_prestop_renamed(
    slurm_lab: t.Any, clean_nodes: t.Any
) -> None:
    """The handover role's upgrade_resume, as upgrade.yml runs it once the nodes it drained
    have new slurmds. On Slinky 1.2 a replaced pod's preStop marks its node DOWN under
    "slurm-operator: Pod is terminating", overwriting the upgrade's reason, and the new
    slurmd leaves the DRAIN under it: that drain is still the upgrade's, and is cleared. An
    admin's drain meanwhile is kept and named. (The Kubernetes lab's operator races to
    lift such a drain itself, so only this lab shows the resume's own part every time.)"""
    ours, admins = slurm_lab.node_names[:2]
    for name, reason in ((ours, "slurm-operator: Pod is terminating"), (admins, "bad DIMM")):
        slurm_lab.run(
            ["scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason}"],
            check=True,
        )
    play = [
        {
            "name": "upgrade_resume after the pods were replaced",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Resume the drained nodes once their new slurmd runs",
                    "ansible.builtin.include_role": {
                        "name": "hpcops.slinky.handover",
                        "tasks_from": "upgrade_resume",
                    },
                    "vars": {
                        "handover_slurmrestd_url": slurm_lab.url,
                        "handover_slurm_jwt_key_path": str(slurm_lab.jwt_key_path),
                        "handover_upgrade_reason": "upgrade to Slinky 1.2.1",
                        "handover_upgrade_timeout_s": 30,
                        # What upgrade_drain leaves: the nodes it drained, and when (any
                        # slurmd of the lab started after 0).
                        "_handover_upgrade_nodes": [ours, admins],
                        "_handover_upgrade_drained_at": 0,
                    },
                }
            ],
        }
    ]
    run = run_play(play)
    assert not run.failed, run.output[-3000:]
    (resumed,) = run.task_results(
        "hpcops.slinky.handover : Resume those whose reason the replaced pod's preStop overwrote"
    )
    assert [n["name"] for n in resumed.get("nodes", [])] == [ours], resumed
    assert "DRAIN" not in slurm_lab.node(ours)["state"]
    assert slurm_lab.node(admins)["reason"] == "bad DIMM"
    (named,) = run.task_results(
        "hpcops.slinky.handover : Name the drained nodes somebody else holds now"
    )
    assert f"{admins}: bad DIMM" in named["msg"], named


def test_slurm_job_cancel_by_node_and_partition(clean_api_nodes: tuple[t.Any, str]) -> None:
    slurm_lab, api_version = clean_api_nodes
    keep = slurm_lab.submit_job("sleep 300", name="hpcops-it", partition="batch")
    hit = slurm_lab.submit_job("sleep 300", name="hpcops-it", partition="backfill", requeue=True)
    wait_for(
        lambda: all(slurm_lab.job(j)["job_state"] == ["RUNNING"] for j in (keep, hit)),
        "both jobs to run",
    )
    args = {
        **connection(slurm_lab, api_version),
        "partitions": ["backfill"],
        "names": ["hpcops-it"],
    }
    checked = run_task("hpcops.slinky.slurm_job", args, check=True)
    assert [job["job_id"] for job in checked["jobs"]] == [hit] and checked["changed"]
    assert slurm_lab.job(hit)["job_state"] == ["RUNNING"], "check mode touched the job"

    cancelled = run_task("hpcops.slinky.slurm_job", args)
    assert cancelled["changed"] and cancelled["signal"] == "SIGKILL"
    wait_for(
        lambda: slurm_lab.job(hit)["job_state"][0] == "CANCELLED", f"job {hit} to be cancelled"
    )
    assert slurm_lab.job(keep)["job_state"] == ["RUNNING"]
    assert not run_task("hpcops.slinky.slurm_job", args)["changed"], "cancel is not idempotent"


def test_slurm_job_refuses_to_select_everything(slurm_lab: t.Any) -> None:
    result = run_task("hpcops.slinky.slurm_job", connection(slurm_lab))
    assert result.failed and "one of the following is required" in result["msg"]


def test_a_dynamic_node_record_is_removed(slurm_lab: t.Any) -> None:
    if not slurm_lab.release.dynamic_nodes:
        pytest.skip(f"the Slurm {slurm_lab.release.name} lab has no dynamic nodes")
    slurm_lab.add_dynamic_node("dyn01")
    try:
        wait_for(lambda: "IDLE" in slurm_lab.node_states().get("dyn01", []), "dyn01 to register")
        args = {**connection(slurm_lab), "names": ["dyn01"], "state": "absent"}
        removed = run_task("hpcops.slinky.slurm_node", args)
        assert removed["changed"], removed.get("msg")
        assert "dyn01" not in slurm_lab.node_states()
        assert not run_task("hpcops.slinky.slurm_node", args)["changed"]
    finally:
        slurm_lab.remove_dynamic_node("dyn01")


# -- credentials and errors ---------------------------------------------------------------


def test_a_token_is_accepted_and_never_shown(slurm_lab: t.Any) -> None:
    token = slurm_lab.token("root")
    result = run_task(
        "hpcops.slinky.slurm_info", {"url": slurm_lab.url, "token": token, "gather": ["ping"]}
    )
    assert not result.failed
    assert token not in result.output


def test_token_from_the_environment_and_module_defaults(slurm_lab: t.Any) -> None:
    result = run_task(
        "hpcops.slinky.slurm_info",
        {"gather": ["partitions"]},
        env={"SLURMRESTD_URL": slurm_lab.url, "SLURM_JWT": slurm_lab.token("root")},
    )
    assert not result.failed, result.get("msg")
    assert {p["name"] for p in result["partitions"]} == {"batch", "backfill"}


def test_a_bad_token_is_a_clear_error(slurm_lab: t.Any) -> None:
    result = run_task(
        "hpcops.slinky.slurm_info",
        {"url": slurm_lab.url, "token": "not-a-jwt", "gather": ["nodes"]},
    )
    assert result.failed and "rejected the token" in result["msg"]
    assert "Traceback" not in result.output and "not-a-jwt" not in result.output


def test_a_wrong_key_is_a_clear_error(slurm_lab: t.Any, secret_dir: Path) -> None:
    wrong_key = secret_dir / "wrong.key"
    wrong_key.write_bytes(b"x" * 32)
    result = run_task(
        "hpcops.slinky.slurm_info", {"url": slurm_lab.url, "jwt_key_path": str(wrong_key)}
    )
    assert result.failed and "signed with another key" in result["msg"]


def test_an_unreachable_server_is_a_clear_error() -> None:
    result = run_task(
        "hpcops.slinky.slurm_info",
        {"url": "http://127.0.0.1:9", "token": "x", "retries": 1, "timeout": 2},
    )
    assert result.failed
    assert (
        "cannot reach slurmrestd at http://127.0.0.1:9" in result["msg"]
        and "after 2 attempts" in result["msg"]
    )


# -- inventory plugin -----------------------------------------------------------------------


def test_inventory_groups_nodes(clean_api_nodes: tuple[t.Any, str], tmp_path: Path) -> None:
    slurm_lab, api_version = clean_api_nodes
    first = slurm_lab.node_names[0]
    slurm_lab.run(
        ["scontrol", "update", f"nodename={first}", "state=drain", "reason=hpcops: inv"], check=True
    )
    source = tmp_path / "lab.slurm.yml"
    source.write_text(
        yaml.safe_dump(
            {
                "plugin": "hpcops.slinky.slurm",
                "url": slurm_lab.url,
                "jwt_key_path": str(slurm_lab.jwt_key_path),
                "api_version": api_version,
                "compose": {"ansible_host": "slurm_address"},
                "keyed_groups": [{"key": "slurm_architecture", "prefix": "arch"}],
                "cache": True,
                "cache_plugin": "ansible.builtin.jsonfile",
                "cache_connection": str(tmp_path / "cache"),
            }
        )
    )
    inventory = inventory_list(source)
    assert sorted(inventory["slurm"]["hosts"]) == sorted(slurm_lab.node_names)
    assert sorted(inventory["slurm_partition_backfill"]["hosts"]) == sorted(slurm_lab.node_names)
    assert inventory["slurm_state_drained"]["hosts"] == [first]
    assert first in inventory["slurm_state_drain"]["hosts"]
    hostvars = inventory["_meta"]["hostvars"][first]
    assert hostvars["slurm_reason"] == "hpcops: inv"
    assert hostvars["ansible_host"] == hostvars["slurm_address"]
    assert f"arch_{hostvars['slurm_architecture']}" in inventory
    assert list((tmp_path / "cache").iterdir()), "the cache was not written"
