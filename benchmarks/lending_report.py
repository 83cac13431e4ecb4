# SPDX-License-Identifier: GPL-3.0-or-later
"""The lending report over 100,000 accounted jobs: seconds and peak memory.

    sudo .venv/bin/python benchmarks/lending_report.py [--jobs 100000] [--loans 90]

On the Slurm 26.05 lab (slurmdbd on MariaDB, slurmrestd serving /slurmdb/): one real job
is run and accounted, then slurmdbd's job table is given `--jobs` copies of its record,
spread over 30 days across the lab's three nodes (one in 7 requeued, one in 11 cancelled),
so slurmrestd sends a month of a busy cluster. A fresh Python process then does what the
lending_report module does after it has read the loans (`--loans` loans of the three
nodes over the month, as the handover runs record them): it streams the month's jobs from
slurmrestd and sums them into the report, and prints its time and its peak memory (the
process's maximum resident set, interpreter included). The copies are deleted at the end;
a lab this run started is stopped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "lab"), str(REPO / "benchmarks")]

from _common import figure, table  # noqa: E402
from slurm_lab import ACCT_DB, IN_RUN, LAB_ACCOUNT, STATIC_NODES, SlurmLab  # noqa: E402

FIRST_COPY = 10_000_000  # job IDs of the copies, far above the lab's own
DAY = 86400
# slurmdbd's job states (slurm.h): PENDING, COMPLETE, CANCELLED; and the flag of an attempt
# a requeue ended (recorded as PENDING with it: measured).
PENDING, COMPLETE, CANCELLED, REQUEUE_FLAG = 0, 3, 4, 0x0400

# What the module runs once it has the loans, in a process of its own (its peak memory).
DRIVER = """
import json, resource, sys, time
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection, SlurmRestClient)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import SlurmdbApi
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.lending import (
    LendingReport, Loan, job_from_api)

spec = json.load(sys.stdin)
loans = [Loan(**loan) for loan in spec["loans"]]
client = SlurmRestClient(Connection(url=spec["url"], token=spec["token"], user="root", timeout=600.0))
api = SlurmdbApi(client)
began = time.perf_counter()
report, jobs = api.fold_jobs(  # as the lending_report module sums them
    spec["start"], spec["end"], spec["now"],
    lambda: LendingReport(spec["start"], spec["end"], loans),
    lambda sums, raw: sums.add_job(job_from_api(raw)),
)
rows = report.table()
print(json.dumps({
    "seconds": time.perf_counter() - began,
    "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "jobs": jobs,
    "requests": api.requests,
    "api_version": client.api_version,
    "used_node_hours": sum(row.used_node_hours for row in rows),
    "requeued": sum(row.requeued_by_reclaim for row in rows),
    "cancelled": sum(row.cancelled_by_reclaim for row in rows),
}))
"""


def sql(lab: SlurmLab, statements: str) -> str:
    """Statements run by root on the lab's MariaDB (its socket, in the chroot)."""
    proc = lab.run(
        ["mariadb", "--no-defaults", f"--socket={IN_RUN}/mariadb/mariadbd.sock", "--user=root",
         "--batch", "--skip-column-names", ACCT_DB],
        input=statements,
        check=True,
        timeout=600,
    )  # fmt: skip
    return proc.stdout


def accounted_job(lab: SlurmLab) -> int:
    """A real job, run and recorded by slurmdbd: the record the copies are made of."""
    job_id = lab.submit_job("true", name="hpcops-bench-lending", account=LAB_ACCOUNT)
    table_name = f"{lab.release.cluster}_job_table"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        query = f"SELECT time_end FROM {table_name} WHERE id_job = {job_id};"  # noqa: S608
        if sql(lab, query).strip() not in ("", "0"):
            return job_id
        time.sleep(0.5)
    raise SystemExit(f"slurmdbd never recorded the end of job {job_id}")


def copy_jobs(lab: SlurmLab, template: int, count: int, start: int) -> None:
    """`count` copies of the template's record: one every 30 days / count, on cpu01..03,
    each running for up to 4 hours."""
    table_name = f"{lab.release.cluster}_job_table"
    columns = sql(
        lab,
        "SELECT column_name FROM information_schema.columns "  # noqa: S608 - the lab's names
        f"WHERE table_schema = '{ACCT_DB}' AND table_name = '{table_name}' "
        "ORDER BY ordinal_position;",
    ).split()
    step = max(1, 30 * DAY // count)
    nodes = STATIC_NODES[:3]
    node_of = "ELT(1 + seq % 3, " + ", ".join(f"'{node}'" for node in nodes) + ")"
    replaced = {
        "job_db_inx": None,  # its own, from the auto increment
        "id_job": f"{FIRST_COPY} + seq",
        "time_submit": f"{start} + seq * {step}",
        "time_eligible": f"{start} + seq * {step}",
        "time_start": f"{start} + seq * {step}",
        "time_end": f"{start} + seq * {step} + 60 + (seq * 7919) % 14400",
        "nodelist": node_of,
        "nodes_alloc": "1",
        "state": f"IF(seq % 7 = 0, {PENDING} | {REQUEUE_FLAG}, IF(seq % 11 = 0, {CANCELLED}, {COMPLETE}))",
    }
    kept = [column for column in columns if replaced.get(column, "") is not None]
    select = ", ".join(replaced.get(column) or f"t.`{column}`" for column in kept)
    sql(
        lab,
        f"INSERT INTO {table_name} ({', '.join(f'`{c}`' for c in kept)}) "  # noqa: S608
        f"SELECT {select} FROM seq_1_to_{count} "
        f"JOIN (SELECT * FROM {table_name} WHERE id_job = {template}) AS t;",
    )


def loans_over(start: int, count: int) -> list[dict[str, object]]:
    """`count` loans of the three nodes over the 30 days: each lent for two thirds of its
    slot, its reclaim 5 minutes before it comes back."""
    slot = 30 * DAY * 3 // max(count, 1)
    loans = []
    for index in range(count):
        node = STATIC_NODES[index % 3]
        lent = start + (index // 3) * slot
        returned = lent + slot * 2 // 3
        loans.append(
            {"node": node, "partition": "batch", "lent": float(lent),
             "reclaim": float(returned - 300), "returned": float(returned)}
        )  # fmt: skip
    return loans


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--loans", type=int, default=90)
    args = parser.parse_args()
    lab = SlurmLab("26.05")
    started_here = not lab.is_healthy()
    table_name = f"{lab.release.cluster}_job_table"
    rows = [
        ["jobs", "loans", "API", "seconds", "peak MiB", "requests", "used NH", "requeued",
         "cancelled"]
    ]  # fmt: skip
    try:
        lab.up()
        template = accounted_job(lab)
        now = int(time.time())
        start = now - 31 * DAY
        began = time.perf_counter()
        copy_jobs(lab, template, args.jobs, start)
        print(f"{args.jobs} job records copied in {time.perf_counter() - began:.1f} s")
        spec = {
            "url": lab.url,
            "token": lab.token("root", 3600),
            "loans": loans_over(start, args.loans),
            "start": float(start),
            "end": float(now),
            "now": float(now),
        }
        collections = REPO / ".build" / "collections"
        proc = subprocess.run(
            [sys.executable, "-c", DRIVER],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(collections), "PATH": "/usr/bin:/bin"},
            timeout=1800,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"the report failed: {proc.stderr[-2000:]}")
        got = json.loads(proc.stdout)
        rows.append(
            [str(got["jobs"]), str(args.loans), got["api_version"], figure(got["seconds"]),
             figure(got["peak_mib"], 1), str(got["requests"]), figure(got["used_node_hours"], 1),
             str(got["requeued"]), str(got["cancelled"])]
        )  # fmt: skip
    finally:
        sql(lab, f"DELETE FROM {table_name} WHERE id_job > {FIRST_COPY};")  # noqa: S608
        if started_here:
            lab.down()
    print("\nThe lending report's reading and sums over a month of accounted jobs (Slurm 26.05)")
    table(rows)
    if got["jobs"] < args.jobs:
        raise SystemExit(f"slurmrestd sent {got['jobs']} of the {args.jobs} jobs")


if __name__ == "__main__":
    main()
