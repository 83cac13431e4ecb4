# SPDX-License-Identifier: GPL-3.0-or-later
"""What slurm_accounting_info makes of slurmdbd's jobs and slurmctld's shares, on records
as the labs' slurmrestd gave them (26.05 wraps numbers, 24.11 gives some plain)."""

from __future__ import annotations

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.reads import (
    job_record,
    moment,
    share_record,
    wanted,
)

# /slurmdb/v0.0.44/jobs of the 26.05 lab (the fields the module reads).
JOB_2605 = {
    "job_id": 1, "name": "allocation", "user": "alice", "account": "lab", "partition": "batch",
    "qos": "normal", "state": {"current": ["COMPLETED"], "reason": "None"}, "nodes": "cpu01",
    "time": {"elapsed": 2, "end": 1795838519, "start": 1795838517, "submission": 1795838517},
    "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "infinite": False, "number": 0}},
}  # fmt: skip
# /slurm/v0.0.44/shares (26.05) and /slurm/v0.0.41/shares (24.11), alice under lab.
SHARE_2605 = {
    "name": "alice", "parent": "lab", "partition": "", "type": ["USER"],
    "shares": {"set": True, "infinite": False, "number": 1},
    "shares_normalized": {"set": True, "infinite": False, "number": 0.5},
    "usage": 1, "effective_usage": {"set": True, "infinite": False, "number": 0.0},
    "fairshare": {"factor": {"set": True, "infinite": False, "number": 1.0},
                  "level": {"set": True, "infinite": False, "number": 1.8e19}},
}  # fmt: skip
SHARE_2411 = {
    "name": "lab", "parent": "root", "partition": "", "type": ["ASSOCIATION"],
    "shares": {"set": True, "infinite": False, "number": 1},
    "shares_normalized": {"set": True, "infinite": False, "number": 0.5},
    "usage": 0, "effective_usage": 0.0, "fairshare": {"factor": 0.0, "level": float("inf")},
}  # fmt: skip


def test_a_job_as_sacct_shows_it() -> None:
    assert job_record(JOB_2605) == {
        "job_id": 1, "name": "allocation", "user": "alice", "account": "lab",
        "partition": "batch", "qos": "normal", "state": "COMPLETED", "reason": "None",
        "nodes": "cpu01", "submit": 1795838517, "start": 1795838517, "end": 1795838519,
        "elapsed_s": 2, "exit_code": 0,
    }  # fmt: skip


def test_a_job_that_never_started_has_no_start_nor_nodes() -> None:
    raw = {**JOB_2605, "nodes": "None assigned", "time": {"start": 4294967294, "end": 0}}
    record = job_record(raw)
    assert (record["start"], record["end"], record["nodes"]) == (None, None, "")
    assert moment({"set": False, "infinite": False, "number": 5}) is None


def test_shares_of_a_user_and_of_an_account_on_both_forms() -> None:
    user = share_record(SHARE_2605)
    assert (user["account"], user["user"], user["raw_usage"], user["fairshare"]) == (
        "lab",
        "alice",
        1,
        1.0,
    )
    account = share_record(SHARE_2411)
    assert (account["account"], account["user"], account["effective_usage"]) == ("lab", "", 0.0)
    assert wanted(user, ["alice"], []) and not wanted(account, ["alice"], [])
    assert wanted(account, [], ["lab"]) and not wanted(user, [], ["other"])
