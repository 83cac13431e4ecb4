# SPDX-License-Identifier: GPL-3.0-or-later
"""Record real slurmrestd responses from the running Slurm lab as unit-test fixtures.

    python3 tests/lab/slurm_lab.py up
    python3 tests/lab/record_slurmrestd.py [--release 26.05|24.11|all]

For each release and each API version the lab offers, this writes
``tests/unit/fixtures/slurmrestd/<release>/<api_version>/<name>.json`` as
``{"status": <HTTP status>, "body": <JSON body or text>}``, recorded while the cluster is in
a known state: one node runs a job (requeue, MCS label ``tenantA``), one is drained with
reason ``hpcops: reclaim test``, one is idle (with a maintenance reservation that starts
tomorrow), and one held job is pending.  ``<release>/openapi_info.json`` holds the ``info``
object and the sorted path keys of ``GET /openapi/v3``.  ``slurmdb_<name>.json`` hold the
accounting records (``--only slurmdb`` records just those): an account tree, a user with
limits and a QoS, made with sacctmgr and removed afterwards.  Tokens never reach the files, and
the jobs, reservation and drain are undone afterwards.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_lab import RELEASES, STATIC_NODES, TEST_RELEASES, SlurmLab, lab_jwt
from toolbox import LabError, run_cli, wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "slurmrestd"
DRAIN_REASON = "hpcops: reclaim test"
MCS_LABEL = "tenantA"
RESERVATION = "hpcops-maint"
MISSING_NODE = "cpu99"
# A well-formed token signed with a key the lab does not use.
WRONG_TOKEN = lab_jwt(b"hpcops lab: not the cluster key!", "root")
JWT_PATTERN = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


@dataclass
class Scenario:
    running_job: int
    pending_job: int
    busy_node: str
    drained_node: str
    idle_node: str


def job_if_running(lab: SlurmLab, job_id: int) -> dict[str, Any] | None:
    job = lab.job(job_id)
    return job if "RUNNING" in job["job_state"] else None


def all_idle(lab: SlurmLab) -> Callable[[], bool]:
    return lambda: all(state == ["IDLE"] for state in lab.node_states().values())


@contextmanager
def scenario(lab: SlurmLab) -> Iterator[Scenario]:
    """Put the cluster into the recorded state; undo it on exit."""
    # Job ids and contents stay the same from one recording to the next only on a fresh lab.
    earlier = [job["job_id"] for job in lab.get("jobs")["jobs"]]
    if earlier:
        raise LabError(
            f"the Slurm {lab.release.name} lab already ran jobs {earlier}; record on a fresh lab "
            f"(python3 tests/lab/slurm_lab.py down, then up)"
        )
    wait_until(all_idle(lab), 30, f"every Slurm {lab.release.name} node to be IDLE")
    running = lab.submit_job(
        "sleep 600", user="alice", name="hpcops-running", requeue=True, mcs_label=MCS_LABEL
    )
    pending = 0
    busy = drained = ""
    try:
        job = wait_until(lambda: job_if_running(lab, running), 30, f"job {running} to run")
        busy = job["nodes"]
        drained, idle = [node for node in reversed(STATIC_NODES) if node != busy][:2]
        pending = lab.submit_job(
            "sleep 60", user="bob", name="hpcops-pending", partition="backfill", hold=True
        )
        lab.run(
            ["scontrol", "update", f"nodename={drained}", "state=drain", f"reason={DRAIN_REASON}"],
            check=True,
        )
        lab.run(
            [
                "scontrol",
                "create",
                "reservation",
                f"reservationname={RESERVATION}",
                "starttime=now+1day",
                "duration=02:00:00",
                f"nodes={idle}",
                "users=root",
                "flags=maint",
            ],
            check=True,
        )
        yield Scenario(running, pending, busy, drained, idle)
    finally:
        lab.run(["scontrol", "delete", f"reservationname={RESERVATION}"])
        if drained:
            lab.run(["scontrol", "update", f"nodename={drained}", "state=resume"])
        lab.run(["scancel", *(str(job) for job in (running, pending) if job)])
        wait_until(all_idle(lab), 30, f"every Slurm {lab.release.name} node to be IDLE again")


def scrub(value: Any, secrets: list[str]) -> Any:
    """Drop tokens from a response, whatever depth they sit at."""
    if isinstance(value, dict):
        return {key: scrub(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "<scrubbed>")
        return JWT_PATTERN.sub("<scrubbed>", value)
    return value


def write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def record_version(lab: SlurmLab, version: str, out_dir: Path) -> None:
    token = lab.token("root")
    base = f"/slurm/{version}"
    requests = {
        "ping": (f"{base}/ping", token),
        "diag": (f"{base}/diag", token),
        "nodes": (f"{base}/nodes", token),
        "jobs": (f"{base}/jobs", token),
        "partitions": (f"{base}/partitions", token),
        "reservations": (f"{base}/reservations", token),
        "node_missing": (f"{base}/node/{MISSING_NODE}", token),
        "unauthorized": (f"{base}/nodes", WRONG_TOKEN),
        **{f"node_{node}": (f"{base}/node/{node}", token) for node in STATIC_NODES},
    }
    for name, (path, use_token) in requests.items():
        status, body = lab.request("GET", path, token=use_token)
        write(
            out_dir / f"{name}.json", {"status": status, "body": scrub(body, [token, WRONG_TOKEN])}
        )
    status, body = lab.request("GET", f"{base}/nodes", auth=False)
    write(out_dir / "unauthenticated.json", {"status": status, "body": body})


# The accounting records of the slurmdb recording; removed again afterwards.
SLURMDB_ACCOUNTS = ("rec", "rec-child")
SLURMDB_QOS = "rec-lent"


@contextmanager
def slurmdb_scenario(lab: SlurmLab) -> Iterator[None]:
    """An account tree, a user with limits in it and a QoS with limits, made with sacctmgr
    (not the collection's modules, whose tests use these recordings)."""
    cluster = lab.release.cluster
    parent, child = SLURMDB_ACCOUNTS
    steps = [
        [
            "add",
            "account",
            parent,
            f"cluster={cluster}",
            "description=recorded",
            "organization=hpcops",
        ],
        ["add", "account", child, f"parent={parent}", f"cluster={cluster}", "fairshare=5"],
        [
            "add",
            "qos",
            SLURMDB_QOS,
            "priority=10",
            "maxwall=01:00:00",
            "maxtrespu=cpu=8,mem=4G",
            "preemptmode=requeue",
            "flags=DenyOnLimit",
        ],
        ["add", "user", "alice", f"account={child}", f"cluster={cluster}"],
        [
            "modify",
            "user",
            "alice",
            "where",
            f"account={child}",
            "set",
            "maxjobs=3",
            "grptres=cpu=4",
            f"qos=normal,{SLURMDB_QOS}",
            "defaultqos=normal",
        ],
    ]
    try:
        for step in steps:
            lab.run(["sacctmgr", "-i", *step], check=True)
        yield
    finally:
        lab.run(["sacctmgr", "-i", "delete", "account", f"name={child}"])
        lab.run(["sacctmgr", "-i", "delete", "account", f"name={parent}"])
        lab.run(["sacctmgr", "-i", "delete", "qos", f"name={SLURMDB_QOS}"])


def record_slurmdb(lab: SlurmLab) -> None:
    """GET /slurmdb/<version>/{clusters,accounts,users,associations,qos} per API version, as
    slurmdb_<name>.json beside the other recordings."""
    out_dir = FIXTURES / lab.release.name
    with slurmdb_scenario(lab):
        for version in lab.api_versions():
            token = lab.token("root")
            for name in ("clusters", "accounts", "users", "associations", "qos"):
                status, body = lab.request("GET", f"/slurmdb/{version}/{name}/", token=token)
                write(
                    out_dir / version / f"slurmdb_{name}.json",
                    {"status": status, "body": scrub(body, [token])},
                )
            print(f"  recorded slurmdb of {lab.release.name} {version}", file=sys.stderr)


def record_release(lab: SlurmLab) -> None:
    if not lab.is_healthy():
        raise LabError(
            f"Slurm {lab.release.name} lab is not up: run `python3 tests/lab/slurm_lab.py up` first"
        )
    out_dir = FIXTURES / lab.release.name
    spec = lab.openapi_spec()
    write(out_dir / "openapi_info.json", {"info": spec["info"], "paths": sorted(spec["paths"])})
    with scenario(lab) as state:
        print(
            f"Slurm {lab.release.name}: job {state.running_job} runs on {state.busy_node}, "
            f"{state.drained_node} drained, {state.idle_node} idle, "
            f"job {state.pending_job} pending",
            file=sys.stderr,
        )
        for version in lab.api_versions(spec):
            record_version(lab, version, out_dir / version)
            print(
                f"  recorded {out_dir.relative_to(FIXTURES.parents[3]) / version}", file=sys.stderr
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", choices=[*RELEASES, "all"], default="all")
    parser.add_argument(
        "--only",
        choices=["slurm", "slurmdb"],
        help="record only the /slurm/ answers, or only the accounting (/slurmdb/) ones",
    )
    args = parser.parse_args(argv)
    releases = TEST_RELEASES if args.release == "all" else [args.release]

    def record() -> int:
        for release in releases:
            lab = SlurmLab(release)
            if args.only != "slurmdb":
                record_release(lab)
            if args.only != "slurm" and lab.release.accounting:
                record_slurmdb(lab)
        return 0

    return run_cli("record_slurmrestd", record, (LabError,))


if __name__ == "__main__":
    sys.exit(main())
