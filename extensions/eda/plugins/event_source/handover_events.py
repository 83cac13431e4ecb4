# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Events for the handover: application pods waiting for a lent node, idle pool nodes.

The logic is in plugins/plugin_utils/_handover (event_source, triggers, watches); this file
is what ansible-rulebook loads (by path, outside Ansible's collection loader).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Announce a handover run when an application pod waits or pool nodes idle
description:
  - Watches the Kubernetes API (list, then watch with bookmarks; a watch resumes from its
    resourceVersion and lists again after 410 Gone) for Pods, the pool's Nodes and the
    handover Lease. It never polls.
  - Emits C({handover: {trigger: demand, ...}}) when application pods that the handover
    planner counts as demand (the policy's O(policy.demand_selector) and
    O(policy.demand_namespaces)) are unschedulable. The first such pod is announced at once;
    pods that follow within O(debounce_s) of an announcement are gathered into the next
    event, and the event is repeated every O(repeat_s) while such pods stay
    unschedulable, so a run that found the Lease held or failed does not lose it.
  - Emits C({handover: {trigger: idle, ...}}) when a free pool node has been idle for
    O(policy.lend_min_idle_s) (or is idle with no C(idle_since) in its journal yet), once
    per node and idle period, while more nodes are idle than O(policy.headroom).
  - Emits nothing while another run holds the handover Lease; it looks again when the
    Lease is released or expires.
  - Each event also carries C(reason) (one line), C(pods) (namespace/name), C(nodes) and
    C(at) (UTC, RFC 3339).
options:
  policy:
    description:
      - The handover policy, as the handover role and the modules take it (the
        C(hpcops.slinky.handover) doc fragment); C(pool_selector) is required.
    type: dict
    required: true
  journal_annotation:
    description: The Node annotation of the handover journal.
    type: str
    default: hpcops.io/handover
  kubeconfig:
    description:
      - Path of a kubeconfig. Without it and O(context), a pod's service account is used
        when the source runs in a pod, else the default kubeconfig.
    type: path
  context:
    description: The kubeconfig context.
    type: str
  lease_namespace:
    description: Namespace of the handover Lease (the handover role's C(handover_lease_namespace)).
    type: str
    default: slurm
  lease_name:
    description: Name of the handover Lease.
    type: str
    default: hpcops-slinky-handover
  debounce_s:
    description: Seconds after a demand event during which further unschedulable pods are gathered into the next one.
    type: float
    default: 2.0
  repeat_s:
    description: Seconds between repeats of a demand event while the pods stay unschedulable.
    type: float
    default: 30.0
  watch_timeout_s:
    description: Seconds each watch asks the server to keep it open before it is renewed.
    type: int
    default: 300
  backoff_max_s:
    description: Longest wait between attempts while the API server cannot be reached.
    type: float
    default: 30.0
"""

EXAMPLES = r"""
- name: Reclaim lent nodes when application pods wait
  hosts: localhost
  sources:
    - hpcops.slinky.handover_events:
        kubeconfig: /etc/hpcops-slinky/kubeconfig
        lease_namespace: slurm
        policy:
          pool_selector: {hpcops.io/pool: interactive}
          demand_selector: {hpcops.io/demand: "true"}
  rules:
    - name: Rebalance on demand
      condition: event.handover.trigger == "demand"
      action:
        run_playbook:
          name: hpcops.slinky.rebalance
"""

import os  # noqa: E402 (after the documentation, as in Ansible's plugins)
import sys  # noqa: E402


def _collections_on_path() -> None:
    """ansible-rulebook runs this file by path: make its collection importable."""
    try:
        import ansible_collections.hpcops.slinky  # noqa: F401, PLC0415  # pylint: disable=unused-import
    except ImportError:
        # <root>/ansible_collections/hpcops/slinky/extensions/eda/plugins/event_source/<this>
        # (not resolved: the collection may be a link to a checkout).
        here = os.path.abspath(__file__)
        for _level in range(8):
            here = os.path.dirname(here)
        sys.path.insert(0, here)


_collections_on_path()

# Only once the collection is importable.
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.event_source import (  # noqa: E402
    run as main,
)

__all__ = ["main"]
