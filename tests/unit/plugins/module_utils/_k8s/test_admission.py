# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a webhook answers: what a refusal looks like, and how long it is asked for."""

from __future__ import annotations

import json
import typing as t

import pytest
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError, api_exception

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.admission import (
    ACCEPTED,
    Answer,
    ask,
    denied_by,
    wait_for_denial,
)

WEBHOOK = "controller-v1beta1.kb.io"
# The apiserver's words when the Slinky webhook refuses the check's Controller.
REFUSED = (
    f'admission webhook "{WEBHOOK}" denied the request: ClusterName exceeds 40 characters '
    "(50): hpcops-slinky-check-must-be-refused-by-the-webhook"
)
# ... and while the webhook's caBundle is not injected yet.
NOT_TRUSTED = (
    f'Internal error occurred: failed calling webhook "{WEBHOOK}": failed to call webhook: '
    'Post "https://slurm-operator-webhook.slinky.svc:443/validate-slinky-slurm-net-v1beta1-'
    'controller?timeout=10s": tls: failed to verify certificate: x509: certificate signed by '
    "unknown authority"
)
CONTROLLER = {
    "apiVersion": "slinky.slurm.net/v1beta1",
    "kind": "Controller",
    "metadata": {"name": "hpcops-slinky-check", "namespace": "slinky"},
    "spec": {"clusterName": "x" * 41},
}


def test_only_a_webhooks_refusal_names_it() -> None:
    assert denied_by(REFUSED) == WEBHOOK
    assert denied_by(NOT_TRUSTED) == ""
    assert denied_by('admission webhook "validate.kyverno.svc" denied the request: no') == (
        "validate.kyverno.svc"
    )
    assert denied_by(ACCEPTED) == ""


class Clock:
    """A clock that moves only when the code under test sleeps (or asks take time)."""

    def __init__(self, per_question: float = 0.0) -> None:
        self.now = 100.0
        self.per_question = per_question
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def answers(*said: Answer, clock: Clock) -> t.Callable[[], Answer]:
    queue = list(said)

    def question() -> Answer:
        clock.now += clock.per_question
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return question


def test_asks_again_until_the_webhook_itself_refuses() -> None:
    clock = Clock()
    question = answers(
        Answer(None, "the API has no Controller in slinky.slurm.net/v1beta1"),
        Answer(500, NOT_TRUSTED),
        Answer(201, ACCEPTED),
        Answer(403, 'admission webhook "other.example.com" denied the request: no'),
        Answer(403, REFUSED),
        clock=clock,
    )
    probe = wait_for_denial(question, WEBHOOK, 60, 2, clock, clock.sleep)
    assert probe.denied
    assert (probe.attempts, probe.waited_s, clock.sleeps) == (5, 8.0, [2, 2, 2, 2])
    assert probe.answer.describe() == f"HTTP 403: {REFUSED}"


def test_gives_up_at_the_timeout_with_the_last_answer() -> None:
    clock = Clock(per_question=0.5)  # each dry run takes half a second
    probe = wait_for_denial(
        answers(Answer(500, NOT_TRUSTED), clock=clock), WEBHOOK, 4.5, 2, clock, clock.sleep
    )
    assert not probe.denied
    assert probe.answer.message == NOT_TRUSTED
    # Never sleeps past the deadline (the second sleep is cut to the 1.5 s left), and asks
    # once more at it.
    assert clock.sleeps == [2, 1.5]
    assert (probe.attempts, probe.waited_s) == (3, 5.0)


def test_a_zero_timeout_asks_once() -> None:
    clock = Clock()
    probe = wait_for_denial(
        answers(Answer(201, ACCEPTED), clock=clock), WEBHOOK, 0, 2, clock, clock.sleep
    )
    assert (probe.denied, probe.attempts, clock.sleeps) == (False, 1, [])


def api_error(status: int, message: str) -> Exception:
    err = ApiException(status=status, reason="Forbidden" if status == 403 else "Internal")
    err.body = json.dumps({"kind": "Status", "status": "Failure", "message": message}).encode()
    err.headers = {"Content-Type": "application/json"}
    try:
        raise err
    except ApiException as raised:
        return api_exception(raised)


class FakeClient:
    """kubernetes.core's client as dry_run_create uses it: resource() and create()."""

    def __init__(self, outcome: Exception | None = None) -> None:
        self.outcome = outcome
        self.calls: list[dict[str, t.Any]] = []

    def resource(self, kind: str, api_version: str) -> tuple[str, str]:
        if isinstance(self.outcome, ResourceNotFoundError):
            raise self.outcome
        return (api_version, kind)

    def create(self, resource: t.Any, body: dict[str, t.Any], **params: t.Any) -> t.Any:
        self.calls.append({"resource": resource, "body": body, **params})
        if self.outcome is not None:
            raise self.outcome

        class Created:
            def to_dict(self) -> dict[str, t.Any]:
                return body

        return Created()


def test_the_object_goes_as_a_server_side_dry_run() -> None:
    client = FakeClient(api_error(403, REFUSED))
    answer = ask(client, CONTROLLER)
    assert (answer.status, answer.webhook) == (403, WEBHOOK)
    (call,) = client.calls
    assert call["dry_run"] == "All"
    assert call["namespace"] == "slinky"
    assert call["resource"] == ("slinky.slurm.net/v1beta1", "Controller")


@pytest.mark.parametrize(
    ("outcome", "status", "message"),
    [
        (None, 201, ACCEPTED),
        (api_error(500, NOT_TRUSTED), 500, NOT_TRUSTED),
        (
            ResourceNotFoundError("no Controller"),
            None,
            "the API has no Controller in slinky.slurm.net/v1beta1",
        ),
    ],
)
def test_every_other_answer_is_reported_as_the_apiserver_gave_it(
    outcome: Exception | None, status: int | None, message: str
) -> None:
    answer = ask(FakeClient(outcome), CONTROLLER)
    assert (answer.status, answer.message, answer.webhook) == (status, message, "")
