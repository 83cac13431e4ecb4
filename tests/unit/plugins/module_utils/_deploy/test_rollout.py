# SPDX-License-Identifier: GPL-3.0-or-later
"""When a Slurm cluster has settled after its charts changed: NodeSets rolled out, drained
nodes taking jobs again; and what a wait that times out says it saw."""

from __future__ import annotations

import typing as t

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.filter.deploy import (
    nodeset_rollout_pending as nodeset_rollout_filter,
)
from ansible_collections.hpcops.slinky.plugins.filter.deploy import (
    slurm_nodes_not_back as slurm_nodes_filter,
)
from ansible_collections.hpcops.slinky.plugins.filter.deploy import (
    statefulset_rollout_pending as statefulset_rollout_filter,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.rollout import (
    nodeset_rollout_pending,
    slurm_nodes_not_back,
    statefulset_rollout_pending,
)


def nodeset(
    name: str = "slurm-worker-hpc", generation: int = 3, **status: t.Any
) -> dict[str, t.Any]:
    settled = {"observedGeneration": generation, "replicas": 2, "desired": 2}
    settled |= {"updatedReplicas": 2, "readyReplicas": 2}
    return {
        "metadata": {"name": name, "generation": generation},
        "spec": {"replicas": 2},
        "status": {k: v for k, v in (settled | status).items() if v is not None},
    }


def test_a_nodeset_of_its_generation_all_updated_and_ready_has_settled() -> None:
    assert nodeset_rollout_pending([nodeset(), nodeset("slurm-worker-burst")]) == []


def test_a_nodeset_with_no_pods_wanted_has_settled() -> None:
    # desired, replicas and the counts are left out of the status when they are 0.
    empty = nodeset(replicas=None, desired=None, updatedReplicas=None, readyReplicas=None)
    assert nodeset_rollout_pending([empty]) == []


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (
            {"observedGeneration": 2},
            "NodeSet slurm-worker-hpc: generation 3 not yet seen by the operator (it last saw 2)",
        ),
        (
            {"updatedReplicas": 1},
            "NodeSet slurm-worker-hpc: 2 of 2 pods, 1 of the newest revision, 2 ready",
        ),
        (
            {"readyReplicas": 1},
            "NodeSet slurm-worker-hpc: 2 of 2 pods, 2 of the newest revision, 1 ready",
        ),
        # A pod of the old revision still terminating beside the new one.
        (
            {"replicas": 3},
            "NodeSet slurm-worker-hpc: 3 of 2 pods, 2 of the newest revision, 2 ready",
        ),
        (
            {"desired": 3},
            "NodeSet slurm-worker-hpc: 2 of 3 pods, 2 of the newest revision, 2 ready",
        ),
    ],
)
def test_a_nodeset_still_rolling_says_what_it_lacks(status: dict[str, t.Any], said: str) -> None:
    assert nodeset_rollout_pending([nodeset(**status), nodeset("slurm-worker-burst")]) == [said]


def test_a_nodeset_the_operator_never_looked_at_has_not_settled() -> None:
    fresh = {"metadata": {"name": "slurm-worker-gpu", "generation": 1}, "spec": {}}
    assert nodeset_rollout_pending([fresh]) == [
        "NodeSet slurm-worker-gpu: generation 1 not yet seen by the operator (it last saw none)"
    ]


def test_the_names_of_the_nodesets_still_rolling_are_only_theirs_in_their_order() -> None:
    nodesets = [
        nodeset("slurm-worker-gpu", readyReplicas=1),
        nodeset(),
        {"metadata": {"name": "slurm-worker-burst", "generation": 1}, "spec": {}},
    ]
    assert nodeset_rollout_filter(nodesets, names=True) == [
        "slurm-worker-gpu",
        "slurm-worker-burst",
    ]
    # Ansible's spellings of a boolean, as for any bool option.
    assert nodeset_rollout_filter(nodesets, names="yes") == nodeset_rollout_filter(nodesets, True)
    assert nodeset_rollout_filter(nodesets, names="false") == [
        "NodeSet slurm-worker-gpu: 2 of 2 pods, 2 of the newest revision, 1 ready",
        "NodeSet slurm-worker-burst: generation 1 not yet seen by the operator (it last saw none)",
    ]
    assert nodeset_rollout_filter([nodeset()], names=True) == []


def slurm_node(name: str, state: str = "IDLE", *flags: str, reason: str = "") -> dict[str, t.Any]:
    return {"name": name, "state": state, "state_flags": list(flags), "reason": reason}


def test_nodes_up_and_undrained_are_back() -> None:
    nodes = [slurm_node("hpc-0"), slurm_node("hpc-1", "MIXED"), slurm_node("other", "DOWN")]
    assert slurm_nodes_not_back(nodes, ["hpc-0", "hpc-1"]) == []


def test_a_drain_of_somebody_else_counts_as_back() -> None:
    nodes = [slurm_node("hpc-0", "IDLE", "DRAIN", reason="bad DIMM")]
    assert slurm_nodes_not_back(nodes, ["hpc-0"]) == []


@pytest.mark.parametrize(
    ("node", "said"),
    [
        (
            slurm_node(
                "hpc-1",
                "IDLE",
                "DRAIN",
                reason="slurm-operator: Pod (slurm/slurm-worker-hpc-1) is pending termination for scale-in",
            ),
            "hpc-1: IDLE+DRAIN (slurm-operator: Pod (slurm/slurm-worker-hpc-1) is pending "
            "termination for scale-in)",
        ),
        (
            slurm_node("hpc-1", "IDLE", "DRAIN", reason="hpcops: upgrade to Slinky 1.2.1"),
            "hpc-1: IDLE+DRAIN (hpcops: upgrade to Slinky 1.2.1)",
        ),
        (
            slurm_node("hpc-1", "DOWN", "DRAIN", reason="slurm-operator: Pod is terminating"),
            "hpc-1: DOWN+DRAIN",
        ),
        (slurm_node("hpc-1", "IDLE", "NOT_RESPONDING"), "hpc-1: IDLE+NOT_RESPONDING"),
        (slurm_node("hpc-1", "FUTURE"), "hpc-1: FUTURE"),
        (slurm_node("elsewhere"), "hpc-1: not registered in Slurm"),
    ],
)
def test_a_node_not_back_is_named_with_its_state(node: dict[str, t.Any], said: str) -> None:
    assert slurm_nodes_not_back([slurm_node("hpc-0"), node], ["hpc-0", "hpc-1"]) == [said]


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: nodeset_rollout_filter({"resources": []}), "nodeset_rollout_pending"),
        (lambda: nodeset_rollout_filter(["slurm-worker-hpc"]), "nodeset_rollout_pending"),
        (lambda: nodeset_rollout_filter([], names="sometimes"), "nodeset_rollout_pending"),
        (lambda: slurm_nodes_filter({"nodes": []}, ["hpc-0"]), "slurm_nodes_not_back"),
        (lambda: slurm_nodes_filter([], "hpc-0"), "slurm_nodes_not_back"),
    ],
)
def test_the_filters_name_themselves_on_wrong_input(
    call: t.Callable[[], t.Any], names: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=f"^{names}: expected"):
        call()


NEW_DBD = "mirror/slurmdbd:26.05-ubuntu24.04"


def statefulset(
    image: str = NEW_DBD, program: str = "slurmdbd", generation: int = 2, **status: t.Any
) -> dict[str, t.Any]:
    settled = {"observedGeneration": generation, "currentRevision": "r2", "updateRevision": "r2"}
    settled |= {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    return {
        "metadata": {"name": "slurm-accounting", "generation": generation},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": program, "image": image}]}},
        },
        "status": {k: v for k, v in (settled | status).items() if v is not None},
    }


def test_a_statefulset_on_its_new_image_all_ready_has_rolled_out() -> None:
    controller = statefulset("mirror/slurmctld:25.11-ubuntu24.04", "slurmctld")
    assert statefulset_rollout_pending([statefulset(), controller], {"slurmdbd": NEW_DBD}) == []


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        # Helm returned; the operator has not written the new template yet.
        (
            [statefulset("mirror/slurmdbd:25.11-ubuntu24.04")],
            "slurmdbd (slurm-accounting): runs mirror/slurmdbd:25.11-ubuntu24.04, not yet "
            + NEW_DBD,
        ),
        (
            [statefulset(currentRevision="r1")],
            "slurmdbd (slurm-accounting): 1 of 1 pods of the newest revision, 1 ready",
        ),
        (
            [statefulset(updatedReplicas=0, readyReplicas=0)],
            "slurmdbd (slurm-accounting): 0 of 1 pods of the newest revision, 0 ready",
        ),
        (
            [statefulset(observedGeneration=1)],
            "slurmdbd (slurm-accounting): generation 2 not yet seen",
        ),
        ([], "slurmdbd: no StatefulSet runs it"),
    ],
)
def test_a_statefulset_not_on_its_new_image_says_what_it_lacks(
    sets: list[dict[str, t.Any]], said: str
) -> None:
    assert statefulset_rollout_pending(sets, {"slurmdbd": NEW_DBD}) == [said]


def test_the_statefulset_filter_names_what_it_expected() -> None:
    with pytest.raises(AnsibleFilterError, match="StatefulSets as k8s_info returns them"):
        statefulset_rollout_filter("slurm-accounting", {"slurmdbd": NEW_DBD})
    with pytest.raises(AnsibleFilterError, match="dict of program to image"):
        statefulset_rollout_filter([statefulset()], [NEW_DBD])
    assert statefulset_rollout_filter([statefulset()], {"slurmdbd": NEW_DBD}) == []
