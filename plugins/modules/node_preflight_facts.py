#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_preflight_facts
short_description: Read what the bare-metal preflight checks on a Kubernetes node's host
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Runs on a node host and reads, without changing anything, what decides whether Slinky
    works there - the cgroup hierarchy and its controllers, kernel release, sysctls and
    modules, swap, containerd's effective configuration (C(containerd config dump)), the
    kubelet's configuration file, drop-ins and flags, the NVIDIA driver and fabric manager,
    whether the kernel clock is synchronised and which time service runs, name resolution,
    interfaces with their MTU and addresses, the slurm user and mounts.
  - It judges nothing; the P(hpcops.slinky.node_preflight#filter) filter compares what it
    read with the inventory on the controller. The node_prep role and
    C(playbooks/preflight.yml) use both.
  - Needs only Python's standard library on the host, and C(ip) (iproute2) for interfaces.
    Reading the kubelet's flags and containerd's configuration needs root.
options:
  sysctls:
    description: Names of the sysctls to read (C(net.ipv4.ip_forward)).
    type: list
    elements: str
    default: []
  kernel_modules:
    description: Kernel modules whose state (loaded, builtin, missing) to read.
    type: list
    elements: str
    default: []
  mounts:
    description: Paths whose mounted filesystem to read.
    type: list
    elements: path
    default: []
  resolve:
    description: Names to resolve as this host resolves them.
    type: list
    elements: str
    default: []
  slurm_user:
    description: The user whose uid and gid to read.
    type: str
    default: slurm
  kubelet_config:
    description: The kubelet's configuration file, when the running kubelet does not name one.
    type: path
    default: /var/lib/kubelet/config.yaml
  containerd_config:
    description: containerd's configuration file.
    type: path
    default: /etc/containerd/config.toml
extends_documentation_fragment:
  - hpcops.slinky.attributes
  - hpcops.slinky.attributes.INFO_MODULE
notes:
  - The kernel clock counts as synchronised when C(adjtimex(2)) says so, whichever service
    disciplines it; in a container that is the host's clock.
"""

EXAMPLES = r"""
- name: Read the host
  hpcops.slinky.node_preflight_facts:
    sysctls: [net.ipv4.ip_forward]
    kernel_modules: [overlay, br_netfilter]
    mounts: [/home]
    resolve: "{{ groups['slinky_nodes'] }}"
  become: true
  register: node_facts

- name: Show the cgroup hierarchy
  ansible.builtin.debug:
    msg: "{{ node_facts.facts.cgroup.mode }}"  # unified, hybrid, legacy
"""

RETURN = r"""
facts:
  description: What was read, by subject.
  returned: always
  type: dict
  contains:
    hostname:
      description: The host's name.
      type: str
    os:
      description: The C(id), C(version_id) and C(pretty_name) of /etc/os-release.
      type: dict
    kernel:
      description: The C(release) and the C(cmdline).
      type: dict
    cgroup:
      description: The C(mode) (unified, hybrid, legacy or none) and the enabled C(controllers).
      type: dict
    sysctls:
      description: Each sysctl's value; null when the host has no such sysctl.
      type: dict
    kernel_modules:
      description: Each module's state - loaded, builtin or missing.
      type: dict
    swap:
      description: The active swap C(devices), their C(total_kib), and the swap entries of /etc/fstab (C(fstab)).
      type: dict
    kubelet:
      description:
        - C(installed), C(running), the running kubelet's C(flags), C(config_path), the file's
          text (C(config)) and its drop-ins by name (C(dropins)).
      type: dict
    containerd:
      description: C(installed), C(version), and the effective configuration's TOML text (C(config)).
      type: dict
    nvidia:
      description: C(module_loaded), C(driver_version), C(smi), C(nvswitch) and C(fabricmanager_active).
      type: dict
    clock:
      description: C(synchronized), C(maxerror_us), the active time C(services) and the host's C(epoch).
      type: dict
    resolve:
      description: Each name and the addresses it resolves to; empty when it does not resolve.
      type: dict
    network:
      description: The interfaces (C(links), each with its name, mtu, up and addresses) and the default route's interface (C(default)).
      type: dict
    slurm_user:
      description: The C(uid), C(gid) and C(group) of the slurm user; null when there is none.
      type: dict
    mounts:
      description: Each path with the C(source) and C(fstype) mounted there; null when nothing is.
      type: dict
  sample:
    cgroup:
      mode: unified
      controllers: [cpu, cpuset, io, memory, pids]
    swap:
      devices: []
      total_kib: 0
      fstab: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpcops.slinky.plugins.module_utils._preflight.host_facts import gather


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysctls": {"type": "list", "elements": "str", "default": []},
            "kernel_modules": {"type": "list", "elements": "str", "default": []},
            "mounts": {"type": "list", "elements": "path", "default": []},
            "resolve": {"type": "list", "elements": "str", "default": []},
            "slurm_user": {"type": "str", "default": "slurm"},
            "kubelet_config": {"type": "path", "default": "/var/lib/kubelet/config.yaml"},
            "containerd_config": {"type": "path", "default": "/etc/containerd/config.toml"},
        },
        supports_check_mode=True,
    )
    params = module.params
    facts = gather(
        sysctl_names=params["sysctls"],
        module_names=params["kernel_modules"],
        mount_paths=params["mounts"],
        resolve_names=params["resolve"],
        slurm_user=params["slurm_user"],
        kubelet_config=params["kubelet_config"],
        containerd_config=params["containerd_config"],
    )
    module.exit_json(changed=False, facts=facts)


if __name__ == "__main__":
    main()
