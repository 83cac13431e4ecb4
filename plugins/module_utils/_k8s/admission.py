# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a validating admission webhook answers: it must refuse an object sent as a
server-side dry run, so nothing is ever created.

PRIVATE to the collection: names here can change without notice.

A webhook installed a moment ago may not answer yet: its certificate, and the caBundle the
apiserver trusts it by, arrive a few seconds after its pod (cert-manager's CA injector), and
until then the apiserver reports that it failed calling the webhook. `wait_for_denial` asks
again until the named webhook itself refuses the object, or the time is up. `denied_by` and
`wait_for_denial` are pure (the question and the clock are passed in).
"""

from __future__ import annotations

import re
import time
import typing as t
from collections.abc import Callable
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    Refused,
    dry_run_create,
)

# How the apiserver words a validating webhook's refusal (k8s.io/apiserver
# admission/plugin/webhook/errors: "admission webhook %q denied the request: %s").
_DENIED = re.compile(r'admission webhook "(?P<webhook>[^"]+)" denied the request')


def denied_by(message: str) -> str:
    """The webhook that refused a request, from the apiserver's message; "" when none did."""
    found = _DENIED.search(message)
    return found.group("webhook") if found else ""


@dataclass(frozen=True)
class Answer:
    """What the apiserver said to one dry run; status None when it gave no HTTP status."""

    status: int | None
    message: str

    @property
    def webhook(self) -> str:
        return denied_by(self.message)

    def describe(self) -> str:
        return f"HTTP {self.status}: {self.message}" if self.status else self.message


# The answer when nothing refused the object: no webhook saw it (not registered, or its
# namespaceSelector leaves the namespace out) or it let it through.
ACCEPTED = "the apiserver would have created it: no validating webhook refused it"


def ask(client: t.Any, body: dict[str, t.Any]) -> Answer:
    """Send `body` as a server-side dry run and return what the apiserver said."""
    try:
        dry_run_create(client, body)
    except Refused as err:
        return Answer(err.status, err.message)
    return Answer(201, ACCEPTED)


@dataclass(frozen=True)
class Probe:
    """The last answer, how many dry runs were sent and how long it took."""

    answer: Answer
    attempts: int
    waited_s: float
    webhook: str

    @property
    def denied(self) -> bool:
        """Whether the webhook asked for refused the object (it answers)."""
        return self.answer.webhook == self.webhook


def wait_for_denial(
    question: Callable[[], Answer],
    webhook: str,
    timeout_s: float,
    poll_interval_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Probe:
    """Ask until `webhook` refuses the object or `timeout_s` has passed (asked once at least).

    Every other answer is asked again: a failed call to the webhook (not up, no certificate
    or caBundle yet), an acceptance (the webhook configuration not read yet), another
    webhook's refusal. The last one is returned, so a caller can say why it gave up.
    """
    started = clock()
    attempts = 0
    while True:
        answer = question()
        attempts += 1
        waited = clock() - started
        if answer.webhook == webhook or waited >= timeout_s:
            return Probe(answer, attempts, round(waited, 1), webhook)
        sleep(min(poll_interval_s, timeout_s - waited))
