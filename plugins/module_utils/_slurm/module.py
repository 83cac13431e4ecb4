# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Connection options shared by the slurmrestd modules and the glue to the client.

PRIVATE to the collection. The options match the doc fragment
hpcops.slinky.slurmrestd; keep the two in step.
"""

from __future__ import annotations

import typing as t
from collections.abc import Iterator
from contextlib import contextmanager

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_argspec,
    kubernetes_client,
    secret_bytes,
    secret_ref_spec,
    secret_value,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import SelectionError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SUPPORTED_API_VERSIONS,
    Connection,
    SlurmAuthError,
    SlurmRestClient,
    SlurmRestError,
    mint_token,
)


def slurmrestd_argument_spec() -> dict[str, dict[str, t.Any]]:
    """A fresh copy of the connection options, to merge into a module's argument_spec."""
    return {
        "url": {"type": "str", "required": True, "fallback": (env_fallback, ["SLURMRESTD_URL"])},
        "token": {"type": "str", "no_log": True, "fallback": (env_fallback, ["SLURM_JWT"])},
        "jwt_key_path": {"type": "path", "fallback": (env_fallback, ["SLURM_JWT_KEY_PATH"])},
        "user": {"type": "str", "default": "root", "aliases": ["username"]},
        "token_lifespan": {"type": "int", "default": 300, "no_log": False},
        "api_version": {"type": "str", "choices": list(SUPPORTED_API_VERSIONS)},
        "validate_certs": {"type": "bool", "default": True, "aliases": ["verify_ssl"]},
        "ca_path": {"type": "path"},
        "timeout": {"type": "float", "default": 30.0},
        "retries": {"type": "int", "default": 3},
    }


SLURMRESTD_MUTUALLY_EXCLUSIVE = [("token", "jwt_key_path")]
# Modules that also talk to Kubernetes may read the token from a Secret instead.
TOKEN_SECRET_MUTUALLY_EXCLUSIVE = [
    *SLURMRESTD_MUTUALLY_EXCLUSIVE,
    ("token", "token_secret"),
    ("jwt_key_path", "token_secret"),
    ("token", "jwt_key_secret"),
    ("jwt_key_path", "jwt_key_secret"),
    ("token_secret", "jwt_key_secret"),
]


def token_secret_argument_spec() -> dict[str, dict[str, t.Any]]:
    """The token_secret and jwt_key_secret options (doc fragment
    hpcops.slinky.slurmrestd.FROM_CLUSTER)."""
    # References to Secrets, not the token or key: nothing to hide in them.
    return {
        "token_secret": {**secret_ref_spec("auth-token"), "no_log": False},
        "jwt_key_secret": {**secret_ref_spec("jwt_hs256.key"), "no_log": False},
    }


def slurmrestd_argspec(*, token_secret: bool = False) -> ArgumentSpec:
    """The connection options of the doc fragment hpcops.slinky.slurmrestd and their rules;
    with `token_secret`, the option of hpcops.slinky.slurmrestd.FROM_CLUSTER too."""
    if not token_secret:
        return ArgumentSpec(
            slurmrestd_argument_spec(), mutually_exclusive=SLURMRESTD_MUTUALLY_EXCLUSIVE
        )
    return ArgumentSpec(
        {**slurmrestd_argument_spec(), **token_secret_argument_spec()},
        mutually_exclusive=TOKEN_SECRET_MUTUALLY_EXCLUSIVE,
    )


def token_from_secret(client: t.Any, ref: t.Mapping[str, str]) -> t.Callable[[], str]:
    """A token source that reads the Secret each time it is asked: the Slinky operator
    renews a Token's Secret before the token in it expires."""

    def read() -> str:
        try:
            return secret_value(client, ref)
        except KubernetesError as err:
            raise SlurmAuthError(
                f"token_secret: {err}; point it at the Secret of a Slinky Token "
                "(key auth-token), or give token or jwt_key_path"
            ) from None

    return read


def slurmrestd_from_cluster_argspec() -> ArgumentSpec:
    """The connection options with token_secret and the Kubernetes options it is read with
    (doc fragments hpcops.slinky.slurmrestd.FROM_CLUSTER and hpcops.slinky.kubernetes)."""
    return slurmrestd_argspec(token_secret=True).merge(kubernetes_argspec())


def token_minted_from_secret(
    client: t.Any, ref: t.Mapping[str, str], user: str, lifespan: int
) -> t.Callable[[], str]:
    """A token source that mints a token from the JWT key in a Secret, read once and kept in
    memory only (never in a file); asked again after a rejection, it mints a new token."""
    key: list[bytes] = []

    def mint() -> str:
        if not key:
            try:
                key.append(secret_bytes(client, ref))
            except KubernetesError as err:
                raise SlurmAuthError(
                    f"jwt_key_secret: {err}; point it at the Secret of slurmctld's JWT key "
                    "(AuthAltParameters=jwt_key=), or give token or token_secret"
                ) from None
        return mint_token(key[0], user, lifespan)

    return mint


def cluster_token_source(
    client: t.Any, params: t.Mapping[str, t.Any]
) -> t.Callable[[], str] | None:
    """The token source of O(token_secret) or O(jwt_key_secret), read through `client`;
    none when the module was given neither."""
    if params.get("token_secret"):
        return token_from_secret(client, params["token_secret"])
    if params.get("jwt_key_secret"):
        return token_minted_from_secret(
            client,
            params["jwt_key_secret"],
            params.get("user") or "root",
            params.get("token_lifespan") or 300,
        )
    return None


def token_source_from_params(module: AnsibleModule) -> t.Callable[[], str] | None:
    """cluster_token_source with a client built from the Kubernetes options, only when the
    module reads a Secret (otherwise it needs no Kubernetes client)."""
    params = module.params
    if not params.get("token_secret") and not params.get("jwt_key_secret"):
        return None
    try:
        client = kubernetes_client(params.get("kubeconfig"), params.get("context"))
    except KubernetesError as err:
        module.fail_json(msg=f"token_secret or jwt_key_secret: {err}")
    return cluster_token_source(client, params)


def connection_from_params(
    params: dict[str, t.Any], token_source: t.Callable[[], str] | None = None
) -> Connection:
    return Connection(
        url=params["url"],
        token=params.get("token"),
        jwt_key_path=params.get("jwt_key_path"),
        user=params.get("user") or "root",
        token_lifespan=params.get("token_lifespan") or 300,
        api_version=params.get("api_version"),
        validate_certs=params.get("validate_certs", True),
        ca_path=params.get("ca_path"),
        timeout=params.get("timeout") or 30.0,
        retries=params.get("retries", 3),
        token_source=token_source,
    )


def slurm_client(
    module: AnsibleModule, token_source: t.Callable[[], str] | None = None
) -> SlurmRestClient:
    """The client for a module's options; bad options end the module with a clear error."""
    try:
        connection = connection_from_params(module.params, token_source)
    except SlurmRestError as err:
        module.fail_json(msg=str(err))
    return SlurmRestClient(connection, on_new_token=module.no_log_values.add)


def fail_with(module: AnsibleModule, err: SlurmRestError, **result: t.Any) -> None:
    """End the module with the client's message, its HTTP status and Slurm's errors."""
    details: dict[str, t.Any] = {}
    if err.status is not None:
        details["status"] = err.status
    if err.errors:
        details["slurm_errors"] = err.errors
    module.fail_json(msg=str(err), **details, **result)


@contextmanager
def failing_cleanly(module: AnsibleModule, result: dict[str, t.Any]) -> Iterator[None]:
    """End the module with a clear message, and what it has done so far, on any error of
    the client or of a filter; never with a traceback."""
    try:
        yield
    except SelectionError as err:
        module.fail_json(msg=str(err), **result)
    except SlurmRestError as err:
        fail_with(module, err, **result)
