# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What lending gave Slurm over a period: the arithmetic of the lending report (pure).

PRIVATE to the collection. Given the loans (when each node was lent, when its reclaim began
and when it came back) and the jobs Slurm accounted, it sums per partition and account:
the node-hours lent, the node-hours jobs used on lent nodes, and the jobs a reclaim ended
(requeued or cancelled while their node was being taken back) with the node-hours they
lost. Jobs are taken one at a time and only the sums are kept, so a year of jobs fits in
the memory of a few loans.
"""

from __future__ import annotations

import bisect
import typing as t
from dataclasses import dataclass, field

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import expand_hostlists
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.reads import (
    job_state,
    moment,
)

# A job that ended in one of these on a node under reclaim was ended by the reclaim.
REQUEUED = frozenset({"REQUEUED", "PREEMPTED", "NODE_FAIL"})
CANCELLED = frozenset({"CANCELLED"})
ALL_ACCOUNTS = "*"


@dataclass(frozen=True)
class Loan:
    """One node lent to Slurm: from `lent`, reclaimed from `reclaim` (None: still lent) to
    `returned` (None: not back yet), in `partition` (the lendable pool's partition)."""

    node: str
    partition: str
    lent: float
    reclaim: float | None = None
    returned: float | None = None


@dataclass(frozen=True)
class Job:
    """What the report needs of an accounted job (times in Unix seconds; end None: running)."""

    job_id: int
    partition: str
    account: str
    nodes: tuple[str, ...]
    start: float | None
    end: float | None
    state: str


@dataclass
class Row:
    partition: str
    account: str
    lent_node_hours: float = 0.0
    used_node_hours: float = 0.0
    jobs_on_lent_nodes: int = 0
    requeued_by_reclaim: int = 0
    cancelled_by_reclaim: int = 0
    lost_node_hours: float = 0.0


@dataclass
class LendingReport:
    """The sums, built with add_job one job at a time."""

    start: float
    end: float
    loans: t.Sequence[Loan]
    rows: dict[tuple[str, str], Row] = field(default_factory=dict)
    _by_node: dict[str, list[Loan]] = field(default_factory=dict)
    _starts: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError("the period must end after it starts")
        for loan in sorted(self.loans, key=lambda loan: loan.lent):
            self._by_node.setdefault(loan.node, []).append(loan)
        self._starts = {
            node: [loan.lent for loan in loans] for node, loans in self._by_node.items()
        }
        for loan in self.loans:
            hours = self._overlap(loan.lent, self._loan_end(loan)) / 3600
            if hours > 0:
                self._row(loan.partition, ALL_ACCOUNTS).lent_node_hours += hours

    def _loan_end(self, loan: Loan) -> float:
        return loan.returned if loan.returned is not None else self.end

    def _overlap(self, begin: float, finish: float) -> float:
        return max(0.0, min(finish, self.end) - max(begin, self.start))

    def _row(self, partition: str, account: str) -> Row:
        key = (partition, account)
        if key not in self.rows:
            self.rows[key] = Row(partition, account)
        return self.rows[key]

    def _loans_during(self, node: str, begin: float, finish: float) -> list[Loan]:
        loans = self._by_node.get(node)
        if not loans:
            return []
        # Loans of a node do not overlap: the last that began before `finish` and those before it.
        last = bisect.bisect_left(self._starts[node], finish)
        return [loan for loan in loans[:last] if self._loan_end(loan) > begin]

    def add_job(self, job: Job) -> None:
        if job.start is None:
            return  # never ran
        finish = job.end if job.end is not None else self.end
        used = 0.0
        ended_by_reclaim = False
        for node in job.nodes:
            for loan in self._loans_during(node, job.start, finish):
                used += self._overlap(max(job.start, loan.lent), min(finish, self._loan_end(loan)))
                if (
                    job.end is not None
                    and loan.reclaim is not None
                    and loan.reclaim <= job.end <= self._loan_end(loan)
                    and job.state in REQUEUED | CANCELLED
                ):
                    ended_by_reclaim = True
        if used <= 0 and not ended_by_reclaim:
            return
        row = self._row(job.partition, job.account)
        row.jobs_on_lent_nodes += 1
        row.used_node_hours += used / 3600
        if ended_by_reclaim:
            if job.state in CANCELLED:
                row.cancelled_by_reclaim += 1
            else:
                row.requeued_by_reclaim += 1
            row.lost_node_hours += self._overlap(job.start, finish) * len(job.nodes) / 3600

    def table(self) -> list[Row]:
        return [self.rows[key] for key in sorted(self.rows)]


def job_from_api(raw: t.Mapping[str, t.Any]) -> Job:
    """A job as /slurmdb/ returns it (v0.0.41 to v0.0.45 agree on these fields); an attempt
    of a requeued job (show_duplicates) is a job of its own, ended REQUEUED."""
    times = raw.get("time") or {}
    nodes = str(raw.get("nodes") or "")
    return Job(
        job_id=int(raw.get("job_id") or 0),
        partition=str(raw.get("partition") or ""),
        account=str(raw.get("account") or ""),
        nodes=tuple(expand_hostlists([nodes], "job nodes"))
        if nodes and nodes != "None assigned"
        else (),
        start=_seconds(moment(times.get("start"))),
        end=_seconds(moment(times.get("end"))),
        state=job_state(raw),
    )


def _seconds(when: int | None) -> float | None:
    return None if when is None else float(when)


METRICS = (
    ("lent_node_hours", "Node-hours lent by the applications to Slurm in the period."),
    ("used_node_hours", "Node-hours jobs ran on lent nodes in the period."),
    ("jobs_on_lent_nodes", "Jobs that ran on lent nodes in the period."),
    ("requeued_by_reclaim", "Jobs requeued because their lent node was reclaimed."),
    ("cancelled_by_reclaim", "Jobs cancelled because their lent node was reclaimed."),
    ("lost_node_hours", "Node-hours of work that jobs ended by a reclaim lost."),
)


def prometheus_text(rows: t.Sequence[Row], prefix: str = "hpcops_lending") -> str:
    """The rows as Prometheus text (a node_exporter textfile), one series per partition and
    account."""
    lines: list[str] = []
    for name, help_text in METRICS:
        metric = f"{prefix}_{name}"
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for row in rows:
            value = getattr(row, name)
            if name == "lent_node_hours" and row.account != ALL_ACCOUNTS:
                continue
            labels = f'partition="{_escape(row.partition)}",account="{_escape(row.account)}"'
            lines.append(f"{metric}{{{labels}}} {value:.6g}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


TABLE_COLUMNS = (
    ("partition", "PARTITION", "s"),
    ("account", "ACCOUNT", "s"),
    ("lent_node_hours", "LENT_NH", ".1f"),
    ("used_node_hours", "USED_NH", ".1f"),
    ("jobs_on_lent_nodes", "JOBS", "d"),
    ("requeued_by_reclaim", "REQUEUED", "d"),
    ("cancelled_by_reclaim", "CANCELLED", "d"),
    ("lost_node_hours", "LOST_NH", ".1f"),
)


def table_lines(rows: t.Sequence[Row]) -> list[str]:
    """The rows as aligned text lines under a header (the lending_report playbook's table)."""
    cells = [[title for _field, title, _fmt in TABLE_COLUMNS]]
    cells += [
        [format(getattr(row, field), fmt) for field, _title, fmt in TABLE_COLUMNS] for row in rows
    ]
    widths = [max(len(line[index]) for line in cells) for index in range(len(TABLE_COLUMNS))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    ]
