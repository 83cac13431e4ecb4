# SPDX-License-Identifier: GPL-3.0-or-later
"""The policy's partitions against the cluster's (handover_check, before a run's Lease)."""

from __future__ import annotations

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    lendable_partitions,
    policy_partition_refusals,
)

# As slurmrestd returns them (normalize_partition): Slinky's partitions name NodeSet keys.
PARTITIONS = [
    {"name": "batch", "nodes": "hpc", "node_sets": "hpc"},
    {"name": "backfill", "nodes": "burst", "node_sets": "burst"},
    {"name": "all", "nodes": "ALL", "node_sets": ""},
    {"name": "debug", "nodes": "cpu[01,03],burst-x", "node_sets": ""},
]


def test_the_lendable_partitions_are_those_that_name_a_lendable_nodeset_or_all() -> None:
    assert lendable_partitions(PARTITIONS, ["burst"]) == ["all", "backfill"]
    assert lendable_partitions(PARTITIONS, ["burst", "hpc"]) == ["all", "backfill", "batch"]
    assert lendable_partitions(PARTITIONS, []) == ["all"]


def test_a_partition_of_the_lendable_nodesets_passes() -> None:
    assert policy_partition_refusals(["backfill", "all"], PARTITIONS, ["burst"]) == []


def test_a_typo_is_refused_with_the_partition_it_meant() -> None:
    assert policy_partition_refusals(["backfil"], PARTITIONS, ["burst"]) == [
        "handover_policy.partitions.backfil: is not a Slurm partition of the lendable NodeSets "
        "(burst; theirs: all, backfill); did you mean backfill?"
    ]


def test_a_partition_lent_nodes_are_not_in_is_refused_too() -> None:
    (refusal,) = policy_partition_refusals(["batch"], PARTITIONS, ["burst"])
    assert refusal.startswith("handover_policy.partitions.batch: is not a Slurm partition of")
    assert refusal.endswith("name one of those, or leave it out")


def test_without_known_lendable_partitions_every_partition_counts() -> None:
    plain = [{"name": "batch", "nodes": "cpu[01-03]"}, {"name": "backfill", "nodes": "cpu01"}]
    assert policy_partition_refusals(["batch"], plain, ["burst"]) == []
    assert policy_partition_refusals(["bach"], plain, ["burst"]) == [
        "handover_policy.partitions.bach: is not a Slurm partition (the cluster's: backfill, "
        "batch); did you mean batch?"
    ]
    assert policy_partition_refusals(["x"], [], []) == [
        "handover_policy.partitions.x: is not a Slurm partition (the cluster's: none); "
        "name one of those, or leave it out"
    ]
