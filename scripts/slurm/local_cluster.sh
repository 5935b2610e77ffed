#!/usr/bin/env bash
# A one-node Slurm cluster on localhost (munged, slurmctld, slurmd) in a scratch directory, for trying the sweep
# scripts without a real cluster. Needs Debian's slurm-wlm and munge; slurmd runs jobs as this user.
# usage: source scripts/slurm/local_cluster.sh DIR   (exports SLURM_CONF; local_cluster_stop stops the daemons)
set -euo pipefail
dir=$(realpath -m "${1:?usage: local_cluster.sh DIR}")
mkdir -p "$dir"/{munge,state,spool,log}
chmod 700 "$dir/munge"
for tool in munged mungekey slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || PATH="$PATH:/usr/sbin"
  command -v "$tool" >/dev/null || { echo "local_cluster: $tool not found (apt-get install slurm-wlm munge)" >&2; return 77 2>/dev/null || exit 77; }
done
user=$(id -un)
host=$(hostname -s)
cpus=$(nproc)
[ -f "$dir/munge/munge.key" ] || mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/pid" \
  --seed-file="$dir/munge/seed" --log-file="$dir/log/munged.log"
cat > "$dir/slurm.conf" <<CONF
ClusterName=sparsebench-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
SlurmctldPort=$((16817 + RANDOM % 1000))
SlurmdPort=$((17818 + RANDOM % 1000))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
local_cluster_stop() {
  for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
}
for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -q idle; then return 0 2>/dev/null || exit 0; fi
  sleep 0.5
done
echo "local_cluster: the node did not come up; see $dir/log/" >&2
local_cluster_stop
return 1 2>/dev/null || exit 1
