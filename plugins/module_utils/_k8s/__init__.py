# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: Kubernetes for the collection's modules, on kubernetes.core's client.

`client` reaches the cluster and turns its errors into one exception; `lease` decides what a
run does about a Lease; `time` writes and reads Kubernetes times; `quantity` reads resource
quantities (`500m`, `256Gi`). The bottom layer: it imports nothing else of the collection.
"""
