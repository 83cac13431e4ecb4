# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""handover_plan_table: what the next run would do with each pool node, and why."""

from __future__ import annotations

import typing as t

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.filter.handover import handover_plan_table


def result(**overrides: t.Any) -> dict[str, t.Any]:
    return {
        "resume": [],
        "reclaim": [],
        "lend": [{"node": "int01", "reason": "for pending job(s) 43 of Slurm"}],
        "left_alone": [
            {"node": "svc01", "reason": "not in the lendable pool"},
            {"node": "int02", "reason": "free; no job waiting in Slurm needs it"},
            {"node": "gpu01", "reason": "never-touch"},
        ],
        "slurm_demand": None,
        **overrides,
    }


def test_one_line_per_pool_node_with_the_next_runs_decision() -> None:
    assert handover_plan_table(result()) == [
        "NODE   NEXT RUN  WHY",
        "gpu01  -         never-touch",
        "int01  lend      for pending job(s) 43 of Slurm",
        "int02  -         free; no job waiting in Slurm needs it",
    ]


def test_slurms_demand_comes_first_under_lend_when_demand() -> None:
    demand = {
        "pending_jobs": 4,
        "fitting_jobs": 2,
        "nodes": 1,
        "lent_nodes_used": ["int09"],
        "unplaced_jobs": [44],
        "unplaced_count": 1,
        "skipped": [{"reason": "held", "jobs": 2, "examples": [41, 42]}],
    }
    lines = handover_plan_table(result(slurm_demand=demand))
    assert lines[:3] == [
        "Slurm: 4 pending job(s) in the lendable partitions, 2 a lent node would start; 1 "
        "node(s) to lend for them, lent node(s) int09 already idle for them",
        "  1 fitting job(s) need more nodes than this run can lend, e.g. 44",
        "  2 skipped: held (e.g. 41, 42)",
    ]
    assert lines[3] == "NODE   NEXT RUN  WHY"


@pytest.mark.parametrize(
    "bad", [None, [], {"lend": []}, {"lend": 1, "reclaim": [], "resume": [], "left_alone": []}]
)
def test_anything_but_a_plan_is_refused(bad: t.Any) -> None:
    with pytest.raises(AnsibleFilterError, match="expected the result of handover_plan"):
        handover_plan_table(bad)
