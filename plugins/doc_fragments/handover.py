# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The handover policy and journal, shared by handover_plan and node_handover (keep in
    step with module_utils/_handover/options.py)."""

    DOCUMENTATION = r"""
options:
  journal_annotation:
    description: The Node annotation that holds the handover journal.
    type: str
    default: hpcops.io/handover
  policy:
    description: What may be lent and what must stay with the applications.
    type: dict
    required: true
    suboptions:
      pool_selector:
        description: Labels of the lendable pool's nodes; no other node is ever planned.
        type: dict
        required: true
      never_touch_selector:
        description: Labels of pool nodes that must never be lent.
        type: dict
        default: {}
      headroom:
        description: Free, idle pool nodes kept for applications beyond the pending demand.
        type: int
        default: 1
      max_lent:
        description: At most this many nodes lent at once (unset, no count limit).
        type: int
      max_lent_fraction:
        description: At most this fraction of the pool lent at once.
        type: float
        default: 1.0
      lend_min_idle_s:
        description: Seconds a node must have run no application pod before it is lent.
        type: int
        default: 600
      relend_cooldown_s:
        description: Seconds after a reclaim before the node may be lent again.
        type: int
        default: 1800
      max_changes_per_run:
        description: Nodes one run may lend, reclaim or resume.
        type: int
        default: 8
      demand_namespaces:
        description: Namespaces whose unschedulable pods count as demand (empty, all but the system ones).
        type: list
        elements: str
        default: []
      demand_selector:
        description: Labels a pending pod must carry to count as demand.
        type: dict
        default: {}
      system_namespaces:
        description: Namespaces whose pods never make a node busy nor count as demand.
        type: list
        elements: str
        default: [kube-system, kube-node-lease, kube-public]
      partitions:
        description:
          - Per Slurm partition, C(grace_s) (seconds jobs get to finish when their node is
            reclaimed) and C(escalation) (V(requeue), V(cancel) or V(wait)).
          - Nodes running jobs of a V(wait) partition are reclaimed last.
        type: dict
        default: {}
      default_escalation:
        description: The escalation of partitions not in C(partitions).
        type: str
        choices: [requeue, cancel, wait]
        default: requeue
      default_grace_s:
        description: The grace of partitions not in C(partitions).
        type: int
        default: 300
      admin_drain:
        description:
          - What a reclaim does with a lent node that somebody else drained in Slurm, for
            example an admin with the reason C(hw - ECC errors). Either way the reason is kept
            in the node's journal (C(admin_drain)), in a Warning Event and in the run's
            warnings, and status shows it.
          - V(cordon) gives the node back cordoned, so that no application lands on it before a
            person has looked; V(return) gives it back schedulable.
        type: str
        choices: [cordon, return]
        default: cordon
"""
