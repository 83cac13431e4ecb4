# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each node's owner from all the evidence (reconcile.py): the histories the runs did not
write, every combination of the evidence (exhaustively, and as a hypothesis property), and
how the planner and status use it."""

from __future__ import annotations

import dataclasses
import itertools
import typing as t

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_handover_plan import node

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    CONDITIONS,
    RESOLUTIONS,
    RUN_RESOLUTIONS,
    UNDER_WAY,
    Condition,
    JournalState,
    Policy,
    Resolution,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import (
    admin_drains,
    attention,
    plan,
    status_rows,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reconcile import (
    SLURM_RECORDS,
    Evidence,
    SlurmRecord,
    condition_line,
    reconcile,
    resolve,
    slurm_record,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import HandoverMarkers
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    JobView,
    NodeView,
    PodView,
    SlurmNodeView,
    node_view,
)

NOW = 1_800_000_000.0
POOL = {"hpcops.io/pool": "interactive"}
NEVER = {"hpcops.io/never-touch": "true"}
LABEL = {"hpcops.io/slurm-lent": "true"}
TAINT = ("hpcops.io/lent", "NoSchedule")
MARKERS = HandoverMarkers()
POLICY = Policy(pool_selector=POOL, never_touch_selector=NEVER, headroom=0, lend_min_idle_s=0)

F, LG, LT, RC, CO = (
    JournalState.FREE,
    JournalState.LENDING,
    JournalState.LENT,
    JournalState.RECLAIMING,
    JournalState.CORRUPT,
)
UP, NONE = SlurmRecord.UP, SlurmRecord.NONE
APP = ("jupyterhub/nb",)

# ---- the histories of issue 41, and their neighbours ------------------------------------

HISTORIES = [
    # (what happened, evidence, condition, resolution)
    (
        "Node deleted and restored with our journal; Slurm kept it drained as an orphan",
        Evidence(LT, True, True, True, SlurmRecord.DRAINED_OURS),
        Condition.JOURNAL_LENT_DRAINED_BY_US,
        Resolution.RECLAIM,
    ),
    (
        "Node re-registered by its kubelet with the lent label; slurmd back with a job; an "
        "application pod scheduled beside it",
        Evidence(F, True, False, True, UP, (7,), APP),
        Condition.SLURM_AND_APPS,
        Resolution.RECLAIM,
    ),
    (
        "the same, before any application pod landed: the lend is finished",
        Evidence(F, True, False, True, UP, (7,)),
        Condition.SLURMD_WITHOUT_JOURNAL,
        Resolution.LEND,
    ),
    (
        "the same, slurmd not registered yet: given back",
        Evidence(F, True, False, True, SlurmRecord.DOWN),
        Condition.MARKS_WITHOUT_JOURNAL,
        Resolution.RECLAIM,
    ),
    (
        "the same, but the Node is cordoned: no lend onto it, given back",
        Evidence(F, True, False, True, UP, schedulable=False),
        Condition.MARKS_WITHOUT_JOURNAL,
        Resolution.RECLAIM,
    ),
    (
        "Node re-registered without any mark; its old record still in Slurm",
        Evidence(F, slurm=SlurmRecord.DRAINED_OURS, jobs=(7,), apps=APP),
        Condition.ORPHAN_RECORD,
        Resolution.CLEAN_ORPHAN,
    ),
    (
        "a taint of ours and nothing else",
        Evidence(F, taint=True),
        Condition.MARKS_WITHOUT_JOURNAL,
        Resolution.RECLAIM,
    ),
    (
        "lent node relabelled out of the pool while a job runs",
        Evidence(LT, True, True, True, UP, (7,), in_pool=False),
        Condition.LEFT_THE_POOL,
        Resolution.PERSON,
    ),
    (
        "lent node relabelled out of the pool, a job and an application pod on it",
        Evidence(LT, True, True, True, UP, (7,), APP, in_pool=False),
        Condition.SLURM_AND_APPS,
        Resolution.RECLAIM,
    ),
    (
        "a never-touch node with our marks is never touched, an emergency or not",
        Evidence(LT, True, True, True, UP, (7,), APP, never_touch=True),
        Condition.LEFT_THE_POOL,
        Resolution.PERSON,
    ),
    (
        "Slinky drained a lent node for scale-in",
        Evidence(LT, True, True, True, SlurmRecord.DRAINED_OPERATOR),
        Condition.DRAINED_BY_OPERATOR,
        Resolution.RECLAIM,
    ),
    (
        "a lent node whose slurmd pod the operator replaces (an upgrade): its drain is the "
        "upgrade's to clear",
        Evidence(
            LT,
            True,
            True,
            True,
            SlurmRecord.DRAINED_OPERATOR,
            slurm_reason="slurm-operator: Pod is terminating",
        ),
        "",
        "",
    ),
    (
        "the lend label removed from a lent node",
        Evidence(LT, False, True, True, UP),
        Condition.JOURNAL_LENT_NO_LABEL,
        Resolution.RECLAIM,
    ),
    (
        "the taint removed from a lent node",
        Evidence(LT, True, False, True, UP),
        Condition.JOURNAL_LENT_NO_TAINT,
        Resolution.RECLAIM,
    ),
    (
        "an application pod that tolerates the taint, on a lent node without jobs",
        Evidence(LT, True, True, True, UP, apps=APP),
        Condition.APPS_BESIDE_SLURMD,
        Resolution.RECLAIM,
    ),
    (
        "a job beside an application pod while lending: given back, not rolled back",
        Evidence(LG, True, True, True, UP, (7,), APP),
        Condition.SLURM_AND_APPS,
        Resolution.RECLAIM,
    ),
    (
        "a job beside an application pod while reclaiming: the reclaim goes on",
        Evidence(RC, True, True, True, UP, (7,), APP),
        Condition.SLURM_AND_APPS,
        Resolution.RESUME,
    ),
    ("a lend under way", Evidence(LG, taint=True), "", Resolution.RESUME),
    ("a lent node as it should be", Evidence(LT, True, True, True, UP, (7,)), "", ""),
    (
        "a lent node whose slurmd pod is being replaced (an upgrade)",
        Evidence(LT, True, True, False, SlurmRecord.DOWN),
        "",
        "",
    ),
    (
        "a lent node somebody drained: the admin's, not a disagreement",
        Evidence(LT, True, True, True, SlurmRecord.DRAINED_ADMIN),
        "",
        "",
    ),
    ("a free node with applications", Evidence(F, apps=APP), "", ""),
    ("an unreadable journal", Evidence(CO), Condition.JOURNAL_CORRUPT, Resolution.PERSON),
]


@pytest.mark.parametrize(
    ("evidence", "condition", "resolution"),
    [pytest.param(e, c, r, id=what) for what, e, c, r in HISTORIES],
)
def test_each_history_has_its_condition_and_resolution(
    evidence: Evidence, condition: str, resolution: str
) -> None:
    assert resolve(evidence) == (condition, resolution)


def test_every_condition_and_resolution_is_reachable() -> None:
    seen = {resolve(e) for e in every_evidence()}
    assert {c for c, _r in seen} - {""} == set(CONDITIONS)
    assert {r for _c, r in seen} - {""} == set(RESOLUTIONS)


# ---- every combination of the evidence --------------------------------------------------


def every_evidence() -> list[Evidence]:
    found = []
    for journal, label, taint, slurmd, slurm, jobs, apps, in_pool, never, ok in itertools.product(
        (F, LG, LT, RC, CO),
        (False, True),
        (False, True),
        (False, True),
        SLURM_RECORDS,
        ((), (7,)),
        ((), APP),
        (True, False),
        (False, True),
        (True, False),
    ):
        if jobs and slurm == NONE:
            continue  # a job runs on a Slurm node
        found.append(Evidence(journal, label, taint, slurmd, slurm, jobs, apps, in_pool, never, ok))
    return found


def after(e: Evidence, resolution: str) -> Evidence:
    """The evidence once a run has done `resolution` (what the executor's steps leave)."""
    given_back = dataclasses.replace(
        e, journal=F, label=False, taint=False, slurmd=False, slurm=NONE, jobs=(), slurm_reason=""
    )
    lent = dataclasses.replace(e, journal=LT, label=True, taint=True, slurmd=True, slurm=UP)
    if resolution == Resolution.RESUME:
        # A resumed lend rolls back (or gives back) when an application pod came first.
        return lent if e.journal == LG and not e.apps else given_back
    if resolution == Resolution.LEND:
        return lent
    if resolution == Resolution.RECLAIM:
        return given_back
    assert resolution == Resolution.CLEAN_ORPHAN
    return dataclasses.replace(e, slurm=NONE, jobs=(), slurm_reason="")


def owners(e: Evidence) -> list[str]:
    """Who holds the node: Slurm (lent, fenced off), the applications (no mark, no Slurm)."""
    found = []
    if e.journal == LT and e.label and e.taint and not e.apps:
        found.append("slurm")
    if e.journal == F and not (e.label or e.taint) and e.slurm == NONE:
        found.append("applications")
    return found


def check_one(e: Evidence) -> None:
    condition, resolution = resolve(e)
    assert condition in ("", *CONDITIONS) and resolution in ("", *RESOLUTIONS)
    if not condition:
        # The evidence agrees: nothing to do, or the journal's own handover under way.
        assert resolution in ("", Resolution.RESUME)
        assert resolution == Resolution.RESUME or e.journal not in (LG, RC) or not e.in_pool
    if resolution == Resolution.PERSON:
        assert condition in (Condition.JOURNAL_CORRUPT, Condition.LEFT_THE_POOL)
    if resolution == Resolution.LEND:
        assert not e.apps and e.in_pool and not e.never_touch and e.schedulable
    if condition == Condition.SLURM_AND_APPS:
        assert e.jobs and e.apps
    if (
        e.jobs
        and e.apps
        and (e.label or e.taint or e.slurmd or e.journal in UNDER_WAY)
        and e.journal != CO
        and not e.never_touch
        and (e.in_pool or e.marked)
    ):
        # The emergency is resolved by the run that sees it, never left to a person.
        assert condition == Condition.SLURM_AND_APPS
        assert resolution in (Resolution.RECLAIM, Resolution.RESUME)
    if resolution in RUN_RESOLUTIONS:
        done = after(e, resolution)
        # One resolution restores one owner, and the evidence then agrees.
        assert resolve(done) == ("", ""), (e, resolution, done)
        if done.in_pool and not done.never_touch and not (done.slurmd and done.slurm != NONE):
            assert len(owners(done)) == 1, (e, resolution, done)


def test_every_combination_of_the_evidence_gets_exactly_one_resolution() -> None:
    combos = every_evidence()
    assert len(combos) > 5000
    for evidence in combos:
        check_one(evidence)


@given(
    st.builds(
        Evidence,
        journal=st.sampled_from([F, LG, LT, RC, CO]),
        label=st.booleans(),
        taint=st.booleans(),
        slurmd=st.booleans(),
        slurm=st.sampled_from(SLURM_RECORDS[1:]),
        jobs=st.lists(st.integers(1, 99), max_size=3).map(tuple),
        apps=st.lists(st.sampled_from(["a/x", "b/y"]), max_size=2, unique=True).map(tuple),
        in_pool=st.booleans(),
        never_touch=st.booleans(),
        schedulable=st.booleans(),
        slurm_reason=st.sampled_from(["", "hw: ECC", "slurm-operator: scale-in"]),
    )
)
@settings(max_examples=500, deadline=None)
def test_property_one_owner_restoring_resolution(evidence: Evidence) -> None:
    check_one(evidence)


# ---- the evidence read from views -------------------------------------------------------


def slurm_view(states: set[str], reason: str = "", jobs: tuple[int, ...] = ()) -> SlurmNodeView:
    return SlurmNodeView(
        "int01",
        frozenset(states),
        tuple(JobView(j, "backfill") for j in jobs),
        features=frozenset({"interactive"}),
        reason=reason,
    )


@pytest.mark.parametrize(
    ("states", "reason", "record"),
    [
        ({"IDLE"}, "", SlurmRecord.UP),
        ({"ALLOCATED"}, "", SlurmRecord.UP),
        (
            {"IDLE", "DRAIN"},
            "hpcops: orphan: its Kubernetes Node is gone",
            SlurmRecord.DRAINED_OURS,
        ),
        (
            {"IDLE", "DRAIN"},
            "slurm-operator: Pod (slurm/x) is pending termination for scale-in",
            SlurmRecord.DRAINED_OPERATOR,
        ),
        ({"MIXED", "DRAIN"}, "hw: ECC errors", SlurmRecord.DRAINED_ADMIN),
        ({"DOWN", "NOT_RESPONDING"}, "Not responding", SlurmRecord.DOWN),
        ({"IDLE", "NOT_RESPONDING"}, "", SlurmRecord.DOWN),
    ],
)
def test_slurms_record_of_a_node(states: set[str], reason: str, record: str) -> None:
    assert slurm_record(slurm_view(states, reason), MARKERS) == record
    assert slurm_record(None, MARKERS) == SlurmRecord.NONE


def a_node(
    name: str,
    state: str = "free",
    *,
    labels: dict[str, str] | None = None,
    taint: bool = False,
    unschedulable: bool = False,
    **journal: t.Any,
) -> NodeView:
    """The planner tests' node, with our taint and a cordon when asked."""
    return dataclasses.replace(
        node(name, state, labels=labels, **journal),
        unschedulable=unschedulable,
        taints=frozenset({TAINT}) if taint else frozenset(),
    )


def slurmd(node: str) -> PodView:
    return PodView("slurm", f"slurmd-{node}", node=node, slurmd=True)


def app(name: str, node: str) -> PodView:
    return PodView("jupyterhub", name, node=node)


def test_node_view_reads_the_taints() -> None:
    view = node_view(
        {
            "metadata": {"name": "int01", "labels": {**POOL, **LABEL}},
            "spec": {
                "taints": [{"key": "hpcops.io/lent", "value": "slurm", "effect": "NoSchedule"}]
            },
        },
        "hpcops.io/handover",
    )
    assert view.taints == frozenset({TAINT})


def test_reconcile_reads_each_nodes_evidence_and_counts_only_lendable_records() -> None:
    nodes = [
        a_node("int01", labels={**POOL, **LABEL}),  # came back with the label, no journal
        a_node("int02", "lent", labels={**POOL, **LABEL}, taint=True),
        a_node("svc01", labels={"hpcops.io/pool": "services"}),
        a_node("old01", "lent", labels={"hpcops.io/pool": "retired", **LABEL}, taint=True),
    ]
    pods = [slurmd("int01"), slurmd("int02"), app("nb", "int01")]
    slurm = {
        "int01": dataclasses.replace(slurm_view({"ALLOCATED"}, jobs=(7,)), name="int01"),
        "int02": dataclasses.replace(slurm_view({"IDLE"}), name="int02"),
        "svc01": SlurmNodeView("svc01", features=frozenset({"services"})),
    }
    found = reconcile(nodes, pods, slurm, POLICY, MARKERS, ["interactive"])
    # int02 agrees (left out); svc01 is not ours, nor the pool's.
    assert sorted(found) == ["int01", "old01"]
    assert (found["int01"].condition, found["int01"].resolution) == (
        Condition.SLURM_AND_APPS,
        Resolution.RECLAIM,
    )
    assert found["int01"].emergency
    assert found["int01"].evidence.jobs == (7,) and found["int01"].evidence.apps == (
        "jupyterhub/nb",
    )
    assert found["old01"].condition == Condition.LEFT_THE_POOL
    # A record of another NodeSet's feature is not the pool node's.
    free = a_node("int03")
    other = {
        "int03": dataclasses.replace(slurm["int02"], name="int03", features=frozenset({"hpc"}))
    }
    assert reconcile([free], [], other, POLICY, MARKERS, ["interactive"]) == {}
    # Of a lendable NodeSet, the same record is an orphan's.
    assert reconcile([free], [], other, POLICY, MARKERS, ["hpc"])["int03"].condition == (
        Condition.ORPHAN_RECORD
    )


def test_a_stopped_slurmd_pod_that_lingers_after_a_reclaim_is_not_evidence() -> None:
    """A reclaim ends at the kubelet's terminal phase; the pod object goes a moment later."""
    given_back = a_node("int01")
    stopped = dataclasses.replace(slurmd("int01"), phase="Succeeded")
    assert reconcile([given_back], [stopped], {}, POLICY, MARKERS, ["interactive"]) == {}
    rows = status_rows([given_back], [stopped], {}, POLICY, NOW)
    assert rows[0]["slurmd"] is False, rows
    # Still running (Terminating, or the operator's new one), it is what it says.
    assert status_rows([given_back], [slurmd("int01")], {}, POLICY, NOW)[0]["slurmd"] is True
    # A record of the pool's NodeSet beside it: served by slurmd while it runs, an orphan
    # once it has stopped.
    record = {"int01": SlurmNodeView("int01", features=frozenset({"interactive"}))}
    assert (
        reconcile([given_back], [slurmd("int01")], record, POLICY, MARKERS, ["interactive"]) == {}
    )
    found = reconcile([given_back], [stopped], record, POLICY, MARKERS, ["interactive"])
    assert found["int01"].condition == Condition.ORPHAN_RECORD, found


def test_without_the_nodes_marks_the_journal_stands_for_them() -> None:
    lent = a_node("int01", "lent")  # a view built without labels or taints
    assert reconcile([lent], [], {}, POLICY, MARKERS, marks_known=False) == {}
    found = reconcile([lent], [], {}, POLICY, MARKERS)
    assert found["int01"].condition == Condition.JOURNAL_LENT_NO_LABEL


# ---- the planner plans the resolutions --------------------------------------------------


def names(decisions: tuple[object, ...]) -> list[str]:
    return [d.node for d in decisions]  # type: ignore[attr-defined]


def test_the_plan_resolves_conditions_before_new_work_and_never_lends_or_marks_them() -> None:
    """int01 came back with the label, slurmd and a job, and an application pod beside it
    (the emergency); int02 came back with the label and slurmd, nothing else (its lend is
    finished); int03 is free and idle."""
    nodes = [
        a_node("int01", labels={**POOL, **LABEL}),
        a_node("int02", labels={**POOL, **LABEL}),
        a_node("int03"),
    ]
    pods = [slurmd("int01"), slurmd("int02"), app("nb", "int01")]
    slurm = {
        "int01": dataclasses.replace(slurm_view({"ALLOCATED"}, jobs=(7,)), name="int01"),
        "int02": dataclasses.replace(slurm_view({"IDLE"}), name="int02"),
    }
    result = plan(nodes, pods, slurm, POLICY, NOW, markers=MARKERS)
    assert [(m.node, m.condition, m.action, m.emergency) for m in result.reconcile] == [
        ("int01", Condition.SLURM_AND_APPS, Resolution.RECLAIM, True),
        ("int02", Condition.SLURMD_WITHOUT_JOURNAL, Resolution.LEND, False),
    ]
    assert names(result.lend) == ["int03"]
    assert "int01" not in result.idle_marks and "int02" not in result.idle_marks
    assert result.reconcile[0].reason.startswith("slurm_and_apps: journal free, lend label")
    assert [c.node for c in result.conditions] == ["int01", "int02"]
    as_dict = result.as_dict()
    assert as_dict["reconcile"][0]["emergency"] and as_dict["conditions"][1]["resolution"] == "lend"


def test_an_emergency_is_resolved_beyond_max_changes_the_rest_waits() -> None:
    nodes = [
        a_node("int01", "lent", labels={**POOL, **LABEL}, taint=True),
        a_node("int02", "lent", labels=POOL, taint=True),  # lost its label
        a_node("int03", "lent", labels=POOL, taint=True),
        a_node("int04", "reclaiming", labels={**POOL, **LABEL}, taint=True),
    ]
    pods = [slurmd("int01"), app("tolerant", "int01")]
    slurm = {"int01": dataclasses.replace(slurm_view({"MIXED"}, jobs=(9,)), name="int01")}
    policy = dataclasses.replace(POLICY, max_changes_per_run=2)
    result = plan(nodes, pods, slurm, policy, NOW, markers=MARKERS)
    assert names(result.resume) == ["int04"]
    # The resume and the emergency take the run's two changes; the other conditions wait.
    assert names(result.reconcile) == ["int01"]
    waits = {d.node: d.reason for d in result.left_alone}
    assert waits["int03"] == (
        "journal_lent_no_label: its reclaim waits for a later run (max_changes_per_run)"
    )
    three = dataclasses.replace(POLICY, max_changes_per_run=3)
    assert names(plan(nodes, pods, slurm, three, NOW, markers=MARKERS).reconcile) == [
        "int01",
        "int02",
    ]
    # The emergency goes beyond max_changes_per_run, as a resume does.
    one = dataclasses.replace(POLICY, max_changes_per_run=1)
    assert names(plan(nodes, pods, slurm, one, NOW, markers=MARKERS).reconcile) == ["int01"]


def test_a_node_that_left_the_pool_is_shown_and_not_planned() -> None:
    moved = a_node("int01", "lent", labels={"hpcops.io/pool": "batch", **LABEL}, taint=True)
    drained = a_node("int02", "lent", labels={**POOL, **LABEL}, taint=True)
    reason = "slurm-operator: Pod (slurm/slinky-0) is pending termination for scale-in"
    slurm = {
        "int01": dataclasses.replace(slurm_view({"ALLOCATED"}, jobs=(3,)), name="int01"),
        "int02": dataclasses.replace(slurm_view({"IDLE", "DRAIN"}, reason), name="int02"),
    }
    pods = [slurmd("int01"), slurmd("int02")]
    result = plan([moved, drained], pods, slurm, POLICY, NOW, markers=MARKERS)
    reasons = {d.node: d.reason for d in result.left_alone}
    assert reasons["int01"] == "left the pool with our marks on it: reclaim it by name"
    assert [(m.node, m.condition) for m in result.reconcile] == [
        ("int02", Condition.DRAINED_BY_OPERATOR)
    ]
    found = reconcile([moved, drained], pods, slurm, POLICY, MARKERS)
    rows = {
        row["node"]: row for row in status_rows([moved, drained], pods, slurm, POLICY, NOW, found)
    }
    assert rows["int01"]["in_pool"] is False and rows["int01"]["condition"] == "left_the_pool"
    assert rows["int01"]["jobs"] == [3]
    assert rows["int02"]["operator_drain"] == reason
    assert rows["int02"]["condition"] == "drained_by_operator"
    lines = [item["line"] for item in attention([], [], tuple(found.values()), (), MARKERS)]
    assert any(
        line.startswith("node int01: left_the_pool (journal lent")
        and """reclaim.yml -e '{"handover_nodes": ["int01"]}'""" in line
        for line in lines
    ), lines
    assert any(reason in line and "gives it back" in line for line in lines), lines


def test_the_emergency_line_says_what_the_run_does() -> None:
    item = reconcile(
        [a_node("int01", "lent", labels={**POOL, **LABEL}, taint=True)],
        [slurmd("int01"), app("nb", "int01")],
        {"int01": dataclasses.replace(slurm_view({"MIXED"}, jobs=(7,)), name="int01")},
        POLICY,
        MARKERS,
    )["int01"]
    line = condition_line(item, MARKERS)
    assert line.startswith("EMERGENCY node int01: slurm_and_apps (journal lent, lend label")
    assert "job(s) 7 running, application pod(s) jupyterhub/nb" in line
    assert line.endswith(
        "rebalance.yml re-taints it so that no further application pod lands, and its job(s) "
        "keep the partition's grace before the escalation and gives it back to the applications"
    )


def test_admin_drains_say_where_the_reason_is_kept_and_what_to_do() -> None:
    lent = a_node("int01", "lent", labels={**POOL, **LABEL}, taint=True)
    back = a_node("int02", unschedulable=True, admin_drain="hw: ECC errors", last_reclaim=NOW)
    slurm = {"int01": dataclasses.replace(slurm_view({"IDLE", "DRAIN"}, "hw: fan"), name="int01")}
    found = {d["node"]: d["line"] for d in admin_drains([lent, back], slurm, POLICY)}
    assert "scontrol update nodename=int01 state=resume" in found["int01"]
    assert (
        "keeps the reason in the Node's journal (admin_drain) and a Warning Event" in found["int01"]
    )
    assert found["int01"].endswith("gives the node back cordoned, until a person uncordons it")
    assert found["int02"].endswith(
        "uncordon it (kubectl uncordon int02) once it is fit for applications"
    )
