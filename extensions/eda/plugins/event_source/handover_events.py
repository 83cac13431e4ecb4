# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Events for the handover: application pods waiting for a lent node, jobs waiting in Slurm
for an idle pool node, idle pool nodes.

The logic is in plugins/plugin_utils/_handover (event_source, triggers, watches); this file
is what ansible-rulebook loads (by path, outside Ansible's collection loader).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Announce a handover run when an application pod or a Slurm job waits, or pool nodes idle
description:
  - Watches the Kubernetes API (list, then watch with bookmarks; a watch resumes from its
    resourceVersion and lists again after 410 Gone) for Pods, the pool's Nodes and the
    handover Lease. It never polls the Kubernetes API.
  - With O(policy.lend_when=demand) it also reads Slurm's queue of the lendable partitions
    (O(slurm.partitions)) from slurmrestd (O(slurm)) every O(slurm.poll_s) seconds. The jobs
    are asked for only if some changed since the last read (C(update_time); an unchanged queue
    costs slurmctld a short answer), and read in full with the partitions every 5 minutes at
    least. A read that fails
    is logged on one line (never with a token) and tried again at the next poll; until a read
    succeeds again nothing is announced for Slurm's jobs. With O(policy.lend_when=idle) the
    queue is not read, even with O(slurm) given.
  - Emits an event whose C(handover.trigger) is V(demand) when application pods that the
    handover planner counts as demand (the policy's O(policy.demand_selector) and
    O(policy.demand_namespaces)) are unschedulable. The first such pod is announced at once;
    pods that follow within O(debounce_s) of an announcement are gathered into the next
    event, and the event is repeated every O(repeat_s) while such pods stay
    unschedulable, so a run that found the Lease held or failed does not lose it.
  - Emits V(slurm_demand) (with O(policy.lend_when=demand)) when pending jobs of those
    partitions would start on an idle pool node. These are the jobs the handover planner
    places (waiting for resources or priority, not held, not on a dependency or a begin
    time, each of their nodes fitting a pool node's CPUs, memory and GPUs, their time limit
    fitting a reclaim) on the free pool nodes a run could lend now (Ready, schedulable,
    without application pods, idle O(policy.lend_min_idle_s), past
    O(policy.relend_cooldown_s), within O(policy.headroom), O(policy.max_lent) and
    O(policy.max_changes_per_run)), longest idle first. The event names the jobs (C(jobs))
    and the nodes a run would lend for them (C(nodes)). A job that the previous such event
    did not name is announced at once (those that follow within O(debounce_s) are gathered
    into the next event), and the event is repeated every O(repeat_s) while a node could
    still be lent for such jobs.
  - The source does not read Slurm's nodes, so it does not know which lent nodes are idle
    in Slurm; a job that one of them would start is announced too, and the run's plan then
    places it there and lends nothing.
  - Emits V(idle) when a free pool node has been idle for O(policy.lend_min_idle_s) (or is
    idle with no C(idle_since) in its journal yet), once per node and idle period, while
    more nodes are idle than O(policy.headroom). With O(policy.lend_when=demand) only for
    nodes with no C(idle_since) yet (a run records it), as idle nodes alone lend nothing then.
  - Emits nothing while another run holds the handover Lease; it looks again when the
    Lease is released or expires. Nothing is announced before Pods, Nodes and the Lease have
    each been listed once and, with O(policy.lend_when=demand), Slurm's queue has been read.
  - Each event also carries C(reason) (one line), C(pods) (namespace/name), C(nodes) and
    C(at) (UTC, RFC 3339); V(slurm_demand) also C(jobs) (Slurm job ids).
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
  slurm:
    description:
      - How to read Slurm's queue; required with O(policy.lend_when=demand), not used with
        V(idle).
      - The connection options are those of the collection's slurmrestd modules; a
        O(slurm.token_secret) or O(slurm.jwt_key_secret) is read through the Kubernetes API
        with O(kubeconfig) and O(context) (the pod's service account by default).
      - Tokens, given, read or minted, are never logged nor shown in an error. Prefer
        O(slurm.token_secret) to O(slurm.token), since a token given here is written in the
        rulebook's vars file.
    type: dict
    suboptions:
      url:
        description:
          - Base URL of slurmrestd, for example V(http://slurm-restapi.slurm:6820).
          - If not set, the value of the E(SLURMRESTD_URL) environment variable is used.
        type: str
        required: true
      token:
        description:
          - A JWT for slurmrestd.
          - If not set, the value of the E(SLURM_JWT) environment variable is used.
          - Mutually exclusive with O(slurm.jwt_key_path), O(slurm.token_secret) and
            O(slurm.jwt_key_secret).
        type: str
      jwt_key_path:
        description:
          - Path to slurmctld's JWT key (C(AuthAltParameters=jwt_key=)); a short-lived token
            is minted from it for O(slurm.user).
          - If not set, the value of the E(SLURM_JWT_KEY_PATH) environment variable is used.
        type: path
      token_secret:
        description:
          - A Secret that holds the slurmrestd token, such as the one a Slinky C(Token) keeps
            fresh; read at the first poll and again whenever slurmrestd rejects the token in
            hand. The handover_schedule role passes the Secret of its Token.
        type: dict
        suboptions:
          namespace:
            description: The Secret's namespace.
            type: str
            required: true
          name:
            description: The Secret's name.
            type: str
            required: true
          key:
            description: The key that holds the token.
            type: str
            default: auth-token
      jwt_key_secret:
        description:
          - A Secret that holds slurmctld's JWT key, read once and kept in memory only; a
            token is minted from it for O(slurm.user).
        type: dict
        suboptions:
          namespace:
            description: The Secret's namespace.
            type: str
            required: true
          name:
            description: The Secret's name.
            type: str
            required: true
          key:
            description: The key that holds the JWT key.
            type: str
            default: jwt_hs256.key
      user:
        description:
          - The Slurm user the requests are made as (C(X-SLURM-USER-NAME)), and the user a
            token is minted for. Reading the queue needs no more than any user may see.
        type: str
        default: root
        aliases: [username]
      token_lifespan:
        description: Lifetime in seconds of a token minted from a JWT key.
        type: int
        default: 300
      api_version:
        description: The slurmrestd API version; by default the newest both sides speak.
        type: str
        choices: [v0.0.41, v0.0.42, v0.0.43, v0.0.44, v0.0.45]
      validate_certs:
        description: Verify the TLS certificate of slurmrestd.
        type: bool
        default: true
        aliases: [verify_ssl]
      ca_path:
        description: A CA bundle to verify the certificate of slurmrestd with.
        type: path
      timeout:
        description: Seconds to wait for each answer of slurmrestd.
        type: float
        default: 30
      retries:
        description: How many times a request is sent again after a connection error, HTTP 429 or 5xx.
        type: int
        default: 3
      poll_s:
        description:
          - Seconds between two reads of Slurm's queue, 2 or more. A job an idle pool node
            would start is announced within about this time.
        type: float
        default: 15
      partitions:
        description:
          - The lendable partitions whose pending jobs count.
          - By default the partitions named in O(policy.partitions), else V(backfill).
        type: list
        elements: str
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

- name: Lend idle pool nodes only to the jobs that wait in Slurm for them
  hosts: localhost
  sources:
    - hpcops.slinky.handover_events:
        lease_namespace: slurm
        policy:
          pool_selector: {hpcops.io/pool: interactive}
          lend_when: demand
          partitions:
            backfill: {grace_s: 300, escalation: requeue}
        slurm:
          url: http://slurm-restapi.slurm:6820
          # The Secret a Slinky Token keeps fresh (the handover_schedule role makes one).
          token_secret:
            namespace: slurm
            name: hpcops-slinky-handover-slurm-token
          user: slurm
          poll_s: 15
  rules:
    - name: Rebalance when application pods or Slurm's jobs wait
      condition: event.handover.trigger in ["demand", "slurm_demand"]
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
