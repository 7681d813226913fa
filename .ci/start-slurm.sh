#!/usr/bin/env bash
# Start a one-node SLURM cluster (Debian slurm-wlm + munge) on this machine, for the cluster tests.
#
# Idempotent: run it again and it leaves running daemons alone. Needs root. Installs slurm-wlm and
# munge with apt when they are missing. The node is this machine's short hostname with the CPUs it
# has (at most 2 are declared, the population tests need no more), no cgroups (proctrack/linuxproc,
# task/none: works in containers without a writable cgroup tree), select/cons_tres, and no accounting
# database (squeue/scontrol only; sacct is not available on this test cluster).
#
# Exit code 0 when `sinfo` shows the node usable; non-zero with the reason otherwise. The tests skip
# with that reason when slurmctld is not reachable.
set -euo pipefail

log_dir=/var/log/slurm
conf=/etc/slurm/slurm.conf

if [ "$(id -u)" != 0 ]; then
    echo "start-slurm: must run as root (it installs packages and starts daemons)" >&2
    exit 1
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
[ "$cpus" -gt 2 ] && cpus=2

# munge: one key shared by every node (here just this one).
if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
        || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 100); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

mkdir -p /var/spool/slurmctld /var/spool/slurmd "$log_dir" /etc/slurm
want=$(cat <<CONF
# Written by .ci/start-slurm.sh: a one-node test cluster.
ClusterName=asyncpbt
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# A requeued job waits cred_expire + 1 s before it may start again (default 120 s); short for tests.
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$log_dir/slurmctld.log
SlurmdLogFile=$log_dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Look at pending jobs every 2 s (defaults 30-60 s): a requeued member starts again promptly.
SchedulerParameters=bf_interval=2,sched_interval=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=600
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
)
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
    printf '%s\n' "$want" > "$conf"
    changed=1
else
    changed=0
fi

# A changed config needs a restart of both daemons: `scontrol reconfigure` does not apply AuthInfo.
if [ "$changed" = 1 ]; then
    for daemon in slurmctld slurmd; do
        if [ -s "/run/$daemon.pid" ] && kill -0 "$(cat "/run/$daemon.pid")" 2>/dev/null; then
            pid=$(cat "/run/$daemon.pid")
            kill "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    done
fi
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd

# Wait until the controller answers and the node accepts jobs (resume it if a previous run left it down).
for _ in $(seq 300); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -n1 || true)
    case "$state" in
        idle*|mixed*|allocated*|completing*) echo "start-slurm: node $host $state"; exit 0 ;;
        down*|drain*) scontrol update NodeName="$host" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.2
done
echo "start-slurm: the node never became usable (state '${state:-unknown}'); see $log_dir/slurmctld.log and slurmd.log:" >&2
tail -n 20 "$log_dir/slurmctld.log" "$log_dir/slurmd.log" >&2 || true
exit 1
