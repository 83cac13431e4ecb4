# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmctld's claim: a class it can bind to before any change, and no change once made."""

from __future__ import annotations

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.storage import (
    controller_storage_problems,
)


def storage_class(name: str, default: bool = False) -> dict[str, t.Any]:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}}


def persistence(**given: t.Any) -> dict[str, t.Any]:
    return {"controller": {"persistence": given}}


# The Controller the slurm chart makes from its defaults, as the apiserver keeps it.
CONTROLLER = {
    "metadata": {"name": "slurm"},
    "spec": {
        "persistence": {
            "enabled": True,
            "existingClaim": "",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "4Gi"}},
        }
    },
}


def test_the_chart_defaults_need_a_default_class() -> None:
    assert controller_storage_problems({}, [storage_class("local", default=True)]) == []
    (problem,) = controller_storage_problems({}, [storage_class("local")])
    assert problem.startswith("slurm_cluster_values.controller.persistence.storageClassName:")
    assert "has none marked default (it has local)" in problem
    assert "mark one default" in problem and "enabled: false" in problem
    (problem,) = controller_storage_problems({}, [])
    assert "no StorageClass at all" in problem


def test_a_named_class_must_exist() -> None:
    classes = [storage_class("local", default=True)]
    (problem,) = controller_storage_problems(persistence(storageClassName="nvme"), classes)
    assert "there is no StorageClass nvme (the cluster has local)" in problem
    assert controller_storage_problems(persistence(storageClassName="local"), classes) == []


def test_no_class_is_needed_without_a_claim_to_make() -> None:
    for values in (
        persistence(enabled=False),
        persistence(existingClaim="slurmctld-state"),
        persistence(storageClassName="-"),
        {"controller": {"external": True}},
    ):
        assert controller_storage_problems(values, []) == [], values


def test_the_claim_of_an_existing_controller_is_not_changed() -> None:
    classes = [storage_class("local", default=True), storage_class("nvme")]
    assert controller_storage_problems({}, classes, CONTROLLER) == []
    problems = controller_storage_problems(
        persistence(storageClassName="nvme", resources={"requests": {"storage": "8Gi"}}),
        classes,
        CONTROLLER,
    )
    assert [p.split(":", maxsplit=1)[0] for p in problems] == [
        "slurm_cluster_values.controller.persistence.storageClassName",
        "slurm_cluster_values.controller.persistence.resources.requests.storage",
    ]
    assert "the Controller slurm exists with storage 4Gi" in problems[1]
    assert "keep 4Gi" in problems[1]
    assert "exists with storageClassName unset (the default StorageClass)" in problems[0]
    (off,) = controller_storage_problems(persistence(enabled=False), classes, CONTROLLER)
    assert off.startswith("slurm_cluster_values.controller.persistence.enabled:")
