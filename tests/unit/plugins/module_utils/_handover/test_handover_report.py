# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run summary and its Prometheus metrics (module_utils/_handover/report.py)."""

from __future__ import annotations

import typing as t

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.report import (
    in_users_words,
    metrics_text,
    run_summary,
    summary_line,
    unresolved,
)

# What node_handover returns for a reclaim that freed int01, one blocked by a `wait` job
# (int02), a node that was already free (int03) and a lend of int04.
RECLAIMED = {
    "nodes": [
        {
            "node": "int01",
            "result": "free",
            "steps": ["journal", "drain", "drained", "unlabel", "pod_gone", "free"],
            "seconds": 1.84,
        },
        {
            "node": "int02",
            "result": "blocked",
            "steps": ["journal", "drain"],
            "message": "jobs 41 of partition long (escalation wait) still run",
            "seconds": 0.4,
        },
        {"node": "int03", "result": "free", "steps": [], "message": "not lent", "seconds": 0.01},
    ]
}
LENT = {
    "nodes": [
        {"node": "int04", "result": "lent", "steps": ["taint", "recheck", "label", "registered"]},
        {"node": "int05", "result": "lent", "steps": [], "message": "already lent"},
    ]
}
POOL = [
    {"node": "int01", "journal": "free"},
    {"node": "int02", "journal": "reclaiming"},
    {"node": "int03", "journal": "free"},
    {"node": "int04", "journal": "lent"},
    {"node": "int05", "journal": "lent"},
]


def summary(**overrides: t.Any) -> dict[str, t.Any]:
    args: dict[str, t.Any] = {
        "run_id": "mgmt01-0a1b2c3d",
        "started": 1_790_000_000.0,
        "finished": 1_790_000_004.25,
        "handovers": [None, RECLAIMED, LENT],
        "lease": {"acquired": True, "holder": "mgmt01-0a1b2c3d"},
        "pool": POOL,
    }
    args.update(overrides)
    return run_summary(**args)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, sorted labels) -> value, parsed by Prometheus' own client parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_the_summary_counts_what_the_run_did_not_where_nodes_were() -> None:
    got = summary()
    assert got["returned"] == ["int01"]  # int03 was already free: not counted
    assert got["lent"] == ["int04"]  # int05 was already lent: not counted
    assert got["blocked"] == ["int02"]
    assert got["blocked_reasons"] == {
        "int02": "jobs 41 of partition long (escalation wait) still run"
    }
    assert got["reclaim_seconds"] == {"int01": 1.84}
    assert got["pool"] == {"free": 2, "lending": 0, "lent": 2, "reclaiming": 1}
    assert got["duration_s"] == 4.25
    assert got["acted"] and got["success"] and got["errors"] == []


def test_failed_nodes_and_the_run_error_are_errors() -> None:
    failed = {
        "nodes": [{"node": "int06", "result": "failed", "message": "slurmd did not register"}],
        "failed": True,
    }
    got = summary(handovers=[failed], errors=["", "Lend idle nodes to Slurm: 1 node failed"])
    assert not got["success"]
    assert got["errors"] == [
        "Lend idle nodes to Slurm: 1 node failed",
        "int06: slurmd did not register",
    ]
    assert "errors: Lend idle nodes" in summary_line(got)


def test_a_run_that_found_the_lease_held_says_who_has_it() -> None:
    got = summary(handovers=[], lease={"acquired": False, "holder": "cronjob-29412-abc"})
    assert not got["acted"] and got["lease_holder"] == "cronjob-29412-abc"
    assert summary_line(got) == "changed nothing: cronjob-29412-abc holds the Lease"
    assert samples(metrics_text(got))[("hpcops_slinky_handover_last_run_acted", ())] == 0


def test_a_run_that_failed_before_the_lease_did_not_act() -> None:
    got = summary(handovers=[], lease={}, pool=None, errors=["Read the token Secret: 403"])
    assert not got["acted"] and not got["success"]
    assert got["outcome"] == "failed"
    assert got["pool_nodes"] is None and got["pool"] is None
    assert summary_line(got) == "changed nothing; errors: Read the token Secret: 403"


def test_a_pool_that_could_not_be_read_is_unknown_not_empty() -> None:
    got = summary(pool=None, warnings=["the pool could not be read after the run: 502"])
    assert got["pool"] is None and got["pool_nodes"] is None
    assert "(pool: unknown); warnings: the pool could not be read" in summary_line(got)
    assert got["success"] and got["outcome"] == "blocked"  # the run's own result stands
    assert "(pool: empty)" in summary_line(summary(pool=[]))
    # No pool samples at all, rather than zeros that would read as an empty pool.
    assert not [k for k in samples(metrics_text(got)) if k[0].endswith("_pool_nodes")]


@pytest.mark.parametrize(
    ("action", "requested", "handovers", "lease", "errors", "outcome"),
    [
        ("reclaim", ["int01"], [{"nodes": RECLAIMED["nodes"][:1]}], None, [], "done"),
        ("reclaim", ["int01", "int02"], [RECLAIMED], None, [], "blocked"),
        ("lend", ["int04", "int05"], [LENT], None, [], "done"),
        ("lend", ["int04", "int09"], [LENT], None, [], "incomplete"),
        (
            "lend",
            ["int07"],
            [{"nodes": [{"node": "int07", "result": "rolled_back", "steps": ["taint", "free"]}]}],
            None,
            [],
            "incomplete",
        ),
        ("reclaim", ["int01"], [RECLAIMED], None, ["Reclaim: 502"], "failed"),
        ("reclaim", ["int01"], [], {"acquired": False, "holder": "cron-1"}, [], "lease_held"),
        ("rebalance", [], [], {"acquired": False, "holder": "cron-1"}, [], "lease_held"),
        ("rebalance", [], [LENT], None, [], "done"),
    ],
)
def test_the_outcome_says_whether_the_run_did_what_it_was_asked(
    action: str,
    requested: list[str],
    handovers: list[t.Any],
    lease: t.Any,
    errors: list[str],
    outcome: str,
) -> None:
    got = summary(
        action=action, requested=requested, handovers=handovers, lease=lease, errors=errors
    )
    assert got["outcome"] == outcome
    assert got["action"] == action and got["requested"] == requested


def test_the_summary_lists_where_each_node_ended() -> None:
    assert summary()["nodes"] == {
        "int01": "free",
        "int02": "blocked",
        "int03": "free",
        "int04": "lent",
        "int05": "lent",
    }


def test_the_line_says_what_changed() -> None:
    assert summary_line(summary()) == (
        "1 lent; 1 returned; 1 blocked; slowest reclaim 1.8 s in 4.2 s "
        "(pool: 2 free, 2 lent, 1 reclaiming)"
    )


def test_the_metrics_parse_as_prometheus_text_and_carry_the_figures() -> None:
    text = metrics_text(summary(), cluster="site-a")
    got = samples(text)
    site = (("cluster", "site-a"),)

    def value(name: str, **labels: str) -> float:
        return got[
            (f"hpcops_slinky_handover_{name}", tuple(sorted({**dict(site), **labels}.items())))
        ]

    assert value("last_run_timestamp_seconds") == 1_790_000_004.25
    assert value("last_run_duration_seconds") == 4.25
    assert value("last_run_success") == 1
    assert value("last_run_nodes", result="returned") == 1
    assert value("last_run_nodes", result="lent") == 1
    assert value("last_run_nodes", result="failed") == 0
    assert value("reclaim_seconds", node="int01") == 1.84
    assert value("last_run_reclaim_max_seconds") == 1.84
    assert value("pool_nodes", state="lent") == 2
    assert value("blocked_nodes") == 1
    # Every sample has its HELP and TYPE; the text ends with a newline as the format asks.
    assert text.endswith("\n")
    assert text.count("# TYPE ") == text.count("# HELP ") == 13


@pytest.mark.parametrize("cluster", ['a"b', "a\\b", "a\nb"])
def test_label_values_are_escaped(cluster: str) -> None:
    got = samples(metrics_text(summary(), cluster=cluster))
    assert got[("hpcops_slinky_handover_blocked_nodes", (("cluster", cluster),))] == 1


def test_without_reclaims_the_slowest_is_zero_and_no_node_series() -> None:
    text = metrics_text(summary(handovers=[LENT]))
    got = samples(text)
    assert got[("hpcops_slinky_handover_last_run_reclaim_max_seconds", ())] == 0
    assert not [key for key in got if key[0] == "hpcops_slinky_handover_reclaim_seconds"]


EVENT = {
    "trigger": "demand",
    "reason": "2 unschedulable application pod(s): jupyterhub/nb-a, jupyterhub/nb-b",
    "pods": ["jupyterhub/nb-a", "jupyterhub/nb-b"],
    "nodes": [],
    "at": "2026-11-25T03:00:00.000000Z",
}


SLURM_EVENT = {
    "trigger": "slurm_demand",
    "reason": "2 job(s) waiting in Slurm that 1 idle pool node(s) would start: 41, 42",
    "pods": [],
    "nodes": ["int01"],
    "jobs": [41, 42],
    "at": "2026-11-25T03:00:00.000000Z",
}


@pytest.mark.parametrize(
    ("given", "by"),
    [
        (None, "manual"),
        ("timer", "timer"),
        ("cron", "manual"),
        (EVENT, "demand"),
        (SLURM_EVENT, "slurm_demand"),
        ({}, "manual"),
    ],
)
def test_the_summary_says_what_started_the_run(given: t.Any, by: str) -> None:
    got = summary(trigger=given)
    assert got["trigger"]["by"] == by
    trigger = samples(metrics_text(got))
    started = {
        dict(labels)["trigger"]: value
        for (name, labels), value in trigger.items()
        if name == "hpcops_slinky_handover_last_run_trigger"
    }
    assert started == {
        name: float(name == by) for name in ("manual", "timer", "demand", "slurm_demand", "idle")
    }


def test_an_events_run_names_its_event_in_the_line() -> None:
    got = summary(trigger=EVENT)
    assert got["trigger"]["pods"] == EVENT["pods"] and got["trigger"]["at"] == EVENT["at"]
    assert summary_line(got).endswith(
        "; on demand: 2 unschedulable application pod(s): jupyterhub/nb-a, jupyterhub/nb-b"
    )
    assert "on " not in summary_line(summary(trigger="timer"))


def test_a_run_on_slurms_demand_names_the_jobs() -> None:
    got = summary(trigger=SLURM_EVENT)
    assert got["trigger"]["jobs"] == [41, 42] and got["trigger"]["nodes"] == ["int01"]
    assert summary_line(got).endswith(
        "; on slurm_demand: 2 job(s) waiting in Slurm that 1 idle pool node(s) would start: 41, 42"
    )
    assert summary(trigger="timer")["trigger"]["jobs"] == []


def test_every_node_warning_and_admin_drain_is_in_the_summary() -> None:
    """What node_handover warned about is recorded, not only printed."""
    drained = {
        "nodes": [
            {
                "node": "int01",
                "result": "free",
                "steps": ["journal", "drain", "drained", "unlabel", "pod_gone", "free"],
                "warnings": [
                    "slurmrestd refused the connection; retrying in 1 s",
                    "Slurm node int01 was drained by someone else (root): 'hw: ECC errors'; "
                    "the drain stays, and the reclaim gives the node back cordoned",
                ],
                "admin_drain": "hw: ECC errors",
            }
        ]
    }
    got = summary(handovers=[drained], warnings=["the pool could not be read after the run: 502"])
    assert got["admin_drains"] == {"int01": "hw: ECC errors"}
    assert got["warnings"] == [
        "int01: slurmrestd refused the connection; retrying in 1 s",
        "int01: Slurm node int01 was drained by someone else (root): 'hw: ECC errors'; the "
        "drain stays, and the reclaim gives the node back cordoned",
        "the pool could not be read after the run: 502",
    ]
    assert "warnings: int01: slurmrestd refused" in summary_line(got)
    assert summary()["admin_drains"] == {}


def test_a_rebalance_that_cleans_an_orphan_says_so_and_records_its_attention_lines() -> None:
    """Not "done: no change" when the run drained an orphaned Slurm node."""
    orphans = {"nodes": [{"node": "int09", "result": "draining", "steps": ["drain"]}]}
    attention = ["orphan int09: Slurm node of a deleted lent Node; drained, removed once idle"]
    got = summary(
        handovers=[orphans], action="rebalance", requested=[], pool=[], attention=attention
    )
    assert got["draining"] == ["int09"] and got["removed"] == []
    assert got["warnings"] == attention
    line = summary_line(got)
    assert line.startswith("1 orphaned Slurm node(s) draining in 4.2 s"), line
    assert "no change" not in line


def test_a_failed_node_without_a_message_is_still_an_error() -> None:
    summary = run_summary(
        run_id="r",
        started=0.0,
        finished=1.0,
        handovers=[{"nodes": [{"node": "int01", "result": "failed", "message": ""}]}],
        lease={"acquired": True},
        pool=[],
    )
    assert summary["errors"] == ["int01: failed without a message"]
    assert summary["outcome"] == "failed"


# ---- nodes whose evidence disagreed (reconcile) ------------------------------------------

CONDITIONS = [
    {"node": "int01", "condition": "slurm_and_apps", "emergency": True},
    {"node": "int06", "condition": "journal_lent_no_label", "emergency": False},
    {"node": "int07", "condition": "left_the_pool", "emergency": False},
]


def test_an_emergency_leads_the_line_with_where_the_run_left_it_and_is_a_metric() -> None:
    got = summary(conditions=CONDITIONS)
    assert got["conditions"] == {
        "int01": "slurm_and_apps",
        "int06": "journal_lent_no_label",
        "int07": "left_the_pool",
    }
    assert got["emergencies"] == ["int01"]
    line = summary_line(got)
    assert line.startswith(
        "EMERGENCY slurm_and_apps on int01 (given back); 2 disagreement(s): int06 "
        "journal_lent_no_label (left for a person or a later run), int07 left_the_pool (left "
        "for a person or a later run); "
    ), line
    found = samples(metrics_text(got))
    assert found[("hpcops_slinky_handover_emergency_nodes", ())] == 1
    condition = "hpcops_slinky_handover_conditions"
    assert found[(condition, (("condition", "slurm_and_apps"),))] == 1
    assert found[(condition, (("condition", "left_the_pool"),))] == 1
    assert found[(condition, (("condition", "orphan_record"),))] == 0
    # A run that resolved a condition and nothing else is no "no change".
    quiet = summary(handovers=[], conditions=CONDITIONS[1:2])
    assert "no change" not in summary_line(quiet)


def test_settings_are_named_as_the_user_wrote_them() -> None:
    names = {"lease.wait_s": "handover_lease_wait_s", "lend_timeout_s": "handover_lend_timeout_s"}
    text = "waited 0 s, lease.wait_s; slurmd did not register within lend_timeout_s 120"
    assert in_users_words(text, names) == (
        "waited 0 s, handover_lease_wait_s; slurmd did not register within "
        "handover_lend_timeout_s 120"
    )
    # Already the user's name, or a longer name that holds it: left alone.
    assert in_users_words("handover_lend_timeout_s", names) == "handover_lend_timeout_s"
    assert in_users_words("x.lend_timeout_s", names) == "x.lend_timeout_s"
    assert in_users_words("", names) == "" and in_users_words("lend_timeout_s", {}) == (
        "lend_timeout_s"
    )


def test_a_line_of_attention_about_a_node_the_run_handed_over_is_not_repeated() -> None:
    items = [
        {"node": "int01", "condition": "slurm_and_apps", "line": "EMERGENCY node int01: ..."},
        {"node": "int01", "condition": "apps_on_lent_node", "line": "application pod a/b ..."},
        {"node": "int02", "condition": "left_the_pool", "line": "node int02: left_the_pool"},
        {"node": "int03", "condition": "journal_lent_no_label", "line": "node int03: ..."},
    ]
    handovers = [
        {"nodes": [{"node": "int01", "result": "free", "steps": ["journal"], "changed": True}]},
        {"nodes": [{"node": "int03", "result": "failed", "steps": [], "changed": False}]},
    ]
    assert unresolved(items, handovers) == [
        "application pod a/b ...",  # the workload's toleration is a person's to fix
        "node int02: left_the_pool",
        "node int03: ...",  # its handover failed: still needed
    ]
