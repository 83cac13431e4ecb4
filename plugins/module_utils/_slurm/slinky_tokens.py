# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether Slinky keeps renewing the slurmrestd JWTs of its Tokens (pure; no I/O).

PRIVATE: for this collection's plugins only; names and signatures may change without notice.

A Slinky ``Token`` (slinky.slurm.net/v1beta1) makes the operator sign a JWT with the Slurm
cluster's key, keep it in a Secret and write a new one when four fifths of its lifetime have
passed. That renewal can stop for good (seen on Slinky 1.1.0 and 1.2.1 with short
lifetimes; fixed upstream after 1.2.1): the Secret then keeps a JWT that expires, and every
run reading it is refused by slurmrestd. An update of the Token (the annotation RENEWAL_ANNOTATION, which the
handover role sets) makes the operator reconcile it again, and it writes a new JWT at once
when the old one is due.

The defaults are the operator's (api/v1beta1/token_keys.go of 1.1 and 1.2): lifetime 15m,
Secret ``<token>-jwt-<user>``, key ``SLURM_JWT``, user ``nobody``.
"""

from __future__ import annotations

import base64
import re
import typing as t
from collections.abc import Mapping, Sequence

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.jwt import token_expiry

DEFAULT_LIFETIME_S = 15 * 60
DEFAULT_USER = "nobody"
DEFAULT_SECRET_KEY = "SLURM_JWT"  # noqa: S105 (a key name, not a secret)
# The annotation an update of which asks the operator to look at the Token again.
RENEWAL_ANNOTATION = "hpcops.io/renewal-requested"

OK = "ok"
LATE = "late"
EXPIRED = "expired"
MISSING = "missing"
UNREADABLE = "unreadable"

_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_s(text: t.Any) -> float | None:
    """Seconds of a Go duration as Kubernetes writes metav1.Duration ('1h', '15m0s', '90s');
    None when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def token_secret(token: Mapping[str, t.Any]) -> tuple[str, str]:
    """(Secret name, key) where the operator keeps a Token's JWT."""
    spec = token.get("spec") or {}
    ref = spec.get("secretRef") or {}
    user = spec.get("username") or DEFAULT_USER
    name = ref.get("name") or f"{token['metadata']['name']}-jwt-{user}"
    return str(name), str(ref.get("key") or DEFAULT_SECRET_KEY)


# The share of a Token's lifetime its JWT has left when the operator writes the next one (it
# renews at four fifths of the lifetime): the replaced JWT stays valid that long.
LIFETIME_LEFT_AT_RENEWAL = 0.2


def renewal_due_in_s(lifetime_s: float, expires_in_s: float) -> float:
    """Seconds until the operator should write a new JWT (negative: it is overdue)."""
    return expires_in_s - lifetime_s * LIFETIME_LEFT_AT_RENEWAL


def renewal_slack_s(lifetime_s: float) -> float:
    """How late a renewal may be before it counts as stopped: the operator's requeue and a
    busy apiserver take seconds, never a tenth of a lifetime of over ten minutes."""
    return min(60.0, max(5.0, lifetime_s / 10))


def _jwt(secret: Mapping[str, t.Any] | None, key: str) -> str | None:
    data = (secret or {}).get("data") or {}
    if key not in data:
        return None
    try:
        return base64.b64decode(str(data[key])).decode()
    except ValueError:
        return ""


def token_health(
    tokens: Sequence[Mapping[str, t.Any]],
    secrets: Sequence[Mapping[str, t.Any]],
    now: float,
) -> list[dict[str, t.Any]]:
    """One row per Token: its user, lifetime, Secret, when its JWT expires, and a state.

    ``ok``: renewed on time; ``late``: past the point the operator renews it (by more than
    renewal_slack_s); ``expired``; ``missing``: the Secret or its key is not there;
    ``unreadable``: the Secret holds no JWT with an expiry. Never returns the JWT.
    """
    by_name = {str(s.get("metadata", {}).get("name")): s for s in secrets}
    rows = []
    for token in sorted(tokens, key=lambda tok: str(tok["metadata"]["name"])):
        spec = token.get("spec") or {}
        meta = token["metadata"]
        secret_name, key = token_secret(token)
        lifetime_s = go_duration_s(spec.get("lifetime")) or float(DEFAULT_LIFETIME_S)
        refresh = spec.get("refresh", True) is not False
        row: dict[str, t.Any] = {
            "token": str(meta["name"]),
            "namespace": str(meta.get("namespace", "")),
            "user": str(spec.get("username") or DEFAULT_USER),
            "lifetime_s": lifetime_s,
            "refresh": refresh,
            "secret": secret_name,
            "key": key,
            "expires_in_s": None,
        }
        jwt = _jwt(by_name.get(secret_name), key)
        expiry = token_expiry(jwt) if jwt else None
        where = f"Token {row['namespace']}/{row['token']}"
        if jwt is None:
            row["state"] = MISSING
            row["message"] = (
                f"{where}: Secret {secret_name} has no key {key}: the operator has not written "
                "the JWT; see the operator's log (the Token's jwtKeyRef must name the cluster's "
                "JWT key Secret)"
            )
        elif expiry is None:
            row["state"] = UNREADABLE
            row["message"] = f"{where}: Secret {secret_name} key {key} holds no JWT with an expiry"
        else:
            left = expiry - now
            row["expires_in_s"] = round(left, 1)
            overdue = -renewal_due_in_s(lifetime_s, left)
            if left <= 0:
                row["state"] = EXPIRED
            elif refresh and overdue > renewal_slack_s(lifetime_s):
                row["state"] = LATE
            else:
                row["state"] = OK
            row["message"] = _message(where, row, left, overdue)
        rows.append(row)
    return rows


def _message(where: str, row: Mapping[str, t.Any], left: float, overdue: float) -> str:
    if row["state"] == OK:
        return f"{where}: its JWT expires in {int(left)} s"
    if not row["refresh"]:
        return (
            f"{where}: its JWT expired {int(-left)} s ago and the Token has refresh: false; "
            "set refresh: true or give the runs another token"
        )
    ask = (
        f"ask for a renewal: kubectl -n {row['namespace']} annotate token {row['token']} "
        f"{RENEWAL_ANNOTATION}=$(date +%s) --overwrite (scheduled runs of the handover_schedule "
        "role do this themselves)"
    )
    if row["state"] == EXPIRED:
        return (
            f"{where}: its JWT expired {int(-left)} s ago and the operator has not renewed it: "
            f"renewal has stopped; slurmrestd refuses the token; {ask}"
        )
    return (
        f"{where}: its JWT expires in {int(left)} s, {int(overdue)} s past the time the "
        f"operator renews it (four fifths of its {int(row['lifetime_s'])} s lifetime): renewal "
        f"is late or has stopped; {ask}"
    )
