# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a Slinky Token's JWT is renewed on time, judged from the Token and its Secret."""

from __future__ import annotations

import base64
import json
import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.slinky_tokens import (
    RENEWAL_ANNOTATION,
    go_duration_s,
    token_health,
    token_secret,
)

NOW = 1_800_000_000.0


def jwt(exp: float | None) -> str:
    def part(obj: dict[str, t.Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    claims = {"sun": "slurm", "iat": int(NOW) - 60} | ({"exp": exp} if exp is not None else {})
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def token(name: str = "runs", **spec: t.Any) -> dict[str, t.Any]:
    return {
        "metadata": {"name": name, "namespace": "slurm"},
        "spec": {"username": "slurm", "jwtKeyRef": {"name": "slurm-jwt-key"}, **spec},
    }


def secret(name: str, key: str, value: str) -> dict[str, t.Any]:
    return {"metadata": {"name": name}, "data": {key: base64.b64encode(value.encode()).decode()}}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h", 3600), ("15m0s", 900), ("1h30m", 5400), ("90s", 90), ("1.5h", 5400), ("500ms", 0.5)],
)
def test_go_durations_as_kubernetes_writes_them(text: str, seconds: float) -> None:
    assert go_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "1 h", "15", "1d", "h", None, 15])
def test_what_is_no_go_duration_is_none(text: t.Any) -> None:
    assert go_duration_s(text) is None


def test_the_secret_follows_the_operator_defaults_unless_the_token_names_one() -> None:
    assert token_secret(token()) == ("runs-jwt-slurm", "SLURM_JWT")
    assert token_secret({"metadata": {"name": "x"}, "spec": {}}) == ("x-jwt-nobody", "SLURM_JWT")
    named = token(secretRef={"name": "handover-token", "key": "auth-token"})
    assert token_secret(named) == ("handover-token", "auth-token")


def health(tok: dict[str, t.Any], exp: float | None) -> dict[str, t.Any]:
    name, key = token_secret(tok)
    (row,) = token_health([tok], [secret(name, key, jwt(exp))], NOW)
    return row


def test_a_jwt_renewed_on_time_is_ok() -> None:
    # 1h lifetime: the operator renews 12 min before expiry; 20 min left is fine.
    row = health(token(lifetime="1h"), NOW + 1200)
    assert (row["state"], row["expires_in_s"], row["lifetime_s"]) == ("ok", 1200.0, 3600.0)


def test_a_jwt_just_due_for_renewal_is_still_ok() -> None:
    # 12 min left of 1h is the renewal point; 11 min 30 s left is within the slack (60 s).
    assert health(token(lifetime="1h"), NOW + 690)["state"] == "ok"


def test_a_jwt_past_its_renewal_by_more_than_the_slack_is_late() -> None:
    row = health(token(lifetime="1h"), NOW + 600)  # 2 min past the renewal point
    assert row["state"] == "late"
    assert "120 s past the time the operator renews it" in row["message"]
    assert f"annotate token runs {RENEWAL_ANNOTATION}=" in row["message"]


def test_an_expired_jwt_says_renewal_has_stopped_and_what_to_do() -> None:
    row = health(token(lifetime="15m"), NOW - 30)
    assert row["state"] == "expired"
    assert row["expires_in_s"] == -30.0
    assert "expired 30 s ago and the operator has not renewed it" in row["message"]
    assert "kubectl -n slurm annotate token runs" in row["message"]


def test_the_default_lifetime_is_the_operators() -> None:
    # 15 min: renewal 3 min before expiry, slack 60 s: 2 min left is 60 s past it (ok),
    # 100 s left is 80 s past it (late).
    assert health(token(), NOW + 120)["state"] == "ok"
    row = health(token(), NOW + 100)
    assert (row["lifetime_s"], row["state"]) == (900.0, "late")


def test_short_lifetimes_get_a_slack_of_a_tenth() -> None:
    # 60 s lifetime: renewal at 12 s left, slack 6 s: 7 s left is ok, 5 s left is late.
    assert health(token(lifetime="60s"), NOW + 7)["state"] == "ok"
    assert health(token(lifetime="60s"), NOW + 5)["state"] == "late"


def test_a_token_that_is_never_renewed_is_expired_with_its_own_fix() -> None:
    assert health(token(lifetime="1h", refresh=False), NOW + 60)["state"] == "ok"
    row = health(token(lifetime="1h", refresh=False), NOW - 1)
    assert row["state"] == "expired" and "refresh: false" in row["message"]


def test_a_missing_secret_or_key_and_a_secret_without_a_jwt_are_named() -> None:
    (row,) = token_health([token()], [], NOW)
    assert (
        row["state"] == "missing" and "Secret runs-jwt-slurm has no key SLURM_JWT" in row["message"]
    )
    (row,) = token_health([token()], [secret("runs-jwt-slurm", "other", "x")], NOW)
    assert row["state"] == "missing"
    (row,) = token_health([token()], [secret("runs-jwt-slurm", "SLURM_JWT", "not-a-jwt")], NOW)
    assert row["state"] == "unreadable" and row["expires_in_s"] is None
    assert health(token(), None)["state"] == "unreadable"


def test_rows_never_hold_the_jwt_and_are_sorted() -> None:
    value = jwt(NOW + 600)
    rows = token_health(
        [token("b"), token("a")],
        [secret("a-jwt-slurm", "SLURM_JWT", value), secret("b-jwt-slurm", "SLURM_JWT", value)],
        NOW,
    )
    assert [row["token"] for row in rows] == ["a", "b"]
    assert value not in json.dumps(rows)
    assert value.split(".")[1] not in json.dumps(rows)
