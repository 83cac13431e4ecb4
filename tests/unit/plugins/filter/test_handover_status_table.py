# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""status.yml's table, from the rows handover_plan returns."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.filter.handover import handover_status_table
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    Journal,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import status_rows
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reconcile import reconcile
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import HandoverMarkers
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    JobView,
    NodeView,
    PodView,
    SlurmNodeView,
)

POLICY = Policy(pool_selector={"pool": "interactive"}, never_touch_selector={"never-touch": "true"})
NOW = 100_000.0


def test_rows_and_table_per_pool_node() -> None:
    nodes = [
        NodeView(
            "int02", {"pool": "interactive"}, journal=Journal("lent", "op2", since=NOW - 7500)
        ),
        NodeView(
            "int01",
            {"pool": "interactive"},
            journal=Journal("reclaiming", "op1", since=NOW - 30, deadline=NOW + 270),
        ),
        NodeView("gpu01", {"pool": "interactive", "never-touch": "true"}, unschedulable=True),
        # Drained by an admin while lent, then given back cordoned: the journal keeps why.
        NodeView(
            "int03",
            {"pool": "interactive"},
            unschedulable=True,
            journal=Journal("free", "op3", since=NOW - 60, admin_drain="hw: ECC errors"),
        ),
        # Drained by an admin now, still lent: Slurm says why.
        NodeView("int04", {"pool": "interactive"}, journal=Journal("lent", "op4", since=NOW - 90)),
        NodeView("svc01", {"pool": "services"}),
    ]
    pods = [
        PodView("apps", "nb", node="gpu01"),
        PodView("slurm", "slurmd", node="int02", slurmd=True),
    ]
    slurm = {
        "int01": SlurmNodeView("int01", frozenset({"MIXED", "DRAIN"}), (JobView(7, "backfill"),)),
        "int04": SlurmNodeView("int04", frozenset({"IDLE", "DRAIN"}), reason="hw: DIMM B2"),
        # The Slinky operator's own drain while a slurmd pod terminates is no admin's.
        "int02": SlurmNodeView(
            "int02", frozenset({"IDLE", "DRAIN"}), reason="slurm-operator: Pod is terminating"
        ),
    }
    rows = status_rows(nodes, pods, slurm, POLICY, NOW)
    assert [row["node"] for row in rows] == ["gpu01", "int01", "int02", "int03", "int04"]
    by_name = {row["node"]: row for row in rows}
    assert by_name["int02"]["lent_for_s"] == 7500 and by_name["int02"]["app_pods"] == 0
    assert by_name["int01"]["deadline_in_s"] == 270 and by_name["int01"]["jobs"] == [7]
    assert by_name["gpu01"]["never_touch"] and by_name["gpu01"]["app_pods"] == 1
    # Our own drain (int01: none, DRAIN without a reason here) is no admin's.
    assert [by_name[name]["admin_drain"] for name in ("int01", "int02", "int03", "int04")] == [
        "",
        "",
        "hw: ECC errors",
        "hw: DIMM B2",
    ]
    assert handover_status_table(rows) == [
        "NODE   K8S                         APPS  JOURNAL                     FOR    SLURM        JOBS  OP   ADMIN DRAIN     CONDITION",
        "gpu01  Ready,cordoned,never-touch  1     free                        -      -            0     -    -               -",
        "int01  Ready                       0     reclaiming (deadline 270s)  30s    DRAIN+MIXED  1     op1  -               -",
        # The operator's drain is shown with its reason (no condition: a pod being replaced).
        "int02  Ready                       0     lent                        2h05m  DRAIN+IDLE   0     op2  -               "
        "drained by Slinky: slurm-operator: Pod is terminating",
        "int03  Ready,cordoned              0     free                        1m     -            0     op3  hw: ECC errors  -",
        "int04  Ready                       0     lent                        1m     DRAIN+IDLE   0     op4  hw: DIMM B2     -",
    ]


def test_a_node_out_of_the_pool_and_the_operators_drain_are_shown_with_the_condition() -> None:
    label = {"hpcops.io/slurm-lent": "true"}
    taint = frozenset({("hpcops.io/lent", "NoSchedule")})
    nodes = [
        # Relabelled out of the pool while lent, a job running.
        NodeView(
            "int05",
            {"pool": "batch", **label},
            journal=Journal("lent", "op5", since=NOW - 60),
            taints=taint,
        ),
        # Drained by the Slinky operator for scale-in while lent.
        NodeView(
            "int06",
            {"pool": "interactive", **label},
            journal=Journal("lent", "op6", since=NOW - 60),
            taints=taint,
        ),
    ]
    pods = [
        PodView("slurm", "slurmd-5", node="int05", slurmd=True),
        PodView("slurm", "slurmd-6", node="int06", slurmd=True),
    ]
    scale_in = "slurm-operator: Pod (slurm/s-6) is pending termination for scale-in"
    slurm = {
        "int05": SlurmNodeView("int05", frozenset({"ALLOCATED"}), (JobView(9, "backfill"),)),
        "int06": SlurmNodeView("int06", frozenset({"IDLE", "DRAIN"}), reason=scale_in),
    }
    found = reconcile(nodes, pods, slurm, POLICY, HandoverMarkers())
    rows = status_rows(nodes, pods, slurm, POLICY, NOW, found)
    assert [row["node"] for row in rows] == ["int05", "int06"]
    assert [line.split("  ")[-1].strip() for line in handover_status_table(rows)] == [
        "CONDITION",
        "left_the_pool -> person; left the pool",
        f"drained_by_operator -> reclaim; drained by Slinky: {scale_in}",
    ]


@pytest.mark.parametrize("rows", [None, "text", [1, 2]])
def test_anything_but_status_rows_is_refused(rows: object) -> None:
    with pytest.raises(AnsibleFilterError, match="handover_plan returns"):
        handover_status_table(rows)
