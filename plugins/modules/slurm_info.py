#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_info
short_description: Read nodes, jobs, partitions and reservations from slurmrestd
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Reads the state of a Slurm cluster through slurmrestd, in one shape whatever the API
    version (v0.0.41 to v0.0.45) the server speaks.
  - Returns what O(gather) asks for; O(nodes), O(node_states), O(partitions),
    O(job_states), O(users) and O(job_ids) narrow the nodes and jobs returned, and O(query)
    keeps only what the caller asks for of each.
  - Jobs are read as slurmrestd sends them, one at a time, so with O(job_states) or
    O(query) only the jobs kept are ever held in memory.
extends_documentation_fragment:
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.kubernetes
  - hpcops.slinky.slurmrestd.ACTIONGROUP
  - hpcops.slinky.attributes
  - hpcops.slinky.attributes.INFO_MODULE
options:
  gather:
    description:
      - What to read. V(all) reads everything.
    type: list
    elements: str
    choices: [all, ping, diag, nodes, jobs, partitions, reservations]
    default: [nodes, jobs, partitions]
  nodes:
    description:
      - Only these nodes, and only the jobs that run on them. Host list expressions such as
        V(node[01-04,07]) are expanded.
    type: list
    elements: str
  node_states:
    description:
      - Only nodes in any of these states. A base state (V(idle), V(allocated), V(mixed),
        V(down)...), a flag (V(drain), V(not_responding), V(dynamic_norm)...) or the derived
        V(drained) and V(draining); case does not matter.
    type: list
    elements: str
  partitions:
    description: Only nodes, jobs and partitions of these partitions.
    type: list
    elements: str
  job_states:
    description: Only jobs in any of these states or with any of these flags (V(running), V(pending)...).
    type: list
    elements: str
  users:
    description: Only jobs of these users.
    type: list
    elements: str
  job_ids:
    description: Only these jobs.
    type: list
    elements: str
  query:
    description:
      - A JMESPath expression per kind of item (V(nodes), V(jobs), V(partitions),
        V(reservations)), applied to each item after the filters above.
      - "The item is replaced by what the expression returns, and left out when it returns
        null or false, so one expression both filters and picks fields, for example
        V(state == 'PENDING' && {id: job_id, partition: partition})."
      - Applied to each job as it is read, so the memory the module needs follows what the
        query keeps, not the size of the queue.
    type: dict
    version_added: 0.1.0
requirements:
  - python-hostlist (to filter by host lists)
  - jmespath (for O(query))
seealso:
  - module: hpcops.slinky.slurm_node
  - module: hpcops.slinky.slurm_job
  - plugin: hpcops.slinky.slurm
    plugin_type: inventory
"""

EXAMPLES = r"""
- name: Nodes that are drained in the backfill partition
  hpcops.slinky.slurm_info:
    url: https://slurmrestd.slurm.svc:6820
    jwt_key_path: /etc/slurm/jwt_hs256.key
    gather: [nodes]
    partitions: [backfill]
    node_states: [drained]
  register: drained

- name: Is slurmctld up?
  hpcops.slinky.slurm_info:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    gather: [ping]
  register: slurm_ping
  failed_when: not (slurm_ping.ping | map(attribute='responding') | first)

- name: Running jobs on two nodes
  hpcops.slinky.slurm_info:
    url: "{{ slurmrestd_url }}"
    gather: [jobs]
    nodes: ["node[01-02]"]
    job_states: [running]
  register: running

- name: Pending jobs of the backfill partition, their id and size only
  hpcops.slinky.slurm_info:
    url: "{{ slurmrestd_url }}"
    gather: [jobs]
    partitions: [backfill]
    query:
      jobs: "state == 'PENDING' && {id: job_id, nodes: node_count, cpus: cpus}"
  register: backfill_queue
"""

RETURN = r"""
api_version:
  description: The slurmrestd API version used.
  returned: always
  type: str
  sample: v0.0.44
ping:
  description: The slurmctld hosts and whether they answer.
  returned: when O(gather) has V(ping)
  type: list
  elements: dict
  sample: [{"hostname": "slurm-controller-0", "responding": true, "latency": 231, "mode": "primary"}]
diag:
  description: slurmctld statistics (C(sdiag)), numbers made plain.
  returned: when O(gather) has V(diag)
  type: dict
nodes:
  description:
    - The nodes. C(state) is the base state and C(state_flags) the flags (C(DRAIN),
      C(DYNAMIC_NORM)...); C(drain_state) is V(draining), V(drained) or null. Numbers that
      Slurm leaves unset are null; unlimited ones are the string V(infinite).
    - C(effective_cpus) are the CPUs jobs may use (C(cpus) less those C(CoreSpecCount)
      reserves); C(specialized_memory) is the MiB C(MemSpecLimit) keeps from jobs.
  returned: when O(gather) has V(nodes)
  type: list
  elements: dict
  sample:
    - name: node01
      state: IDLE
      state_flags: [DRAIN]
      drain_state: drained
      reason: "hpcops: reclaim 4f2a"
      partitions: [batch, backfill]
      features: [gpu]
      cpus: 64
      real_memory: 256000
jobs:
  description:
    - The jobs, with C(state), C(state_flags), C(nodes) (a host list), C(partition),
      C(user_name), times, and what each asks for (C(node_count), C(cpus),
      C(cpus_per_node), C(memory_per_node) and C(memory_per_cpu) in MiB, C(tres_per_node),
      C(tres_requested), C(hold), C(dependency)).
    - With O(query), what its C(jobs) expression returns for each job kept.
  returned: when O(gather) has V(jobs)
  type: list
  elements: dict
partitions:
  description: The partitions with C(nodes), C(priority_tier), C(max_time) (minutes or V(infinite)) and C(state).
  returned: when O(gather) has V(partitions)
  type: list
  elements: dict
reservations:
  description: The reservations with C(node_list), C(start_time), C(end_time) and C(flags).
  returned: when O(gather) has V(reservations)
  type: list
  elements: dict
"""

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    failing_cleanly,
    slurm_client,
    slurmrestd_from_cluster_argspec,
    token_source_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (
    SelectionError,
    item_query,
    job_filter,
    select_nodes,
)

GATHER_CHOICES = ["all", "ping", "diag", "nodes", "jobs", "partitions", "reservations"]
QUERY_KEYS = ("nodes", "jobs", "partitions", "reservations")


def queries(raw: dict[str, object] | None) -> dict[str, t.Callable[[dict[str, t.Any]], t.Any]]:
    """The compiled query per kind of item; SelectionError names the key at fault."""
    found = {}
    for key, expression in (raw or {}).items():
        if key not in QUERY_KEYS:
            raise SelectionError(
                f"query: {key!r} is not a kind of item; use {', '.join(QUERY_KEYS)}"
            )
        if not isinstance(expression, str) or not expression.strip():
            raise SelectionError(f"query.{key}: give a JMESPath expression as a string")
        found[key] = item_query(expression, f"query.{key}")
    return found


def queried(items: list[dict[str, t.Any]], query: t.Any) -> list[t.Any]:
    """The items as the query makes them, without those it leaves out."""
    if query is None:
        return items
    return [found for found in map(query, items) if found is not None]


def main() -> None:
    module = (
        slurmrestd_from_cluster_argspec()
        .update_argspec(
            gather={
                "type": "list",
                "elements": "str",
                "choices": GATHER_CHOICES,
                "default": ["nodes", "jobs", "partitions"],
            },
            nodes={"type": "list", "elements": "str"},
            node_states={"type": "list", "elements": "str"},
            partitions={"type": "list", "elements": "str"},
            job_states={"type": "list", "elements": "str"},
            users={"type": "list", "elements": "str"},
            job_ids={"type": "list", "elements": "str"},
            query={"type": "dict"},
        )
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    gather = set(GATHER_CHOICES[1:]) if "all" in params["gather"] else set(params["gather"])
    client = slurm_client(module, token_source_from_params(module))
    result: dict[str, object] = {"changed": False}
    with failing_cleanly(module, result):
        query = queries(params["query"])
        result["api_version"] = client.api_version
        if "ping" in gather:
            result["ping"] = client.ping()
        if "diag" in gather:
            result["diag"] = client.diag()
        if "nodes" in gather:
            result["nodes"] = queried(
                select_nodes(
                    client.nodes(), params["nodes"], params["node_states"], params["partitions"]
                ),
                query.get("nodes"),
            )
        if "jobs" in gather:
            passes = job_filter(
                job_ids=params["job_ids"],
                nodes=params["nodes"],
                partitions=params["partitions"],
                states=params["job_states"],
                users=params["users"],
            )
            job_query = query.get("jobs")

            def keep(job: dict[str, t.Any]) -> t.Any:
                if not passes(job):
                    return None
                return job_query(job) if job_query is not None else job

            result["jobs"] = client.jobs(keep)
        if "partitions" in gather:
            wanted = set(params["partitions"] or [])
            result["partitions"] = queried(
                [
                    partition
                    for partition in client.partitions()
                    if not wanted or partition["name"] in wanted
                ],
                query.get("partitions"),
            )
        if "reservations" in gather:
            result["reservations"] = queried(client.reservations(), query.get("reservations"))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
