# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A run's slurmrestd token from a Slinky Token's Secret, renewed when its renewal stopped.

PRIVATE: for this collection's plugins only; names and signatures may change without notice.

The judgement is slinky_tokens.token_health (pure); this file reads the Secret and the
Token, and when the JWT is late or expired asks the operator for a new one by updating the
Token (slinky_tokens.RENEWAL_ANNOTATION), then waits for it. The JWT itself is never
returned or logged here.
"""

from __future__ import annotations

import time
import typing as t
from collections.abc import Callable, Mapping

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    get_object,
    patch_object,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.slinky_tokens import (
    EXPIRED,
    LATE,
    OK,
    RENEWAL_ANNOTATION,
    token_health,
)

SLINKY_API = "slinky.slurm.net/v1beta1"
RENEWAL_WAIT_S = 30.0
RENEWAL_POLL_S = 2.0


class TokenRenewalError(Exception):
    """The token cannot be used; the message names the Secret or the Token and the fix."""


def fresh_token_secret(
    client: t.Any,
    ref: Mapping[str, str],
    token_name: str = "",
    *,
    check_mode: bool = False,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    wait_s: float = RENEWAL_WAIT_S,
    poll_s: float = RENEWAL_POLL_S,
) -> str:
    """Check that the Secret `ref` holds its key and, when the Slinky Token that keeps it
    (token_name, or else the Secret's owner) has stopped renewing the JWT, ask for a new one
    and wait for it. Returns a warning ('' when the JWT was fresh); TokenRenewalError when
    the Secret lacks the key or no new JWT came; KubernetesError when a read fails."""
    where = f"Secret {ref['namespace']}/{ref['name']}"
    secret = get_object(client, "v1", "Secret", ref["name"], ref["namespace"])
    if secret is None or ref["key"] not in (secret.get("data") or {}):
        raise TokenRenewalError(
            f"token_secret: {where} has no key {ref['key']} (yet: a new Slinky Token writes it "
            "within seconds); point it at the Secret of the Token, or give a token"
        )
    owner = token_name or next(
        (
            str(owner_ref.get("name"))
            for owner_ref in (secret.get("metadata") or {}).get("ownerReferences") or []
            if owner_ref.get("kind") == "Token"
        ),
        "",
    )
    if not owner:
        return ""
    token = get_object(client, SLINKY_API, "Token", owner, ref["namespace"])
    if token is None:
        return ""
    health = token_health([token], [secret], clock())
    if not health or health[0]["state"] not in (LATE, EXPIRED):
        return ""
    named = f"the Slinky Token {ref['namespace']}/{owner}"
    if check_mode:
        return (
            f"{named} had stopped renewing its JWT (check mode: no renewal asked); status.yml "
            "lists the Tokens and their JWTs"
        )
    patch_object(
        client,
        SLINKY_API,
        "Token",
        owner,
        # Any update will do; this one says who asked and when.
        {"metadata": {"annotations": {RENEWAL_ANNOTATION: str(int(clock()))}}},
        ref["namespace"],
    )
    deadline = clock() + wait_s
    looks = 0
    while True:
        looks += 1
        secret = get_object(client, "v1", "Secret", ref["name"], ref["namespace"])
        renewed = token_health([token], [secret] if secret else [], clock())
        if renewed and renewed[0]["state"] == OK:
            return (
                f"{named} had stopped renewing its JWT; this run asked the operator for a new "
                f"one (renewed after {looks} look(s)); status.yml lists the Tokens and their JWTs"
            )
        if clock() >= deadline:
            raise TokenRenewalError(
                f"token_secret: {named} had stopped renewing the JWT in {where}, and wrote no "
                f"new one within {wait_s:.0f} s of a renewal request: check that the Slinky "
                "operator runs (its log names the Token), or give the runs a JWT key"
            )
        sleep(poll_s)
