# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmdbd's MariaDB resource: Slinky's guide's resource from the role's settings, bad
settings named with their fix, and a claim that can bind."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.mariadb import (
    MariadbConfigError,
    mariadb_resource,
    mariadb_storage_problems,
    my_cnf,
)

SETTINGS: dict[str, t.Any] = {
    "name": "mariadb",
    "namespace": "slurm",
    "image": "registry.example.org/library/mariadb:11.8.2",
    "database": "slurm_acct_db",
    "user": "slurm",
    "password_secret": {"name": "mariadb-password", "key": "password"},
    "root_password_secret": {"name": "mariadb-root", "key": "password"},
    "storage": {"size": "16Gi"},
    "config": {"innodb_lock_wait_timeout": 900, "skip-log-bin": True, "max_allowed_packet": None},
    "spec": {},
}


def storage_class(name: str, default: bool = False) -> dict[str, t.Any]:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}}


def test_the_resource_is_the_guides_with_generated_passwords() -> None:
    resource = mariadb_resource(SETTINGS)
    assert resource["apiVersion"] == "k8s.mariadb.com/v1alpha1" and resource["kind"] == "MariaDB"
    assert (
        resource["metadata"]["name"] == "mariadb" and resource["metadata"]["namespace"] == "slurm"
    )
    spec = resource["spec"]
    assert spec["username"] == "slurm" and spec["database"] == "slurm_acct_db"
    assert spec["passwordSecretKeyRef"] == {
        "name": "mariadb-password",
        "key": "password",
        "generate": True,
    }
    assert spec["rootPasswordSecretKeyRef"]["generate"] is True
    assert spec["storage"] == {"size": "16Gi"}, "no class: the default StorageClass"
    assert spec["myCnf"] == "[mariadb]\ninnodb_lock_wait_timeout=900\nskip-log-bin\n"


def test_spec_overrides_combine_over_the_built_spec() -> None:
    resource = mariadb_resource(
        {**SETTINGS, "storage": {"size": "1Gi", "storage_class": "fast"},
         "spec": {"storage": {"resizeInUseVolumes": True}, "nodeSelector": {"pool": "services"}}}
    )  # fmt: skip
    assert resource["spec"]["storage"] == {
        "size": "1Gi",
        "storageClassName": "fast",
        "resizeInUseVolumes": True,
    }
    assert resource["spec"]["nodeSelector"] == {"pool": "services"}


@pytest.mark.parametrize(
    ("override", "variable"),
    [
        ({"name": "MariaDB"}, "mariadb_name"),
        ({"database": "slurm-acct"}, "mariadb_database"),
        ({"user": ""}, "mariadb_user"),
        ({"image": "registry.example.org/library/mariadb"}, "mariadb_image"),
        ({"storage": {"size": "lots"}}, "mariadb_storage.size"),
        ({"storage": {"size": "1Gi", "class": "x"}}, "mariadb_storage.class"),
        ({"password_secret": {"name": "x"}}, "mariadb_password_secret"),
        ({"config": {"bad key": 1}}, "mariadb_config.bad key"),
        ({"config": {"init": ["a"]}}, "mariadb_config.init"),
    ],
)
def test_bad_settings_name_the_variable_and_the_fix(
    override: dict[str, t.Any], variable: str
) -> None:
    with pytest.raises(MariadbConfigError, match=f"^{variable}: .+; .+"):
        mariadb_resource({**SETTINGS, **override})


def test_my_cnf_leaves_out_what_is_unset_and_writes_false_as_off() -> None:
    assert my_cnf({"a": None, "b": False, "c": "x"}) == "[mariadb]\nb=OFF\nc=x\n"


def test_a_claim_without_class_needs_a_default_one() -> None:
    resource = mariadb_resource(SETTINGS)
    (problem,) = mariadb_storage_problems(resource, [storage_class("local")])
    assert problem.startswith("mariadb_storage.storage_class: unset") and "local" in problem
    assert mariadb_storage_problems(resource, [storage_class("local", default=True)]) == []


def test_a_named_class_must_exist_and_cannot_change() -> None:
    resource = mariadb_resource({**SETTINGS, "storage": {"size": "1Gi", "storage_class": "fast"}})
    (missing,) = mariadb_storage_problems(resource, [storage_class("slow", default=True)])
    assert "no StorageClass fast" in missing
    existing = {"spec": {"storage": {"storageClassName": "slow"}}}
    classes = [storage_class("slow"), storage_class("fast")]
    (changed,) = mariadb_storage_problems(resource, classes, existing)
    assert "exists on the StorageClass slow" in changed and "keep slow" in changed
    assert (
        mariadb_storage_problems(
            resource, classes, {"spec": {"storage": {"storageClassName": "fast"}}}
        )
        == []
    )
