# SPDX-License-Identifier: GPL-3.0-or-later
"""Which firewall rules tests/lab/docker_engine.py takes for a killed dockerd's: its chains,
its bridges and the hairpin MASQUERADE of a published port, never a rule of the site's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))
from docker_engine import DOCKERD_RULE


@pytest.mark.parametrize(
    "rule",
    [
        "-A FORWARD -j DOCKER-USER",
        "-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE",
        "-A FORWARD -o br-0123456789ab -j ACCEPT",
        # kind's control plane publishes 6443; dockerd names no chain of its own here.
        "-A POSTROUTING -s 172.18.0.3/32 -d 172.18.0.3/32 -p tcp -m tcp --dport 6443 -j MASQUERADE",
    ],
)
def test_a_killed_dockerds_rule_is_recognised(rule: str) -> None:
    assert DOCKERD_RULE.search(rule)


@pytest.mark.parametrize(
    "rule",
    [
        "-A POSTROUTING -s 10.0.0.0/8 -o eth0 -j MASQUERADE",
        "-A POSTROUTING -s 10.1.0.5/32 -d 10.1.0.6/32 -p tcp -m tcp --dport 22 -j MASQUERADE",
        "-A INPUT -p tcp -m tcp --dport 6443 -j ACCEPT",
    ],
)
def test_a_sites_rule_is_left_alone(rule: str) -> None:
    assert not DOCKERD_RULE.search(rule)
