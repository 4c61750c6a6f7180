#!/usr/bin/env bash
# A Slurm cluster of two nodes on this one machine, for the tests: munged, slurmctld, and two slurmd (n1, n2), each
# slurmd on a core of its own so that each node's tasks inherit their node's core (`taskset -c 0 slurmd -N n1`).
#
#   scripts/slurm_test_cluster.sh start DIR   start it; its config, spool, state and logs under DIR; prints the
#                                             SLURM_CONF to use (DIR/slurm.conf) once both nodes are idle
#   scripts/slurm_test_cluster.sh stop DIR    stop every daemon it started (nothing is left running)
#   scripts/slurm_test_cluster.sh status DIR  sinfo of the cluster
#
# It installs Debian's slurm-wlm and munge with apt when they are missing (CI starts bare). Nodes: NodeName n1 and
# n2, NodeHostname this host's name, NodeAddr 127.0.0.1, distinct ports, CPUs=1; proctrack/linuxproc and task/none,
# so no systemd or cgroup is needed. Ports: DISTBENCH_SLURM_PORT (default 16817) and the four after it. Nothing here
# listens beyond loopback's addresses that Slurm's own configuration names.
set -euo pipefail
cmd=${1:?usage: slurm_test_cluster.sh start|stop|status DIR}
dir=${2:?usage: slurm_test_cluster.sh start|stop|status DIR}
base=${DISTBENCH_SLURM_PORT:-16817}

install_if_missing() {
    if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
        echo "slurm test cluster: installing slurm-wlm and munge (apt)" >&2
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -q slurm-wlm munge >"$dir/apt.log" 2>&1; then
            # a bare machine may have no package lists yet
            apt-get update -q >>"$dir/apt.log" 2>&1 || true
            apt-get install -y -q slurm-wlm munge >>"$dir/apt.log" 2>&1 || {
                echo "error: could not install slurm-wlm and munge with apt (log: $dir/apt.log)" >&2
                exit 1
            }
        fi
    fi
}

write_config() {
    local host cores
    host=$(hostname)
    mapfile -t cores < <(python3 -c 'import os; print("\n".join(map(str, sorted(os.sched_getaffinity(0)))))')
    if [ "${#cores[@]}" -lt 2 ]; then
        echo "error: the Slurm test cluster needs 2 cores, one per node; this process may use ${#cores[@]}" >&2
        exit 1
    fi
    printf '%s\n%s\n' "${cores[0]}" "${cores[1]}" >"$dir/node-cores"
    mkdir -p "$dir/state" "$dir/spool/n1" "$dir/spool/n2"
    dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge.key"
    # MinJobAge: `sbatch --wait` polls a job after 2 s, then every 8 and 32 s, unless the job's record may be
    # purged sooner (MinJobAge, 300 s by default): at 4 s it polls every 2 s, and a job of 20 s ends its sbatch
    # within 2 s of its end, not at 42 s (measured: `sbatch --wait --wrap "sleep 3"` took 10 s by default, 6 s so)
    cat >"$dir/slurm.conf" <<EOF
ClusterName=distbench-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdSpoolDir=$dir/spool/%n
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=5
MinJobAge=4
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 1)) CPUs=1 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
}

wait_idle() {
    local state
    for _ in $(seq 1 60); do
        state=$(SLURM_CONF="$dir/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null || true)
        if [[ $state == *"n1 idle"* && $state == *"n2 idle"* ]]; then
            return 0
        fi
        sleep 0.5
    done
    echo "error: the Slurm test cluster's nodes did not become idle (sinfo: ${state:-no answer}); logs in $dir" >&2
    return 1
}

start() {
    mkdir -p "$dir"
    install_if_missing
    write_config
    local cores
    mapfile -t cores <"$dir/node-cores"
    munged --socket="$dir/munge.socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
        --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" --force
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -i
    taskset -c "${cores[0]}" slurmd -N n1
    taskset -c "${cores[1]}" slurmd -N n2
    if ! wait_idle; then
        stop
        exit 1
    fi
    echo "$dir/slurm.conf"
}

stop() {
    export SLURM_CONF="$dir/slurm.conf"
    scancel --quiet --full --user "$(id -un)" 2>/dev/null || true
    local pid
    for name in slurmd-n1 slurmd-n2 slurmctld munged; do
        if [ -f "$dir/$name.pid" ]; then
            pid=$(cat "$dir/$name.pid")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
            rm -f "$dir/$name.pid"
        fi
    done
}

case $cmd in
    start) start ;;
    stop) stop ;;
    status) SLURM_CONF="$dir/slurm.conf" sinfo -N ;;
    *) echo "usage: slurm_test_cluster.sh start|stop|status DIR" >&2; exit 2 ;;
esac
