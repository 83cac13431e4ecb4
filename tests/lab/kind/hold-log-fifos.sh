#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Run a Slurm daemon with the log FIFOs of its pod held open for writing.
#
# Slinky's log sidecar (the operator's logfile.sh) makes /var/log/slurm/<daemon>.log a FIFO
# and prints it until end-of-file, then exits; on restart it removes the FIFO and makes a
# new one. Slurm closes and reopens its log file once it has read slurm.conf: with no other
# writer, the sidecar sees end-of-file in between, and the daemon then blocks for good
# opening the FIFO the sidecar has just removed (measured in kind: slurmctld stuck in
# open(), probes timing out). Holding a write end here means the sidecar never sees
# end-of-file.
set -euo pipefail
for _ in $(seq 50); do
  compgen -G '/var/log/slurm/*.log' > /dev/null && break
  sleep 0.2
done
fifos=()
for fifo in /var/log/slurm/*.log; do
  [[ -p $fifo ]] && fifos+=("$fifo")
done
# A child holds them: Slurm daemons close every inherited descriptor when they start.
if ((${#fifos[@]})); then
  bash -c 'for fifo; do exec {held}<>"$fifo"; done; exec sleep infinity' hold-log-fifos "${fifos[@]}" &
fi
exec "$@"
