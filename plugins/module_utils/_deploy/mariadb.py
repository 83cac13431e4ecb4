# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmdbd's MariaDB as the mariadb-operator's resource, and whether its claim can bind (pure).

PRIVATE to the collection: names here can change without notice.

The resource is the one of Slinky's installation guide: the operator generates the root and
user passwords into Secrets (they never pass through Ansible), creates the database and the
user, and grants the user every privilege on the database, which slurmdbd needs to create
and convert its tables. The my.cnf settings are those Slurm's and Slinky's guides ask for.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping, Sequence

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.merge import merged
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.storage import (
    storage_class_problems,
)

API_VERSION = "k8s.mariadb.com/v1alpha1"
KIND = "MariaDB"
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a Service name
SQL_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
CNF_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
MANAGED_BY = "hpcops.slinky"


class MariadbConfigError(ValueError):
    """A setting of the mariadb role that cannot work: the variable, what, and the fix."""

    def __init__(self, variable: str, problem: str, fix: str) -> None:
        super().__init__(f"{variable}: {problem}; {fix}")


def my_cnf(config: Mapping[str, t.Any]) -> str:
    """The [mariadb] section of my.cnf; a key set to null is left out, true is a bare flag
    and false OFF (YAML reads an unquoted OFF as false)."""
    lines = ["[mariadb]"]
    for key, value in config.items():
        if not CNF_KEY_RE.match(str(key)):
            raise MariadbConfigError(
                f"mariadb_config.{key}",
                "is not a my.cnf option name",
                "use letters, digits, - and _",
            )
        if value is None:
            continue
        if value is True:
            lines.append(str(key))
        elif value is False:
            lines.append(f"{key}=OFF")
        elif isinstance(value, (str, int, float)) and "\n" not in str(value):
            lines.append(f"{key}={value}")
        else:
            raise MariadbConfigError(
                f"mariadb_config.{key}",
                f"{value!r} is not a my.cnf value",
                "give a string or a number (null leaves the option out)",
            )
    return "\n".join(lines) + "\n"


def _secret_ref(value: t.Any, variable: str) -> dict[str, t.Any]:
    if not isinstance(value, Mapping) or not value.get("name") or not value.get("key"):
        raise MariadbConfigError(
            variable, f"{value!r} is not a Secret reference", "give {name: <Secret>, key: <key>}"
        )
    # generate: the operator writes a random password unless the Secret holds one already.
    return {"name": str(value["name"]), "key": str(value["key"]), "generate": True}


def mariadb_resource(settings: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The MariaDB resource from the role's settings (keys without the `mariadb_` prefix)."""
    name = str(settings.get("name") or "")
    if not NAME_RE.match(name):
        raise MariadbConfigError(
            "mariadb_name",
            f"{name!r} is not a Kubernetes Service name (slurmdbd reaches the database by it)",
            "use lower-case letters, digits and - (at most 63)",
        )
    for key in ("database", "user"):
        value = str(settings.get(key) or "")
        if not SQL_NAME_RE.match(value):
            raise MariadbConfigError(
                f"mariadb_{key}",
                f"{value!r} is not a MariaDB name slurmdbd can use",
                "use letters, digits and _ (at most 64)",
            )
    storage = settings.get("storage") or {}
    if not isinstance(storage, Mapping):
        raise MariadbConfigError(
            "mariadb_storage", f"{storage!r} is not a mapping", "give {size: 16Gi}"
        )
    unknown = sorted(set(storage) - {"size", "storage_class"})
    if unknown:
        raise MariadbConfigError(
            f"mariadb_storage.{unknown[0]}",
            "is not a storage setting",
            "use size and storage_class",
        )
    size = str(storage.get("size") or "")
    if not QUANTITY_RE.match(size):
        raise MariadbConfigError(
            "mariadb_storage.size", f"{size!r} is not a storage quantity", "give one such as 16Gi"
        )
    spec_storage: dict[str, t.Any] = {"size": size}
    if storage.get("storage_class"):
        spec_storage["storageClassName"] = str(storage["storage_class"])
    image = str(settings.get("image") or "")
    if ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
        raise MariadbConfigError(
            "mariadb_image",
            f"{image!r} has no tag (the operator reads MariaDB's version from it)",
            "give <repository>:<version>, for example docker-registry1.mariadb.com/library/mariadb:11.8.2",
        )
    config = settings.get("config") or {}
    if not isinstance(config, Mapping):
        raise MariadbConfigError(
            "mariadb_config", f"{config!r} is not a mapping", "give option: value pairs"
        )
    spec: dict[str, t.Any] = {
        "image": image,
        "rootPasswordSecretKeyRef": _secret_ref(
            settings.get("root_password_secret"), "mariadb_root_password_secret"
        ),
        "username": str(settings["user"]),
        "passwordSecretKeyRef": _secret_ref(
            settings.get("password_secret"), "mariadb_password_secret"
        ),
        "database": str(settings["database"]),
        "storage": spec_storage,
        "myCnf": my_cnf(config),
    }
    overrides = settings.get("spec") or {}
    if not isinstance(overrides, Mapping):
        raise MariadbConfigError(
            "mariadb_spec", f"{overrides!r} is not a mapping", "give MariaDB spec fields"
        )
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": str(settings.get("namespace") or "slurm"),
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
        },
        "spec": merged(spec, overrides),
    }


def mariadb_storage_problems(
    resource: Mapping[str, t.Any],
    storage_classes: Sequence[Mapping[str, t.Any]],
    existing: Mapping[str, t.Any] | None = None,
) -> list[str]:
    """Why the database's claim would not bind, or cannot change; empty when it can go ahead.

    `existing` is the MariaDB already in the cluster (None on a first deployment): the
    operator's StatefulSet makes the claim once, so its class cannot change afterwards."""
    storage = (resource.get("spec") or {}).get("storage") or {}
    if storage.get("ephemeral"):
        return []
    class_name = storage.get("storageClassName")
    problems = storage_class_problems(
        "mariadb_storage.storage_class",
        class_name,
        storage_classes,
        "the database's claim",
        "MariaDB",
    )
    if existing is not None:
        before = ((existing.get("spec") or {}).get("storage") or {}).get("storageClassName")
        if before and class_name and before != class_name:
            problems.append(
                f"mariadb_storage.storage_class: the MariaDB {resource['metadata']['name']} "
                f"exists on the StorageClass {before}, and its claim keeps the class it was made "
                f"with, so {class_name} would never apply; keep {before}, or back the database "
                "up, delete the MariaDB and its claim, deploy again and restore"
            )
    return problems
