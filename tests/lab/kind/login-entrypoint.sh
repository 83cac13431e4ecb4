#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The login container as the Slinky operator (1.1, 1.2) runs it, for hpcops.slinky's kind
# images: sackd fetches slurm.conf from slurmctld (configless, SACKD_OPTIONS) and serves
# the Slurm commands' authentication on /run/slurm/sack.socket (the readiness probe tests
# it); sshd reads the operator's sshd_config, host keys and root's authorized_keys. Users
# and groups come from the directory sidecar (nslcd) through nsswitch.conf.
set -euo pipefail
mkdir -p /run/sshd /run/slurm
# SACKD_OPTIONS is a word list (--conf-server host:port).
# shellcheck disable=SC2086
sackd -D ${SACKD_OPTIONS:-} &
exec /usr/sbin/sshd -D -e
