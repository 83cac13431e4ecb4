# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The handover policy, journal, lend label and NodeSet namespace, shared by the modules
    built on handover_module_argspec (keep in step with module_utils/_handover/options.py)."""

    DOCUMENTATION = r"""
options:
  journal_annotation:
    description: The Node annotation that holds the handover journal.
    type: str
    default: hpcops.io/handover
  lend_label:
    description:
      - The label (one key and value) the lendable NodeSets select. Their names (the
        feature Slinky gives their slurmd nodes) tell which Slurm nodes were lent.
    type: dict
    default: {hpcops.io/slurm-lent: "true"}
  nodeset_namespace:
    description:
      - Namespace of the Slinky NodeSets that run slurmd on lent nodes. A lend touches those
        that select the lend label, so that the operator starts slurmd at once.
      - By default NodeSets are looked for in every namespace; naming it lets the run's
        ServiceAccount list and patch NodeSets in that namespace only.
    type: str
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
      lend_when:
        description:
          - When a free, idle pool node is lent to Slurm.
          - V(idle) lends every node idle O(policy.lend_min_idle_s) beyond the headroom,
            whatever Slurm's queue holds.
          - V(demand) lends only as many as the pending jobs of the lendable partitions need,
            longest idle first. A job counts when it waits for resources or priority (not
            held, not on a dependency or a begin time), each of its nodes fits a pool node's
            CPUs, memory and GPUs, and its time limit fits a reclaim (within the partition's
            grace, or requeue-able where the escalation is V(requeue)).
        type: str
        choices: [idle, demand]
        default: idle
        version_added: 0.1.0
      demand_headroom:
        description:
          - With O(policy.lend_when=demand), nodes lent beyond what the waiting jobs need,
            while any job waits.
        type: int
        default: 0
        version_added: 0.1.0
      demand_return_idle_s:
        description:
          - With O(policy.lend_when=demand), a lent node idle in Slurm this many seconds
            (since its last job, or its lend) that no waiting job needs is given back, in a
            run that lends nothing.
          - Unset, lent nodes stay lent until the applications need them, as with V(idle).
            Giving them back doubled the lends and reclaims in the trace benchmark without
            shortening any wait (README, the two lending modes).
        type: int
        version_added: 0.1.0
"""

    # The options of the node work (module_utils/_handover/batch.py HANDOVER_WORK_SPEC),
    # shared by node_handover and handover_run.
    WORK = r"""
options:
  holder:
    description: Who acts, as written in the journal and the Events (the Lease holder in a scheduled run).
    type: str
    default: hpcops.slinky
  lent_taint:
    description: The taint that keeps application pods off a lent node (the slurmd pods tolerate it).
    type: dict
    default: {}
    suboptions:
      key:
        description: Taint key.
        type: str
        default: hpcops.io/lent
      value:
        description: Taint value.
        type: str
        default: slurm
      effect:
        description: Taint effect.
        type: str
        choices: [NoSchedule, NoExecute]
        default: NoSchedule
  reason_prefix:
    description:
      - Slurm drain reasons that start with it are ours. A drain set by somebody else is kept
        and reported, never cleared.
    type: str
    default: "hpcops:"
  lend_timeout_s:
    description: Seconds to wait for slurmd to register before the lend is given up and rolled back.
    type: float
    default: 120
  pod_timeout_s:
    description:
      - Seconds to wait for the slurmd pod to go once it is deleted, beyond its own
        termination grace; for the operator to remove it first after an escalation; and for
        jobs to leave after the escalation.
    type: float
    default: 30
  poll_interval_s:
    description:
      - Seconds between two looks at Slurm while waiting (the slurmd pod's end is watched).
      - The first looks of a wait come sooner (after 0.05 s, doubling up to this), as most
        waits of an idle handover end within a few tenths of a second.
    type: float
    default: 0.5
  max_parallel:
    description: Nodes handed over at once.
    type: int
    default: 8
  shared_reads_from:
    description:
      - From this many nodes handed over at once, the workers share one read of all Slurm
        nodes per O(poll_interval_s) instead of each reading its own node while it waits,
        which keeps slurmrestd's load flat however many nodes move.
      - Below it, each worker reads its own node (cheaper at a site of thousands of nodes).
        V(0) never shares.
    type: int
    default: 4
  event_namespace:
    description: Namespace of the Events written on the Nodes.
    type: str
    default: default
"""
