# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm-bridge's Slurm side in the slurm chart's values, and what stops it before any change."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.errors import ConfigError
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
    EXTERNAL_NODE_LABEL,
    EXTERNAL_PARTITIONS_ANNOTATION,
    MANAGED_NODE_TAINT,
    SLURM_NODENAME_LABEL,
    bridge_pool,
    bridge_problems,
    node_marks,
    token_rollout_schedule,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
    build_values,
)


def node(name: str, pool: str, **labels: str) -> dict[str, t.Any]:
    return {
        "metadata": {"name": name, "labels": {"hpcops.io/pool": pool, **labels}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }


NODES = [
    node("hpc01", "slurm"),
    node("int01", "interactive"),
    node("br01.site.example", "bridge"),
    node("br02", "bridge"),
]
BRIDGE = {"kind": "bridge", "node_selector": {"hpcops.io/pool": "bridge"}}
SETTINGS: dict[str, t.Any] = {
    "name": "site",
    "slurm_version": "26.05",
    "chart_version": "1.2.1",
    "pools": {
        "hpc": {"kind": "dedicated", "node_selector": {"hpcops.io/pool": "slurm"}},
        "interactive": {"kind": "lendable", "node_selector": {"hpcops.io/pool": "interactive"}},
        "bridge": BRIDGE,
    },
    "mcs": "label:ondemand,ondemandselect",
}


def with_pool(**changes: t.Any) -> dict[str, t.Any]:
    return {**SETTINGS, "pools": {**SETTINGS["pools"], "bridge": {**BRIDGE, **changes}}}


def refusal(settings: dict[str, t.Any], nodes: list[dict[str, t.Any]] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build_values(settings, NODES if nodes is None else nodes)
    return caught.value


def test_a_hybrid_pool_is_a_daemonset_nodeset_that_stays_through_the_bridges_taint() -> None:
    values = build_values(SETTINGS, NODES)
    nodeset = values["nodesets"]["bridge"]
    assert nodeset["scalingMode"] == "DaemonSet"
    assert nodeset["podSpec"]["nodeSelector"]["hpcops.io/pool"] == "bridge"
    assert nodeset["podSpec"]["tolerations"] == [
        {"key": MANAGED_NODE_TAINT, "operator": "Exists", "effect": "NoExecute"}
    ]
    assert values["partitions"]["slurm-bridge"]["nodesets"] == ["bridge"]
    # Jobs that give no --mem get their share of the node per CPU, as on every partition.
    assert values["partitions"]["slurm-bridge"]["configMap"] == {
        "State": "UP",
        "DefMemPerCPU": "4096",
    }
    # Neither batch nor backfill takes the bridge's nodes.
    assert "bridge" not in values["partitions"]["batch"]["nodesets"]
    assert "bridge" not in values["partitions"]["backfill"]["nodesets"]


def test_every_daemonset_nodesets_slurmd_stays_through_the_bridges_taint() -> None:
    # The bridge taints each Kubernetes node named like a Slurm node: a lent node too.
    lendable = build_values(SETTINGS, NODES)["nodesets"]["interactive"]["podSpec"]
    assert lendable["tolerations"] == [
        {"key": "hpcops.io/lent", "operator": "Exists", "effect": "NoSchedule"},
        {"key": MANAGED_NODE_TAINT, "operator": "Exists", "effect": "NoExecute"},
    ]
    # Without a bridge pool nothing taints them, and nothing is tolerated in advance.
    without = {**SETTINGS, "pools": {k: v for k, v in SETTINGS["pools"].items() if k != "bridge"}}
    assert build_values(without, NODES)["nodesets"]["interactive"]["podSpec"]["tolerations"] == [
        {"key": "hpcops.io/lent", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_mcs_account_is_taken_with_accounting() -> None:
    # The bridge's jobs then run in the account its MCS label names (the slurm_bridge role).
    values = build_values({**SETTINGS, "mcs": "account:enforced,select", "accounting": True}, NODES)
    assert values["controller"]["extraConfMap"]["MCSPlugin"] == "mcs/account"


def test_an_external_pool_has_no_slurmd_and_gathers_the_registered_nodes_by_feature() -> None:
    values = build_values(
        with_pool(nodes="external", partition="k8s", partition_config={"MaxTime": "1:00:00"}),
        NODES,
    )
    assert "bridge" not in values["nodesets"]
    assert "k8s" not in values["partitions"]
    conf = values["controller"]["extraConfMap"]
    assert conf["NodeSet"] == "k8s Feature=k8s"
    assert conf["PartitionName"] == "k8s Nodes=k8s State=UP MaxTime=1:00:00"


@pytest.mark.parametrize(
    ("settings", "variable", "words"),
    [
        (
            {**with_pool(), "slurm_version": "25.05"},
            "slurm_cluster_slurm_version",
            "has no external jobs",
        ),
        (
            {**with_pool(), "mcs": "group:enforced,select"},
            "slurm_cluster_mcs",
            "mcs/group refuses",
        ),
        (with_pool(nodes="sidecar"), "slurm_cluster_pools.bridge.nodes", "unknown mode"),
        (
            with_pool(partition="batch"),
            "slurm_cluster_pools.bridge.partition",
            "partition of the role's",
        ),
        (
            with_pool(partiton="x"),
            "slurm_cluster_pools.bridge.partiton",
            "not a setting of a bridge pool",
        ),
        (
            {
                **with_pool(),
                "pools": {
                    **with_pool()["pools"],
                    "two": {**BRIDGE, "node_selector": {"hpcops.io/pool": "slurm"}},
                },
            },
            "slurm_cluster_pools",
            "are all of kind bridge",
        ),
    ],
)
def test_what_cannot_work_is_refused_with_the_setting_and_the_fix(
    settings: dict[str, t.Any], variable: str, words: str
) -> None:
    err = refusal(settings)
    assert err.variable == variable, str(err)
    assert words in str(err), str(err)
    assert "; " in str(err)  # the fix follows the problem


def test_a_node_of_the_lendable_pool_cannot_be_a_bridge_node_too() -> None:
    both = [*NODES, node("int02", "interactive", bridge="yes")]
    settings = with_pool(node_selector={"bridge": "yes"})
    err = refusal(settings, both)
    assert err.variable == "slurm_cluster_pools.interactive.node_selector", str(err)
    assert "int02" in str(err) and "handover would lend it" in str(err)


def test_a_node_in_two_dedicated_pools_is_refused() -> None:
    settings = {
        **SETTINGS,
        "pools": {**SETTINGS["pools"], "more": {"node_selector": {"hpcops.io/pool": "slurm"}}},
    }
    err = refusal(settings)
    assert "hpc01" in str(err) and "pool hpc selects too" in str(err)


def test_nodes_get_the_slurm_name_label_where_names_differ_and_external_ones_register() -> None:
    hybrid = node_marks(bridge_pool(SETTINGS["pools"]), NODES)  # type: ignore[arg-type]
    assert hybrid == {
        "br01.site.example": {"labels": {SLURM_NODENAME_LABEL: "br01"}, "annotations": {}},
        "br02": {"labels": {}, "annotations": {}},
    }
    external = node_marks(bridge_pool(with_pool(nodes="external")["pools"]), NODES)  # type: ignore[arg-type]
    assert external["br02"] == {
        "labels": {EXTERNAL_NODE_LABEL: "true"},
        "annotations": {EXTERNAL_PARTITIONS_ANNOTATION: "slurm-bridge"},
    }


def test_lendable_nodes_get_a_slurm_name_the_bridge_never_takes_for_a_slurm_nodes() -> None:
    bridge = bridge_pool(SETTINGS["pools"])
    assert bridge is not None
    marks = node_marks(bridge, NODES, [{"hpcops.io/pool": "interactive"}])
    assert marks["int01"] == {
        "labels": {SLURM_NODENAME_LABEL: "int01.not-bridged"},
        "annotations": {},
    }
    assert "hpc01" not in marks  # a dedicated node: the bridge may keep pods off it
    # Marked once: a node that has the label needs nothing more.
    marked = node("int01", "interactive", **{SLURM_NODENAME_LABEL: "int01.not-bridged"})
    again = node_marks(bridge, [marked], [{"hpcops.io/pool": "interactive"}])
    assert again["int01"] == {"labels": {}, "annotations": {}}  # the role patches none
    long_name = "n" * 70 + ".site.example"
    label = node_marks(
        bridge, [node(long_name, "interactive")], [{"hpcops.io/pool": "interactive"}]
    )
    assert len(label[long_name]["labels"][SLURM_NODENAME_LABEL]) == 63


def test_the_bridges_preflight_names_an_old_kubernetes_and_unmapped_slurm_nodes() -> None:
    pools = SETTINGS["pools"]
    assert bridge_problems(pools, NODES, "v1.36.2", ["br01", "br02"]) == []
    old = bridge_problems(pools, NODES, "v1.34.1")
    assert len(old) == 1 and "needs 1.35 or newer" in old[0]
    unmapped = bridge_problems(pools, NODES, "v1.36.2", ["br01", "gpu07"])
    assert len(unmapped) == 1 and "['gpu07']" in unmapped[0]
    assert SLURM_NODENAME_LABEL in unmapped[0]
    none = bridge_problems({"hpc": pools["hpc"]}, NODES, "v1.36.2")
    assert "no pool of kind bridge" in none[0]
    empty = bridge_problems({"b": {**BRIDGE, "node_selector": {"x": "y"}}}, NODES, "v1.36.2")
    assert "selects no Kubernetes node" in empty[0]


def test_slurms_services_and_login_pods_stay_off_the_bridges_nodes() -> None:
    """The bridge's NoExecute taint would evict them there."""
    values = build_values(
        {**SETTINGS, "login_sets": {"users": {"service": {"type": "NodePort"}}}}, NODES
    )
    for pod_spec in (values["controller"]["podSpec"], values["loginsets"]["users"]["podSpec"]):
        terms = pod_spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert terms["nodeSelectorTerms"] == [
            {
                "matchExpressions": [
                    {
                        "key": "hpcops.io/pool",
                        "operator": "NotIn",
                        "values": ["bridge", "interactive"],
                    }
                ]
            }
        ]


@pytest.mark.parametrize(
    ("every_min", "lifetime", "schedule"),
    [
        (30, "24h", "*/30 * * * *"),
        (1, "10m", "*/1 * * * *"),  # a fifth of 10 min: 2 min
        (120, "24h", "0 */2 * * *"),
        (59, "5h", "*/59 * * * *"),  # the last fifth: 60 min
        ("30", "24h", "*/30 * * * *"),  # a YAML string the argument spec took for an int
    ],
)
def test_the_token_rollout_runs_within_the_last_fifth_of_the_tokens_lifetime(
    every_min: int | str, lifetime: str, schedule: str
) -> None:
    assert token_rollout_schedule(True, "ee:1", every_min, lifetime) == schedule


def test_a_token_rollout_turned_off_has_no_schedule_but_its_lifetime_is_still_checked() -> None:
    assert token_rollout_schedule(False, "", 30, "24h") == ""
    with pytest.raises(ConfigError, match=r"^slurm_bridge_token_lifetime: 'a day' is not a"):
        token_rollout_schedule(False, "", 30, "a day")


@pytest.mark.parametrize(
    ("image", "every_min", "lifetime", "variable", "says"),
    [
        ("", 30, "24h", "slurm_bridge_token_rollout_image", "run site.yml at least every 288 min"),
        (" ", 30, "24h", "slurm_bridge_token_rollout_image", "renews it every 19.2h"),
        ("ee:1", 60, "5h", "slurm_bridge_token_rollout_every_min", "(5h: 60 min)"),
        ("ee:1", 300, "24h", "slurm_bridge_token_rollout_every_min", "(24h: 288 min)"),
        ("ee:1", 780, "240h", "slurm_bridge_token_rollout_every_min", "whole number of hours"),
        ("ee:1", 90, "24h", "slurm_bridge_token_rollout_every_min", "neither 1 to 59"),
        ("ee:1", 0, "24h", "slurm_bridge_token_rollout_every_min", "neither 1 to 59"),
        ("ee:1", "half an hour", "24h", "slurm_bridge_token_rollout_every_min", "not a whole"),
        ("ee:1", True, "24h", "slurm_bridge_token_rollout_every_min", "not a whole number"),
        ("ee:1", 30, "", "slurm_bridge_token_lifetime", "is not a duration"),
    ],
)
def test_a_token_rollout_that_cannot_come_in_time_is_refused_with_the_fix(
    image: str, every_min: t.Any, lifetime: str, variable: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        token_rollout_schedule(True, image, every_min, lifetime)
    assert refused.value.variable == variable
    assert says in str(refused.value)
