# SPDX-License-Identifier: GPL-3.0-or-later
"""How the accounting modules scale: 100 accounts and 1,000 users on a real slurmdbd.

    sudo .venv/bin/python benchmarks/accounting_apply.py [--accounts 100] [--users 1000]
                                                           [--release 26.05]

On the Slurm lab (slurmdbd on MariaDB), runs through ansible-playbook: slurm_account with
the accounts (10 departments, the rest spread under them), slurm_user with the users (each in
one account, every tenth in two), and slurm_association with a limit and shares on every
user; then the same three again, which must change nothing. Prints, per module and run, the
wall time, the HTTP requests the module counted, and what it changed; checks the result
with sacctmgr. Everything it made is removed at the end; a lab this run started is stopped.
"""

from __future__ import annotations

import argparse
import sys
import time
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(REPO / "tests" / "lab"),
    str(REPO / "tests" / "integration"),
    str(REPO / "benchmarks"),
]

from _common import figure, table  # noqa: E402
from ansible_runner import run_task  # noqa: E402
from slurm_lab import SlurmLab  # noqa: E402

PREFIX = "bench"


def records(accounts: int, users: int) -> dict[str, list[dict[str, t.Any]]]:
    departments = [f"{PREFIX}dept{i:02d}" for i in range(min(10, accounts))]
    groups = [f"{PREFIX}grp{i:04d}" for i in range(accounts - len(departments))]
    account_entries = [{"name": name, "description": f"department {name}"} for name in departments]
    account_entries += [
        {"name": name, "parent": departments[i % len(departments)]} for i, name in enumerate(groups)
    ]
    leaves = groups or departments
    user_entries = []
    for i in range(users):
        accounts_of = [leaves[i % len(leaves)]]
        if i % 10 == 0 and len(leaves) > 1:
            accounts_of.append(leaves[(i + 1) % len(leaves)])
        user_entries.append({"name": f"{PREFIX}user{i:05d}", "accounts": accounts_of})
    limits = [
        {"account": entry["accounts"][0], "user": entry["name"], "max_jobs": 10, "fairshare": 2}
        for entry in user_entries
    ]
    return {"accounts": account_entries, "users": user_entries, "associations": limits}


def apply(lab: SlurmLab, module: str, option: str, entries: list[dict[str, t.Any]]) -> list[str]:
    started = time.perf_counter()
    result = run_task(
        f"hpcops.slinky.{module}",
        {"url": lab.url, "jwt_key_path": str(lab.jwt_key_path), option: entries},
    )
    elapsed = time.perf_counter() - started
    if result.failed:
        raise SystemExit(f"{module} failed: {result.get('msg')}")
    changed = sum(1 for entry in result[option] if entry["action"] != "none")
    return [module, str(len(entries)), figure(elapsed), str(result["requests"]), str(changed)]


def clean(lab: SlurmLab, made: dict[str, list[dict[str, t.Any]]]) -> None:
    users = [entry["name"] for entry in made["users"]]
    for start in range(0, len(users), 200):
        lab.run(
            ["sacctmgr", "-i", "delete", "user", "name=" + ",".join(users[start : start + 200])],
            timeout=300,
        )
    # Children before parents.
    for entry in reversed(made["accounts"]):
        lab.run(["sacctmgr", "-i", "delete", "account", f"name={entry['name']}"], timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--accounts", type=int, default=100)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--release", default="26.05", choices=["26.05", "24.11"])
    args = parser.parse_args()
    lab = SlurmLab(args.release)
    started_here = not lab.is_healthy()
    made = records(args.accounts, args.users)
    rows = [["module", "entries", "seconds", "requests", "changed"]]
    try:
        lab.up()
        api_version = lab.latest_api()
        for run in ("first", "second"):
            for module, option in (
                ("slurm_account", "accounts"),
                ("slurm_user", "users"),
                ("slurm_association", "associations"),
            ):
                row = apply(lab, module, option, made[option])
                rows.append([f"{row[0]} ({run} run)", *row[1:]])
        out = lab.run(
            [
                "sacctmgr",
                "-nP",
                "show",
                "assoc",
                f"user={PREFIX}user00000",
                "format=MaxJobs,Fairshare",
            ]
        )
        print(f"sacctmgr: {PREFIX}user00000 MaxJobs|Fairshare = {out.stdout.split()[0]}")
    finally:
        clean(lab, made)
        if started_here:
            lab.down()
    print(
        f"\nAccounting modules on Slurm {args.release} ({api_version}), "
        f"{args.accounts} accounts, {args.users} users"
    )
    table(rows)
    second = [row for row in rows[1:] if "second" in row[0]]
    if any(row[4] != "0" for row in second):
        raise SystemExit("the second run changed something")


if __name__ == "__main__":
    main()
