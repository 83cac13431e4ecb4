# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: what runs on a node host for the bare-metal preflight and node_prep.

`host_facts` reads a host (standard library only); `containerd_config` edits containerd's
config.toml. The judgement runs on the controller (plugins/plugin_utils/_preflight).
"""
