# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_account, slurm_user, slurm_association and slurm_qos against a real slurmdbd.

The lab runs slurmdbd on MariaDB for Slurm 26.05 and 24.11; every module runs through
ansible-playbook once per API version both the server and the collection speak. What the
modules did is read back with `sacctmgr` in the lab's chroot, an oracle that shares no code
with them, and a limit they set is shown to hold a job back.
"""

from __future__ import annotations

import time
import typing as t
from collections.abc import Iterator

import pytest
from ansible_runner import run_task

pytestmark = pytest.mark.integration


def connection(lab: t.Any, api_version: str) -> dict[str, t.Any]:
    return {"url": lab.url, "jwt_key_path": str(lab.jwt_key_path), "api_version": api_version}


def sacctmgr_rows(lab: t.Any, *args: str) -> list[dict[str, str]]:
    """`sacctmgr -nP show ... format=A,B`: one dict per row, keyed by the format's names."""
    fmt = next(arg for arg in args if arg.startswith("format="))
    names = fmt.split("=", 1)[1].split(",")
    out = lab.run(["sacctmgr", "-nP", "show", *args], check=True).stdout
    return [dict(zip(names, line.split("|"), strict=True)) for line in out.splitlines() if line]


def suffix(api_version: str) -> str:
    """Names of one API version's records, so versions never see each other's."""
    return api_version.replace("v0.0.", "v")


@pytest.fixture
def records(slurm_api: tuple[t.Any, str]) -> Iterator[tuple[t.Any, str, str]]:
    """The lab, the API version and the suffix of the records a test makes; they are removed
    afterwards with sacctmgr, whatever the test left."""
    lab, api_version = slurm_api
    tag = suffix(api_version)
    yield lab, api_version, tag
    lab.run(["scancel", "--name=hpcops-acct"])
    for kind, names in (
        ("user", [f"carol{tag}"]),
        ("account", [f"child{tag}", f"dept{tag}", f"grp{tag}"]),
        ("qos", [f"lent{tag}", f"owner{tag}"]),
    ):
        lab.run(["sacctmgr", "-i", "delete", kind, "name=" + ",".join(names)])
    # alice's association with the test's account goes with the account.


def test_qos_per_api_version(records: tuple[t.Any, str, str]) -> None:
    lab, api_version, tag = records
    conn = connection(lab, api_version)
    lent, owner = f"lent{tag}", f"owner{tag}"
    wanted = {
        **conn,
        "qos": [
            {
                "name": lent,
                "description": "jobs on lent nodes",
                "priority": 10,
                "preempt_mode": ["REQUEUE"],
                "max_wall": "04:00:00",
                "max_tres_per_user": {"cpu": 8, "mem": "4G"},
                "grp_jobs": 20,
            },
            {"name": owner, "priority": 1000, "preempt": [lent]},
        ],
    }
    checked = run_task("hpcops.slinky.slurm_qos", wanted, check=True, diff=True)
    assert checked["changed"] and not checked.failed, checked.get("msg")
    assert [q["action"] for q in checked["qos"]] == ["create", "create"]
    assert not sacctmgr_rows(lab, "qos", f"name={lent}", "format=Name"), "check mode made it"

    made = run_task("hpcops.slinky.slurm_qos", wanted)
    assert made["changed"] and not made.failed, made.get("msg")
    (row,) = sacctmgr_rows(
        lab,
        "qos",
        f"name={lent}",
        "format=Name,Priority,PreemptMode,MaxWall,MaxTRESPU,GrpJobs,Description",
    )
    assert row == {
        "Name": lent,
        "Priority": "10",
        "PreemptMode": "requeue",
        "MaxWall": "04:00:00",
        "MaxTRESPU": "cpu=8,mem=4G",
        "GrpJobs": "20",
        "Description": "jobs on lent nodes",
    }
    (row,) = sacctmgr_rows(lab, "qos", f"name={owner}", "format=Name,Priority,Preempt")
    assert row == {"Name": owner, "Priority": "1000", "Preempt": lent}

    again = run_task("hpcops.slinky.slurm_qos", wanted)
    assert not again["changed"], again["qos"]
    assert again["requests"] == 2, "a run with nothing to change only reads"

    # -1 lifts one limit and leaves the others.
    lifted = run_task(
        "hpcops.slinky.slurm_qos",
        {**conn, "qos": [{"name": lent, "max_tres_per_user": {"mem": -1}, "grp_jobs": -1}]},
        diff=True,
    )
    assert lifted["changed"], lifted.get("msg")
    assert lifted["diff"]["after"][lent]["max_tres_per_user"] == {"cpu": 8}
    (row,) = sacctmgr_rows(lab, "qos", f"name={lent}", "format=MaxTRESPU,GrpJobs,Priority")
    assert row == {"MaxTRESPU": "cpu=8", "GrpJobs": "", "Priority": "10"}

    removed = run_task(
        "hpcops.slinky.slurm_qos", {**conn, "state": "absent", "qos": [{"name": owner}]}
    )
    assert removed["changed"] and [q["action"] for q in removed["qos"]] == ["delete"]
    assert not sacctmgr_rows(lab, "qos", f"name={owner}", "format=Name")
    gone = run_task(
        "hpcops.slinky.slurm_qos", {**conn, "state": "absent", "qos": [{"name": owner}]}
    )
    assert not gone["changed"]


def test_accounts_users_and_a_limit_that_holds_a_job_back(records: tuple[t.Any, str, str]) -> None:
    lab, api_version, tag = records
    conn = connection(lab, api_version)
    dept, child, carol = f"dept{tag}", f"child{tag}", f"carol{tag}"
    accounts = {
        **conn,
        "accounts": [
            {"name": dept, "description": "a department", "organization": "science"},
            {"name": child, "parent": dept},
        ],
    }
    made = run_task("hpcops.slinky.slurm_account", accounts, diff=True)
    assert made["changed"] and not made.failed, made.get("msg")
    rows = {
        row["Account"]: row
        for row in sacctmgr_rows(lab, "account", f"name={dept},{child}", "format=Account,Descr,Org")
    }
    assert rows[dept] == {"Account": dept, "Descr": "a department", "Org": "science"}
    assert rows[child]["Descr"] == child, "a new account without description takes its name"
    tree = {
        row["Account"]: row["ParentName"]
        for row in sacctmgr_rows(
            lab, "assoc", f"account={dept},{child}", "user=", "format=Account,User,ParentName"
        )
        if not row["User"]
    }
    assert tree == {dept: "root", child: dept}
    assert not run_task("hpcops.slinky.slurm_account", accounts)["changed"]

    users = {
        **conn,
        "users": [
            {"name": carol, "accounts": [child], "admin_level": "Operator"},
            {"name": "alice", "accounts": [child]},
        ],
    }
    added = run_task("hpcops.slinky.slurm_user", users, diff=True)
    assert added["changed"] and not added.failed, added.get("msg")
    (row,) = sacctmgr_rows(lab, "user", f"name={carol}", "format=User,DefaultAccount,Admin")
    assert row == {"User": carol, "DefaultAccount": child, "Admin": "Operator"}
    alice = {a["name"]: a for a in added["users"]}["alice"]
    assert alice["after"]["default_account"] == "lab", "an existing default was replaced"
    assert child in alice["after"]["accounts"] and "lab" in alice["after"]["accounts"]
    assert not run_task("hpcops.slinky.slurm_user", users)["changed"]

    limits = {
        **conn,
        "associations": [
            {"account": child, "fairshare": 7, "grp_jobs": 1, "max_wall": 60},
            {"account": child, "user": "alice", "max_submit_jobs": 5, "grp_tres": "cpu=4"},
        ],
    }
    limited = run_task("hpcops.slinky.slurm_association", limits, diff=True)
    assert limited["changed"] and not limited.failed, limited.get("msg")
    rows = {
        row["User"]: row
        for row in sacctmgr_rows(
            lab,
            "assoc",
            f"account={child}",
            "format=User,Fairshare,GrpJobs,MaxWall,MaxSubmit,GrpTRES",
        )
    }
    assert rows[""] == {
        "User": "",
        "Fairshare": "7",
        "GrpJobs": "1",
        "MaxWall": "01:00:00",
        "MaxSubmit": "",
        "GrpTRES": "",
    }
    assert rows["alice"]["MaxSubmit"] == "5" and rows["alice"]["GrpTRES"] == "cpu=4"
    assert not run_task("hpcops.slinky.slurm_association", limits)["changed"]

    # The account may run one job at a time: alice's second waits on the limit the module set.
    first = lab.submit_job("sleep 120", name="hpcops-acct", account=child)
    second = lab.submit_job("sleep 120", name="hpcops-acct", account=child)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = (lab.job(first)["job_state"], lab.job(second))
        if states[0] == ["RUNNING"] and states[1]["state_reason"] == "AssocGrpJobsLimit":
            break
        time.sleep(0.5)
    assert lab.job(first)["job_state"] == ["RUNNING"]
    held = lab.job(second)
    assert held["job_state"] == ["PENDING"] and held["state_reason"] == "AssocGrpJobsLimit", held[
        "state_reason"
    ]


def test_bad_input_names_the_setting(slurm_api: tuple[t.Any, str]) -> None:
    lab, api_version = slurm_api
    conn = connection(lab, api_version)
    bad_tres = run_task(
        "hpcops.slinky.slurm_association",
        {**conn, "associations": [{"account": "lab", "grp_tres": "cpu:4"}]},
    )
    assert (
        bad_tres.failed and "associations[0].grp_tres: 'cpu:4' is not TYPE=COUNT" in bad_tres["msg"]
    )
    no_account = run_task("hpcops.slinky.slurm_user", {**conn, "users": [{"name": "nobody1"}]})
    assert (
        no_account.failed
        and "users[0]: user nobody1 is new and has no account" in no_account["msg"]
    )
    wrong_cluster = run_task(
        "hpcops.slinky.slurm_qos", {**conn, "cluster": "elsewhere", "qos": [{"name": "normal"}]}
    )
    assert (
        wrong_cluster.failed
        and "cluster 'elsewhere' is not registered in slurmdbd" in wrong_cluster["msg"]
    )
    for result in (bad_tres, no_account, wrong_cluster):
        assert "Traceback" not in result.output


def test_while_slurmdbd_is_away_jobs_run_and_the_modules_say_so(
    records: tuple[t.Any, str, str],
) -> None:
    """slurmctld keeps its jobs while slurmdbd is away and sends their records once it is
    back; a module meanwhile ends with a message that names slurmdbd and changes nothing."""
    lab, api_version, tag = records
    if api_version != lab.latest_api():
        pytest.skip("one outage per release is enough")
    conn = connection(lab, api_version)
    lab.stop_slurmdbd()
    try:
        job = lab.submit_job("sleep 1", name="hpcops-acct")
        deadline = time.monotonic() + 30
        while lab.job(job)["job_state"] != ["COMPLETED"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert lab.job(job)["job_state"] == ["COMPLETED"]
        result = run_task(
            "hpcops.slinky.slurm_qos", {**conn, "retries": 0, "qos": [{"name": f"lent{tag}"}]}
        )
        assert result.failed, result
        assert result["msg"].startswith("slurmdbd did not answer slurmrestd"), result["msg"]
        assert "Failed to open slurmdbd connection" in result["msg"]
        assert "Traceback" not in result.output
    finally:
        lab.start_slurmdbd()
    assert not sacctmgr_rows(lab, "qos", f"name=lent{tag}", "format=Name")
    # slurmctld sends its queued records one by one: the submit can show before the end.
    expected = [{"JobID": str(job), "State": "COMPLETED"}]
    deadline = time.monotonic() + 60
    accounted: list[dict[str, str]] = []
    while time.monotonic() < deadline and accounted != expected:
        out = lab.run(["sacct", "-nP", "-X", f"-j{job}", "--format=JobID,State"]).stdout
        accounted = [
            dict(zip(("JobID", "State"), line.split("|"), strict=True)) for line in out.splitlines()
        ]
        time.sleep(1)
    assert accounted == expected


def test_accounting_info_reads_jobs_and_shares_as_sacct_and_sshare(
    slurm_api: tuple[t.Any, str],
) -> None:
    lab, api_version = slurm_api
    conn = connection(lab, api_version)
    job_id = lab.submit_job("true", name="hpcops-acct-info", account="lab")
    deadline = time.monotonic() + 60
    sacct: list[str] = []
    while time.monotonic() < deadline:  # slurmdbd records the end a moment after it
        sacct = lab.run(
            ["sacct", "-nP", "-X", f"-j{job_id}", "--format=JobID,User,Account,State,NodeList"],
            check=True,
        ).stdout.split()
        if sacct and sacct[0].split("|")[3] == "COMPLETED":
            break
        time.sleep(0.5)
    assert sacct, f"sacct never showed job {job_id}"
    found = run_task(
        "hpcops.slinky.slurm_accounting_info",
        {**conn, "gather": ["jobs", "shares"], "users": ["alice"], "jobs_since_s": 3600},
    )
    assert not found.failed and not found["changed"], found.get("msg")
    jobs = {job["job_id"]: job for job in found["jobs"]}
    job = jobs[job_id]
    oracle = dict(
        zip(["JobID", "User", "Account", "State", "NodeList"], sacct[0].split("|"), strict=True)
    )
    assert (job["user"], job["account"], job["state"], job["nodes"]) == (
        oracle["User"],
        oracle["Account"],
        oracle["State"],
        oracle["NodeList"],
    )
    assert job["start"] and job["end"] and job["end"] >= job["start"] and job["exit_code"] == 0
    assert {job["user"] for job in found["jobs"]} == {"alice"}, "the user filter let others through"
    # sshare's line of alice under lab, read by the oracle from slurmctld.
    (row,) = [
        line.split("|")
        for line in lab.run(["sshare", "-nP", "-u", "alice", "-A", "lab", "--format=Account,User,RawUsage"],
                            check=True).stdout.split()
        if line.split("|")[1] == "alice"
    ]  # fmt: skip
    shares = [
        share for share in found["shares"] if share["user"] == "alice" and share["account"] == "lab"
    ]
    assert len(shares) == 1, found["shares"]
    # Usage decays and grows between the two reads; both count the job's seconds.
    assert abs(shares[0]["raw_usage"] - int(row[2])) <= 2, (shares[0], row)
