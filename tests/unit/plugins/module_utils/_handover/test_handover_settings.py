# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover role's settings, checked up front: each problem names the variable and the fix."""

from __future__ import annotations

import copy
import typing as t

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.hpcops.slinky.plugins.filter.handover import (
    FilterModule,
    handover_settings_problems,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    ESCALATIONS,
    PartitionPolicy,
    Policy,
    PolicyError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    POLICY_SPEC,
    policy_from_params,
    settings_problems,
)

# roles/handover/defaults/main.yml after templating (grace_s is templated text).
DEFAULTS: dict[str, t.Any] = {
    "pool_selector": {"hpcops.io/pool": "interactive"},
    "never_touch_selector": {"hpcops.io/never-touch": "true"},
    "headroom": 1,
    "max_lent_fraction": 1.0,
    "lend_min_idle_s": 600,
    "relend_cooldown_s": 1800,
    "max_changes_per_run": 8,
    "partitions": {"backfill": {"grace_s": "300", "escalation": "requeue"}},
    "default_escalation": "requeue",
    "default_grace_s": 300,
}
LAB_POLICY: dict[str, t.Any] = {
    "pool_selector": {"hpcops.io/pool": "interactive"},
    "never_touch_selector": {"nvidia.com/gpu.present": "true"},
    "lend_min_idle_s": 0,
    "relend_cooldown_s": 0,
    "headroom": 0,
    "partitions": {"backfill": {"grace_s": 60, "escalation": "requeue"}},
}
ROLE_NUMBERS: dict[str, t.Any] = {
    "handover_lend_timeout_s": 120,
    "handover_pod_timeout_s": 30,
    "handover_max_parallel": 8,
    "handover_shared_reads_from": 4,
    "handover_lease_duration_s": 900,
    "handover_lease_wait_s": 0,
}
VARIABLES = (
    "handover_policy",
    "handover_policy_defaults",
    "handover_nodes",
    *ROLE_NUMBERS,
)


def problems_of(policy: t.Any = None, **variables: t.Any) -> list[str]:
    """The problems of the lab's settings with `policy` as handover_policy and `variables`."""
    return settings_problems(
        {
            "handover_policy": LAB_POLICY if policy is None else policy,
            "handover_policy_defaults": DEFAULTS,
            "handover_nodes": ["int01", "int02"],
            **ROLE_NUMBERS,
            **variables,
        }
    )


# ---- settings that work ---------------------------------------------------------------


def test_the_lab_settings_have_no_problem() -> None:
    assert problems_of() == []


def test_the_role_defaults_alone_have_no_problem() -> None:
    assert problems_of({}) == []


def test_variables_left_out_are_not_checked() -> None:
    assert settings_problems({}) == []
    assert settings_problems({"handover_nodes": ["int01"]}) == []


def test_what_the_modules_convert_is_accepted() -> None:
    policy = {
        **LAB_POLICY,
        "pool_selector": "hpcops.io/pool=interactive",  # key=value text, as for a dict option
        "headroom": "2",
        "max_lent": "3",
        "max_lent_fraction": "0.5",
        "lend_min_idle_s": 30.0,  # a float without a fraction, as for an int option
        "max_changes_per_run": " 4 ",
        "demand_namespaces": "apps,jobs",  # comma-separated text, as for a list option
        "demand_selector": '{"hpcops.io/demand": "true"}',
        "partitions": {"backfill": {"grace_s": "60"}, "batch": {}},
        "default_grace_s": "120",
    }
    numbers = {name: str(value) for name, value in ROLE_NUMBERS.items()}
    assert problems_of(policy, **numbers) == []


def test_max_lent_may_be_null_for_no_limit() -> None:
    assert problems_of({**LAB_POLICY, "max_lent": None}) == []


def test_the_edges_of_the_ranges_are_accepted() -> None:
    policy = {
        **LAB_POLICY,
        "max_lent": 0,
        "max_lent_fraction": 0,
        "max_changes_per_run": 1,
        "partitions": {"backfill": {"grace_s": 0, "escalation": "wait"}},
        "default_grace_s": 0,
        "default_escalation": "cancel",
    }
    numbers = {
        "handover_lend_timeout_s": 0.1,
        "handover_pod_timeout_s": 0.1,
        "handover_max_parallel": 1,
        "handover_shared_reads_from": 0,
        "handover_lease_duration_s": 1,
        "handover_lease_wait_s": 0,
    }
    assert problems_of(policy, **numbers) == []


# ---- every policy setting: a wrong type, and a wrong value ------------------------------

WRONG_TYPES: dict[str, tuple[t.Any, str]] = {
    "pool_selector": (
        ["hpcops.io/pool"],
        "handover_policy.pool_selector: ['hpcops.io/pool'] is not a mapping; give labels, "
        "for example {hpcops.io/pool: interactive}",
    ),
    "never_touch_selector": (
        "never-touch",
        "handover_policy.never_touch_selector: 'never-touch' is not a mapping; give labels, "
        "for example {hpcops.io/never-touch: 'true'}",
    ),
    "headroom": (
        "two",
        "handover_policy.headroom: 'two' is not a whole number; give a number of nodes, "
        "for example 2",
    ),
    "max_lent": (
        "all",
        "handover_policy.max_lent: 'all' is not a whole number; give a number of nodes, "
        "for example 4, or null for no limit",
    ),
    "max_lent_fraction": (
        "half",
        "handover_policy.max_lent_fraction: 'half' is not a number; give a fraction of the "
        "pool, for example 0.5",
    ),
    "lend_min_idle_s": (
        1.5,
        "handover_policy.lend_min_idle_s: 1.5 is not a whole number; give seconds, for example 600",
    ),
    "relend_cooldown_s": (
        True,
        "handover_policy.relend_cooldown_s: True is not a whole number; give seconds, for "
        "example 1800",
    ),
    "max_changes_per_run": (
        None,
        "handover_policy.max_changes_per_run: None is not a whole number; give a number of "
        "nodes, for example 8",
    ),
    "demand_namespaces": (
        {"apps": 1},
        "handover_policy.demand_namespaces: {'apps': 1} is not a list; give namespace names, "
        "for example [apps]",
    ),
    "demand_selector": (
        5,
        "handover_policy.demand_selector: 5 is not a mapping; give labels, for example "
        "{hpcops.io/demand: 'true'}",
    ),
    "system_namespaces": (
        None,
        "handover_policy.system_namespaces: None is not a list; give namespace names, for "
        "example [apps]",
    ),
    "partitions": (
        ["backfill"],
        "handover_policy.partitions: ['backfill'] is not a mapping; give partitions by name, "
        "for example {backfill: {grace_s: 300, escalation: requeue}}",
    ),
    "default_escalation": (
        3,
        "handover_policy.default_escalation: 3 is not a known escalation; use one of "
        "requeue, cancel, wait",
    ),
    "default_grace_s": (
        "soon",
        "handover_policy.default_grace_s: 'soon' is not a whole number; give seconds, for "
        "example 300",
    ),
    "admin_drain": (
        True,
        "handover_policy.admin_drain: True is not a known choice; use one of cordon, return",
    ),
    "lend_when": (
        ["demand"],
        "handover_policy.lend_when: ['demand'] is not a known choice; use one of idle, demand",
    ),
    "demand_headroom": (
        "one",
        "handover_policy.demand_headroom: 'one' is not a whole number; give a number of "
        "nodes, for example 1",
    ),
    "demand_return_idle_s": (
        "soon",
        "handover_policy.demand_return_idle_s: 'soon' is not a whole number; give seconds, "
        "for example 1800, or null to keep lent nodes",
    ),
}

WRONG_VALUES: dict[str, tuple[t.Any, str]] = {
    "pool_selector": (
        {},
        "handover_policy.pool_selector: is empty; give the labels of the lendable pool's nodes",
    ),
    "never_touch_selector": (
        {"nvidia.com/gpu.present": True},
        "handover_policy.never_touch_selector['nvidia.com/gpu.present']: True is a boolean, "
        "not a string; quote it: 'true'",
    ),
    "headroom": (-1, "handover_policy.headroom: -1 is negative; give 0 or more"),
    "max_lent": (
        "-2",
        "handover_policy.max_lent: -2 is negative; give a count, or none for no limit",
    ),
    "max_lent_fraction": (
        1.5,
        "handover_policy.max_lent_fraction: 1.5 is not between 0 and 1; for example 0.5",
    ),
    "lend_min_idle_s": (-60, "handover_policy.lend_min_idle_s: -60 is negative; give 0 or more"),
    "relend_cooldown_s": (
        "-1",
        "handover_policy.relend_cooldown_s: -1 is negative; give 0 or more",
    ),
    "max_changes_per_run": (
        0,
        "handover_policy.max_changes_per_run: 0 is below 1; give 1 or more",
    ),
    "demand_namespaces": (
        ["apps", "Jobs"],
        "handover_policy.demand_namespaces[1]: 'Jobs' is not a namespace name; give at most "
        "63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    ),
    "demand_selector": (
        {"hpcops.io/demand": 1},
        "handover_policy.demand_selector['hpcops.io/demand']: 1 is a number, not a string; "
        "quote it: '1'",
    ),
    "system_namespaces": (
        ["kube-system", 7],
        "handover_policy.system_namespaces[1]: 7 is not a string; give a namespace name",
    ),
    "partitions": (
        {"backfill": {"grace_s": 60, "escalation": "kill"}},
        "handover_policy.partitions.backfill.escalation: 'kill' is not a known escalation; "
        "use one of requeue, cancel, wait",
    ),
    "default_escalation": (
        "kill",
        "handover_policy.default_escalation: 'kill' is not a known escalation; use one of "
        "requeue, cancel, wait",
    ),
    "default_grace_s": (-5, "handover_policy.default_grace_s: -5 is negative; give 0 or more"),
    "admin_drain": (
        "keep",
        "handover_policy.admin_drain: 'keep' is not a known choice; use one of cordon, return",
    ),
    "lend_when": (
        "always",
        "handover_policy.lend_when: 'always' is not a known choice; use one of idle, demand",
    ),
    "demand_headroom": (
        -1,
        "handover_policy.demand_headroom: -1 is negative; give 0 or more",
    ),
    "demand_return_idle_s": (
        -60,
        "handover_policy.demand_return_idle_s: -60 is negative; give 0 or more",
    ),
}


def test_every_policy_setting_is_covered() -> None:
    assert set(WRONG_TYPES) == set(WRONG_VALUES) == set(POLICY_SPEC)


@pytest.mark.parametrize(("key", "value", "message"), [(k, *v) for k, v in WRONG_TYPES.items()])
def test_a_wrong_type_names_the_setting_and_the_fix(key: str, value: t.Any, message: str) -> None:
    assert problems_of({**LAB_POLICY, key: value}) == [message]


@pytest.mark.parametrize(("key", "value", "message"), [(k, *v) for k, v in WRONG_VALUES.items()])
def test_a_wrong_value_names_the_setting_and_the_fix(key: str, value: t.Any, message: str) -> None:
    assert problems_of({**LAB_POLICY, key: value}) == [message]


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            {"hpcops.io/pool": "interactive", "bad key!": "x"},
            "handover_policy.pool_selector: 'bad key!' is not a label key; give an optional "
            "DNS prefix and '/', then at most 63 letters, digits, '-', '_' and '.', as in "
            "{hpcops.io/pool: interactive}",
        ),
        (
            {"Bad_Prefix/pool": "interactive"},
            "handover_policy.pool_selector: 'Bad_Prefix/pool' is not a label key",
        ),
        (
            {1: "interactive"},
            "handover_policy.pool_selector: 1 is not a label key",
        ),
        (
            {"hpcops.io/pool": "inter active"},
            "handover_policy.pool_selector['hpcops.io/pool']: 'inter active' is not a label "
            "value; give at most 63 letters",
        ),
        (
            {"hpcops.io/pool": ["interactive"]},
            "handover_policy.pool_selector['hpcops.io/pool']: ['interactive'] is not a label "
            "value; give a quoted string",
        ),
        (
            {"hpcops.io/pool": 1.5},
            "handover_policy.pool_selector['hpcops.io/pool']: 1.5 is a number, not a string; "
            "quote it: '1.5'",
        ),
        (
            {"hpcops.io/pool": False},
            "handover_policy.pool_selector['hpcops.io/pool']: False is a boolean, not a "
            "string; quote it: 'false'",
        ),
        (None, "handover_policy.pool_selector: None is not a mapping"),
    ],
)
def test_a_selector_is_labels_and_their_string_values(selector: t.Any, message: str) -> None:
    problems = problems_of({**LAB_POLICY, "pool_selector": selector})
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_an_empty_label_value_is_a_label_value() -> None:
    assert problems_of({**LAB_POLICY, "demand_selector": {"hpcops.io/demand": ""}}) == []


@pytest.mark.parametrize(
    ("partitions", "message"),
    [
        (
            {"backfill": {"grace": 60, "escalation": "requeue"}},
            "handover_policy.partitions.backfill.grace: is not a partition setting; give "
            "grace_s and escalation",
        ),
        (
            {"backfill": "requeue"},
            "handover_policy.partitions.backfill: 'requeue' is not a mapping of grace_s and "
            "escalation; for example {grace_s: 300, escalation: requeue}",
        ),
        (
            {"backfill": {"grace_s": "a minute"}},
            "handover_policy.partitions.backfill.grace_s: 'a minute' is not a whole number; "
            "give seconds, for example 300",
        ),
        (
            {"backfill": {"grace_s": -1}},
            "handover_policy.partitions.backfill.grace_s: -1 is negative; give 0 or more",
        ),
        (
            {"backfill": {"escalation": None}},
            "handover_policy.partitions.backfill.escalation: None is not a known escalation; "
            "use one of requeue, cancel, wait",
        ),
    ],
)
def test_a_partition_is_grace_s_and_escalation(partitions: t.Any, message: str) -> None:
    assert problems_of({**LAB_POLICY, "partitions": partitions}) == [message]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "lend_min_idel_s",
            "handover_policy.lend_min_idel_s: is not a policy setting; did you mean "
            "lend_min_idle_s?",
        ),
        ("headrom", "handover_policy.headrom: is not a policy setting; did you mean headroom?"),
        (
            "colour",
            "handover_policy.colour: is not a policy setting; use one of " + ", ".join(POLICY_SPEC),
        ),
        (
            7,
            "handover_policy.7: is not a policy setting; use one of " + ", ".join(POLICY_SPEC),
        ),
    ],
)
def test_an_unknown_setting_is_named_with_the_known_ones(key: t.Any, message: str) -> None:
    assert problems_of({**LAB_POLICY, key: 1}) == [message]


def test_a_policy_that_is_not_a_mapping_stops_the_policy_checks() -> None:
    broken_defaults = {**DEFAULTS, "headroom": -1}
    assert settings_problems(
        {"handover_policy": "headroom=2", "handover_policy_defaults": broken_defaults}
    ) == ["handover_policy: give a mapping of policy settings, for example {headroom: 2}"]
    assert problems_of(["headroom"], handover_nodes=[""]) == [
        "handover_policy: give a mapping of policy settings, for example {headroom: 2}",
        "handover_nodes[0]: '' is empty; give a Kubernetes node name",
    ]


def test_a_missing_pool_selector_is_reported_once() -> None:
    assert settings_problems({"handover_policy": {"headroom": 2}}) == [
        "handover_policy.pool_selector: is missing; give the labels of the lendable pool's "
        "nodes, for example {hpcops.io/pool: interactive}"
    ]


def test_every_problem_is_reported_not_only_the_first() -> None:
    policy = {
        **LAB_POLICY,
        "headroom": -1,
        "max_changes_per_run": 0,
        "max_lent_fraction": 1.5,
        "lend_min_idle_s": "x",
        "partitions": {
            "backfill": {"grace_s": -1, "escalation": "kill"},
            "batch": {"grace_s": -2},
        },
    }
    assert problems_of(policy, handover_nodes="int01", handover_max_parallel=0) == [
        "handover_policy.lend_min_idle_s: 'x' is not a whole number; give seconds, for example 600",
        "handover_policy.partitions.backfill.escalation: 'kill' is not a known escalation; "
        "use one of requeue, cancel, wait",
        "handover_policy.headroom: -1 is negative; give 0 or more",
        "handover_policy.max_changes_per_run: 0 is below 1; give 1 or more",
        "handover_policy.max_lent_fraction: 1.5 is not between 0 and 1; for example 0.5",
        "handover_policy.partitions.backfill.grace_s: -1 is negative; give 0 or more",
        "handover_policy.partitions.batch.grace_s: -2 is negative; give 0 or more",
        "handover_nodes: give a list of Kubernetes node names, for example [int01, int02]",
        "handover_max_parallel: 0 is below 1; give a number of nodes, for example 8",
    ]


# ---- the defaults and the user's settings --------------------------------------------------


def test_a_broken_default_is_named_where_it_lives() -> None:
    defaults = {
        **DEFAULTS,
        "headroom": -1,
        "partitions": {"backfill": {"grace_s": "300", "escalation": "kill"}},
        "max_lent_fraction": "most",
        "lend_min_idel_s": 5,
    }
    assert settings_problems(
        {"handover_policy": {"relend_cooldown_s": -1}, "handover_policy_defaults": defaults}
    ) == [
        "handover_policy_defaults.max_lent_fraction: 'most' is not a number; give a fraction "
        "of the pool, for example 0.5",
        "handover_policy_defaults.partitions.backfill.escalation: 'kill' is not a known "
        "escalation; use one of requeue, cancel, wait",
        "handover_policy_defaults.lend_min_idel_s: is not a policy setting; did you mean "
        "lend_min_idle_s?",
        "handover_policy_defaults.headroom: -1 is negative; give 0 or more",
        "handover_policy.relend_cooldown_s: -1 is negative; give 0 or more",
    ]


def test_a_setting_given_replaces_the_default_whole() -> None:
    defaults = {
        **DEFAULTS,
        "headroom": -1,
        "partitions": {"backfill": {"grace_s": -1, "escalation": "kill"}},
    }
    policy = {"headroom": 2, "partitions": {"batch": {"grace_s": 30}}}
    assert (
        settings_problems({"handover_policy": policy, "handover_policy_defaults": defaults}) == []
    )


def test_the_default_partition_is_named_by_its_settings() -> None:
    defaults = {**DEFAULTS, "default_grace_s": -1}
    assert settings_problems({"handover_policy": {}, "handover_policy_defaults": defaults}) == [
        "handover_policy_defaults.default_grace_s: -1 is negative; give 0 or more"
    ]


def test_defaults_that_are_not_a_mapping() -> None:
    assert settings_problems(
        {"handover_policy": LAB_POLICY, "handover_policy_defaults": "headroom=1"}
    ) == [
        "handover_policy_defaults: 'headroom=1' is not a mapping; give a mapping of policy "
        "settings, as in the role's defaults"
    ]


# ---- handover_nodes ---------------------------------------------------------------------


@pytest.mark.parametrize("nodes", ["int01", "int01,int02", {"int01": 1}, None, 3])
def test_nodes_must_be_a_list(nodes: t.Any) -> None:
    assert problems_of(handover_nodes=nodes) == [
        "handover_nodes: give a list of Kubernetes node names, for example [int01, int02]"
    ]


def test_each_node_is_one_kubernetes_node_name() -> None:
    nodes = ["int01", "", 3, "int01", "Int02", "-int03", "int03.", "a" * 254, "node.lab-1", None]
    assert problems_of(handover_nodes=nodes) == [
        "handover_nodes[1]: '' is empty; give a Kubernetes node name",
        "handover_nodes[2]: 3 is not a string; give a Kubernetes node name",
        "handover_nodes[3]: int01 is named twice; name each node once",
        *(
            f"handover_nodes[{index}]: {name!r} is not a Kubernetes node name; give lowercase "
            "letters, digits, '-' and '.', starting and ending with a letter or digit, at most "
            "253 characters"
            for index, name in ((4, "Int02"), (5, "-int03"), (6, "int03."))
        ),
        f"handover_nodes[7]: '{'a' * 56}... is not a Kubernetes node name; give lowercase "
        "letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 "
        "characters",
        "handover_nodes[9]: None is not a string; give a Kubernetes node name",
    ]


def test_a_node_name_of_253_characters_is_a_node_name() -> None:
    name = ".".join(["a" * 63] * 4)[:253]
    assert len(name) == 253 and problems_of(handover_nodes=[name]) == []


# ---- the role's timings and counts --------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "handover_lend_timeout_s",
            "2m",
            "handover_lend_timeout_s: '2m' is not a number; give seconds, for example 120",
        ),
        (
            "handover_lend_timeout_s",
            0,
            "handover_lend_timeout_s: 0 is not above 0; give seconds, for example 120",
        ),
        (
            "handover_pod_timeout_s",
            False,
            "handover_pod_timeout_s: False is not a number; give seconds, for example 30",
        ),
        (
            "handover_pod_timeout_s",
            "-0.5",
            "handover_pod_timeout_s: -0.5 is not above 0; give seconds, for example 30",
        ),
        (
            "handover_max_parallel",
            2.5,
            "handover_max_parallel: 2.5 is not a whole number; give a number of nodes, for "
            "example 8",
        ),
        (
            "handover_max_parallel",
            "0",
            "handover_max_parallel: 0 is below 1; give a number of nodes, for example 8",
        ),
        (
            "handover_shared_reads_from",
            [4],
            "handover_shared_reads_from: [4] is not a whole number; give a number of nodes, or "
            "0 to never share",
        ),
        (
            "handover_shared_reads_from",
            -1,
            "handover_shared_reads_from: -1 is below 0; give a number of nodes, or 0 to never "
            "share",
        ),
        (
            "handover_lease_duration_s",
            "15m",
            "handover_lease_duration_s: '15m' is not a whole number; give seconds longer than "
            "a run takes, for example 900",
        ),
        (
            "handover_lease_duration_s",
            0,
            "handover_lease_duration_s: 0 is below 1; give seconds longer than a run takes, "
            "for example 900",
        ),
        (
            "handover_lease_duration_s",
            10**30,
            "handover_lease_duration_s: 1000000000000000000000000000000 is out of range; give "
            "seconds longer than a run takes, for example 900",
        ),
        (
            "handover_lease_wait_s",
            "nan",
            "handover_lease_wait_s: 'nan' is not a number; give seconds, or 0 to never wait",
        ),
        (
            "handover_lease_wait_s",
            -1,
            "handover_lease_wait_s: -1 is below 0; give seconds, or 0 to never wait",
        ),
    ],
)
def test_a_timing_or_count_names_the_variable(variable: str, value: t.Any, message: str) -> None:
    assert problems_of(**{variable: value}) == [message]


# ---- the planner's check, shared with the modules ----------------------------------------


def test_policy_check_still_raises_the_first_problem_with_the_module_names() -> None:
    policy = Policy(
        pool_selector={"hpcops.io/pool": "interactive"},
        headroom=-1,
        partitions={"backfill": PartitionPolicy(30, "kill")},
    )
    assert [str(err) for err in policy.problems()] == [
        "headroom: -1 is negative; give 0 or more",
        "partitions.backfill.escalation: 'kill' is not a known policy; use one of requeue, "
        "cancel, wait",
    ]
    with pytest.raises(PolicyError, match=r"^headroom: -1 is negative"):
        policy.check()
    assert Policy(pool_selector={"hpcops.io/pool": "interactive"}).problems() == []


def test_the_escalations_are_the_planners() -> None:
    assert POLICY_SPEC["default_escalation"]["choices"] == list(ESCALATIONS)


# Values of each policy setting that work, and values that do not, of every kind.
GOOD: dict[str, list[t.Any]] = {
    "pool_selector": [{"hpcops.io/pool": "interactive"}, "hpcops.io/pool=interactive"],
    "never_touch_selector": [{}, {"hpcops.io/never-touch": "true"}, {"a": ""}],
    "headroom": [0, 2, "3", 4.0],
    "max_lent": [None, 0, "4", 2.0],
    "max_lent_fraction": [0, 0.5, "0.25", 1, "1"],
    "lend_min_idle_s": [0, 600, "30"],
    "relend_cooldown_s": [0, 1800, "5"],
    "max_changes_per_run": [1, 8, "2"],
    "demand_namespaces": [[], ["apps"], "apps,jobs"],
    "demand_selector": [{}, {"app": "nb"}, "app=nb"],
    "system_namespaces": [["kube-system"], []],
    "partitions": [
        {},
        {"backfill": {"grace_s": 60, "escalation": "requeue"}},
        {"backfill": {"grace_s": "60"}, "batch": {"escalation": "wait"}},
        {"backfill": {}},
    ],
    "default_escalation": ["requeue", "wait", "cancel"],
    "default_grace_s": [300, "0"],
    "admin_drain": ["cordon", "return"],
    "lend_when": ["idle", "demand"],
    "demand_headroom": [0, 2, "1"],
    "demand_return_idle_s": [None, 0, 1800, "600"],
}
BAD: dict[str, list[t.Any]] = {
    "pool_selector": [{}, {"hpcops.io/pool": 1}, None, "pool"],
    "never_touch_selector": [{"a": True}, "x", None],
    "headroom": [-1, 1.5, True, None, "two"],
    "max_lent": [-1, "x", 1.5],
    "max_lent_fraction": [1.5, -0.1, "nan", True, "half"],
    "lend_min_idle_s": [-1, 2.5, None],
    "relend_cooldown_s": ["-5", False],
    "max_changes_per_run": [0, None],
    "demand_namespaces": [["Apps"], [1], {"a": 1}],
    "demand_selector": [{"app": 1}, 5],
    "system_namespaces": [None, ["kube system"]],
    "partitions": [
        {"backfill": {"grace_s": -1}},
        {"backfill": {"escalation": "kill"}},
        {"backfill": {"grace": 1}},
        {"backfill": []},
        None,
    ],
    "default_escalation": ["kill", 1, None],
    "default_grace_s": [-1, "x"],
    "admin_drain": ["keep", "", None, 1],
    "lend_when": ["always", "", None, 1],
    "demand_headroom": [-1, "x", None, 1.5],
    "demand_return_idle_s": [-1, "x", 1.5],
}


def test_good_and_bad_values_cover_every_setting() -> None:
    assert set(GOOD) == set(BAD) == set(POLICY_SPEC)


def accepted_by_the_modules(policy: dict[str, t.Any]) -> None:
    """The modules' argument spec takes `policy`, and the planner's check passes."""
    result = ArgumentSpecValidator(copy.deepcopy(POLICY_SPEC)).validate(copy.deepcopy(policy))
    assert not result.error_messages, result.error_messages
    policy_from_params(result.validated_parameters).check()


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(GOOD["pool_selector"]),
    st.fixed_dictionaries(
        {}, optional={key: st.sampled_from(values) for key, values in GOOD.items()}
    ),
)
def test_good_values_have_no_problem_here_nor_in_the_modules(
    pool_selector: t.Any, policy: dict[str, t.Any]
) -> None:
    policy = {"pool_selector": pool_selector, **policy}
    assert settings_problems({"handover_policy": policy}) == []
    accepted_by_the_modules(policy)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            key: st.tuples(st.just("good"), st.sampled_from(GOOD[key]))
            | st.tuples(st.just("bad"), st.sampled_from(BAD[key]))
            for key in POLICY_SPEC
        },
    )
)
def test_a_policy_without_problems_is_one_the_modules_take(
    drawn: dict[str, tuple[str, t.Any]],
) -> None:
    """Single source of truth: what passes here passes the modules' argument spec and the
    planner's check; and a bad value is always reported, by its setting."""
    policy = {key: value for key, (_kind, value) in drawn.items()}
    problems = settings_problems({"handover_policy": policy})
    for key, (kind, _value) in drawn.items():
        if kind == "bad":
            assert any(p.startswith(f"handover_policy.{key}") for p in problems), (key, problems)
    if not problems:
        accepted_by_the_modules(policy)


def test_the_planner_range_problems_all_come_through() -> None:
    """Each of the planner's problems is one line, renamed to the variable."""
    policy = {
        **LAB_POLICY,
        "headroom": -1,
        "lend_min_idle_s": -1,
        "relend_cooldown_s": -1,
        "max_changes_per_run": 0,
        "max_lent": -1,
        "max_lent_fraction": 2,
        "default_grace_s": -1,
        "partitions": {"backfill": {"grace_s": -1}},
    }
    params = {key: spec.get("default") for key, spec in POLICY_SPEC.items()}
    params.update(policy)
    planner = [str(err) for err in policy_from_params(params).problems()]
    assert len(planner) == 8
    assert problems_of(policy) == [
        f"handover_policy.{line}".replace("partitions.(default).grace_s", "default_grace_s")
        for line in planner
    ]


# ---- garbage in, a list out ------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(
        ["30", "-1", "0.5", "1e999", "1e99999999", "nan", "inf", "k=v", "{", "{1: 2}"]
    )
)
KEYS = st.sampled_from([*POLICY_SPEC, "grace_s", "escalation", "hpcops.io/pool"]) | st.text(
    max_size=8
)
GARBAGE = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(KEYS | st.integers(), inner, max_size=4)
    ),
    max_leaves=20,
)
POLICIES = st.dictionaries(KEYS | st.integers() | st.none(), GARBAGE, max_size=8) | GARBAGE


@settings(max_examples=500, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "handover_policy": POLICIES,
            "handover_policy_defaults": POLICIES,
            **{name: GARBAGE for name in VARIABLES[2:]},
        },
    )
)
def test_any_settings_give_a_list_of_problems(garbage: dict[str, t.Any]) -> None:
    problems = settings_problems(garbage)
    assert isinstance(problems, list)
    for problem in problems:
        assert isinstance(problem, str)
        variable, _colon, rest = problem.partition(": ")
        assert variable.startswith(("handover_", "settings")) and rest, problem


@pytest.mark.parametrize("garbage", [None, [], "handover_policy", 3, [("handover_nodes", 1)]])
def test_settings_that_are_not_a_mapping(garbage: t.Any) -> None:
    (problem,) = settings_problems(garbage)
    assert problem.startswith("settings: ") and "is not a mapping" in problem


# ---- the filter -------------------------------------------------------------------------------


def test_the_filter_is_exposed() -> None:
    filters = FilterModule().filters()
    assert filters["handover_settings_problems"] is handover_settings_problems
    assert handover_settings_problems({"handover_nodes": "int01"}) == [
        "handover_nodes: give a list of Kubernetes node names, for example [int01, int02]"
    ]
    assert handover_settings_problems({"handover_policy": LAB_POLICY}) == []
