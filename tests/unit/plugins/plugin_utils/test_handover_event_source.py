# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The event source's arguments: defaults, the selector it watches Nodes with, bad input."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.event_source import (
    SourceArgumentError,
    source_settings,
)

POLICY = {"pool_selector": {"hpcops.io/pool": "interactive", "site": "a"}}


def test_defaults_and_the_node_selector() -> None:
    settings = source_settings({"policy": POLICY})
    assert settings.node_label_selector == "hpcops.io/pool=interactive,site=a"
    assert (settings.lease_namespace, settings.lease_name) == ("slurm", "hpcops-slinky-handover")
    assert settings.triggers.debounce_s == 2.0 and settings.triggers.repeat_s == 30.0
    assert settings.triggers.journal_annotation == "hpcops.io/handover"
    assert settings.triggers.policy.headroom == 1  # the handover policy's own default
    assert settings.kubeconfig == "" and settings.watch_timeout_s == 300


def test_numbers_given_as_rulebook_strings_are_taken() -> None:
    # A rulebook's "{{ ... }}" may render a number as text.
    settings = source_settings({"policy": POLICY, "debounce_s": "0.5", "repeat_s": "10"})
    assert (settings.triggers.debounce_s, settings.triggers.repeat_s) == (0.5, 10.0)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ({}, ["policy"]),
        ({"policy": {}}, ["pool_selector"]),
        ({"policy": {**POLICY, "headroom": "two"}}, ["headroom"]),
        ({"policy": {**POLICY, "headroom": -1}}, ["policy.headroom"]),
        ({"policy": POLICY, "repeat_s": 0}, ["repeat_s", "1 or more"]),
        ({"policy": POLICY, "debounce_s": "soon"}, ["debounce_s"]),
        ({"policy": POLICY, "lease_nmespace": "slurm"}, ["lease_nmespace", "lease_namespace"]),
    ],
)
def test_bad_arguments_name_themselves(args: dict[str, t.Any], names: list[str]) -> None:
    with pytest.raises(SourceArgumentError) as caught:
        source_settings(args)
    message = str(caught.value)
    assert message.startswith("hpcops.slinky.handover_events: ")
    for name in names:
        assert name in message
