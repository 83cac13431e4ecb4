#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# slurmd as the Slinky operator (v1.1) runs it, for hpcops.slinky's kind images:
#   args: -Z --conf-server <host>:6817 --conf '<Key=Value ...>'
#   env:  POD_CPUS, POD_MEMORY (MiB), POD_TOPOLOGY from the pod's limits and labels.
# The operator quotes --conf's value with literal single quotes: the arguments are parsed
# again by the shell. The pod's limits become CoreSpecCount and MemSpecLimit, so Slurm
# schedules only what the pod may use.
set -euo pipefail

mkdir -p /run/slurm /var/spool/slurmd /var/log/slurm

# The kubelet gives the processes of a BestEffort or Burstable pod a high oom_score_adj
# (1000 for BestEffort), and slurmstepd inherits it. With task/cgroup, slurmstepd lowers
# itself to -1000, which needs CAP_SYS_RESOURCE; where the container lacks it (this lab's
# host), the kernel's OOM killer takes slurmstepd before the job's task and the job stays
# RUNNING for good (measured in kind). So slurmd starts as low as this container allows.
if (($(cat /proc/self/oom_score_adj) > 0)); then
  echo -1000 2>/dev/null > /proc/self/oom_score_adj || echo 0 2>/dev/null > /proc/self/oom_score_adj || true
fi

eval "set -- $*"
conf=""
args=()
while (($#)); do
  if [[ $1 == --conf ]]; then
    conf="$2"
    shift 2
  else
    args+=("$1")
    shift
  fi
done

hardware="$(slurmd -C | head -n 1)"
field() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$hardware"; }
sockets=$(field SocketsPerBoard)
cores=$(field CoresPerSocket)
threads=$(field ThreadsPerCore)
memory=$(field RealMemory)
total_cores=$((sockets * cores))

if ((${POD_CPUS:-0} > 0)); then
  pod_cores=$(((POD_CPUS + threads - 1) / threads))
  if ((pod_cores < total_cores)); then
    conf+=" CoreSpecCount=$((total_cores - pod_cores))"
  fi
fi
if ((${POD_MEMORY:-0} > 0 && POD_MEMORY < memory)); then
  conf+=" MemSpecLimit=$((memory - POD_MEMORY))"
fi
if [[ -n ${POD_TOPOLOGY:-} ]]; then
  conf+=" Topology=${POD_TOPOLOGY}"
fi

echo "slurmd-entrypoint: oom_score_adj $(cat /proc/self/oom_score_adj); slurmd -D ${args[*]} --conf '${conf# }'" >&2
exec hold-log-fifos.sh slurmd -D "${args[@]}" --conf "${conf# }"
