# SPDX-License-Identifier: GPL-3.0-or-later
"""Tokens the modules take from the cluster: a Token's Secret, or minted from the JWT key
in slurmctld's Secret (read once, kept in memory, never written to a file)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import KubernetesError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm import module
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import SlurmAuthError

# A key of raw bytes, as Slinky generates it: not text.
KEY = bytes(range(256))
KEY_REF = {"namespace": "slurm", "name": "slurm-jwt-key", "key": "jwt_hs256.key"}


def claims(token: str, key: bytes) -> dict[str, t.Any]:
    header, payload, signature = token.split(".")
    expected = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "==") == expected
    decoded: dict[str, t.Any] = json.loads(base64.urlsafe_b64decode(payload + "=="))
    return decoded


@pytest.fixture
def secret_reads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    reads: list[dict[str, str]] = []

    def secret_bytes(client: t.Any, ref: dict[str, str]) -> bytes:
        reads.append(ref)
        if ref["name"] != KEY_REF["name"]:
            raise KubernetesError(f"Secret {ref['namespace']}/{ref['name']} does not exist")
        return KEY

    monkeypatch.setattr(module, "secret_bytes", secret_bytes)
    return reads


def test_tokens_are_minted_for_the_user_from_a_key_read_once(
    secret_reads: list[dict[str, str]],
) -> None:
    source = module.cluster_token_source(
        object(), {"jwt_key_secret": KEY_REF, "user": "slurm", "token_lifespan": 120}
    )
    assert source is not None
    first, again = source(), source()
    for token in (first, again):
        found = claims(token, KEY)
        assert found["sun"] == "slurm" and found["exp"] - found["iat"] == 120
    assert secret_reads == [KEY_REF]


def test_a_missing_key_secret_names_the_option_and_the_fix(
    secret_reads: list[dict[str, str]],
) -> None:
    ref = {**KEY_REF, "name": "typo"}
    source = module.cluster_token_source(object(), {"jwt_key_secret": ref, "user": "root"})
    assert source is not None
    with pytest.raises(
        SlurmAuthError, match=r"jwt_key_secret: Secret slurm/typo does not exist; point"
    ):
        source()


def test_no_secret_option_needs_no_source() -> None:
    assert module.cluster_token_source(object(), {"token": "x", "user": "root"}) is None
