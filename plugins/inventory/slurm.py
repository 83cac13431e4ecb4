# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm
short_description: Slurm nodes from slurmrestd as inventory hosts
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Makes every node of a Slurm cluster a host, read through slurmrestd.
  - Groups hosts by partition (C(slurm_partition_<name>)), by state and state flag
    (C(slurm_state_idle), C(slurm_state_drain), C(slurm_state_drained)...) and by feature
    (C(slurm_feature_<name>)); every host is in C(slurm).
  - The node's facts (state, reason, partitions, features, CPUs, memory, address...) become
    host variables prefixed with O(hostvar_prefix).
  - The inventory file name must end in C(slurm.yml) or C(slurm.yaml).
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: The name of this plugin.
    type: str
    required: true
    choices: [hpcops.slinky.slurm]
  url:
    description: Base URL of slurmrestd.
    type: str
    required: true
    env:
      - name: SLURMRESTD_URL
  token:
    description: A JWT for slurmrestd. Mutually exclusive with O(jwt_key_path).
    type: str
    env:
      - name: SLURM_JWT
  jwt_key_path:
    description: slurmctld's JWT key; a short-lived token is minted from it for O(user).
    type: path
    env:
      - name: SLURM_JWT_KEY_PATH
  user:
    description: The Slurm user of the requests.
    type: str
    default: root
  api_version:
    description: Pin an API version; by default the newest that both sides speak.
    type: str
    choices: [v0.0.41, v0.0.42, v0.0.43, v0.0.44, v0.0.45]
  validate_certs:
    description: Verify slurmrestd's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A CA bundle to verify slurmrestd's certificate with.
    type: path
  timeout:
    description: Seconds to wait for each answer.
    type: float
    default: 30
  nodes:
    description: Only these nodes (names or host lists such as V(node[01-04])).
    type: list
    elements: str
  partitions:
    description: Only nodes of these partitions.
    type: list
    elements: str
  node_states:
    description: Only nodes in any of these states (V(idle), V(drain), V(drained)...).
    type: list
    elements: str
  hostvar_prefix:
    description: Prefix of the host variables with the node's facts.
    type: str
    default: slurm_
requirements:
  - python-hostlist (to filter by host lists)
seealso:
  - module: hpcops.slinky.slurm_info
"""

EXAMPLES = r"""
# inventories/site/cluster.slurm.yml
plugin: hpcops.slinky.slurm
url: https://slurmrestd.slurm.svc:6820
jwt_key_path: /etc/slurm/jwt_hs256.key
partitions: [batch, backfill]
# Reach the nodes by their Slurm address, and group them by CPU architecture.
compose:
  ansible_host: slurm_address
keyed_groups:
  - key: slurm_architecture
    prefix: arch
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/hpcops-slurm-inventory
cache_timeout: 300

# Then, for example: ansible slurm_state_drained -i inventories/site -m ansible.builtin.ping
"""

import typing as t

from ansible.errors import AnsibleError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (
    SelectionError,
    select_nodes,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    SlurmRestClient,
    SlurmRestError,
)


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "hpcops.slinky.slurm"

    def verify_file(self, path: str) -> bool:
        return bool(super().verify_file(path)) and path.endswith(("slurm.yml", "slurm.yaml"))

    def parse(self, inventory: t.Any, loader: t.Any, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        cache_key = self.get_cache_key(path)
        use_cache = bool(self.get_option("cache")) and cache
        nodes = None
        if use_cache:
            try:
                nodes = self._cache[cache_key]
            except KeyError:
                nodes = None
        if nodes is None:
            nodes = self._read_nodes()
            if self.get_option("cache"):
                self._cache[cache_key] = nodes
        self._populate(nodes)

    def _read_nodes(self) -> list[dict[str, t.Any]]:
        token = self.get_option("token")
        try:
            client = SlurmRestClient(
                Connection(
                    url=self.get_option("url"),
                    token=str(token) if token else None,
                    jwt_key_path=self.get_option("jwt_key_path"),
                    user=self.get_option("user"),
                    api_version=self.get_option("api_version"),
                    validate_certs=self.get_option("validate_certs"),
                    ca_path=self.get_option("ca_path"),
                    timeout=self.get_option("timeout"),
                )
            )
            return select_nodes(
                client.nodes(),
                names=self.get_option("nodes"),
                states=self.get_option("node_states"),
                partitions=self.get_option("partitions"),
            )
        except (SlurmRestError, SelectionError) as err:
            raise AnsibleError(f"hpcops.slinky.slurm inventory: {err}") from None

    def _populate(self, nodes: list[dict[str, t.Any]]) -> None:
        prefix = self.get_option("hostvar_prefix")
        strict = self.get_option("strict")
        self.inventory.add_group("slurm")
        for node in nodes:
            host = node["name"]
            self.inventory.add_host(host, group="slurm")
            for key, value in node.items():
                self.inventory.set_variable(host, f"{prefix}{key}", value)
            groups = [f"slurm_partition_{partition}" for partition in node["partitions"]]
            states = [node["state"], *node["state_flags"]]
            if node["drain_state"]:
                states.append(node["drain_state"])
            groups += [f"slurm_state_{state.lower()}" for state in states]
            groups += [f"slurm_feature_{feature}" for feature in node["features"]]
            for group in map(self._sanitize_group_name, groups):
                self.inventory.add_group(group)
                self.inventory.add_child(group, host)
            host_vars = self.inventory.get_host(host).get_vars()
            self._set_composite_vars(self.get_option("compose"), host_vars, host, strict=strict)
            self._add_host_to_composed_groups(
                self.get_option("groups"), host_vars, host, strict=strict
            )
            self._add_host_to_keyed_groups(
                self.get_option("keyed_groups"), host_vars, host, strict=strict
            )
