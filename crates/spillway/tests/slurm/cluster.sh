#!/bin/bash
# Starts a single-host Slurm 22.05 cluster for the Slurm tests: slurmctld, two fixed nodes n[1-2] (partition
# onprem), and CLOUD nodes c[1-4] with 8 fake GPUs each in partitions cloud-p0, cloud-p1, cloud-p2, whose
# ResumeProgram and SuspendProgram are `spillway slurm resume|suspend`.
# Usage: cluster.sh start BASE PORT SPILLWAY_BIN SPILLWAY_URL TOKEN_FILE   |   cluster.sh stop BASE
# BASE must be world-readable (slurmd runs as root here, but the job scripts run as root too); PORT is the first
# of 16 free TCP ports (slurmctld, then one per slurmd).
set -euo pipefail
cmd=$1 BASE=$2
if [ "$cmd" = stop ]; then
  for f in "$BASE"/run/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  exit 0
fi
PORT=$3 BIN=$4 URL=$5 TOKEN_FILE=$6
H=$(hostname -s)
mkdir -p "$BASE"/{state,log,run,bin,dev} "$BASE"/spool/{n1,n2,c1,c2,c3,c4}
chmod 755 "$BASE"
for i in 0 1 2 3 4 5 6 7; do [ -e "$BASE/dev/nvidia$i" ] || mknod "$BASE/dev/nvidia$i" c 1 3; done
cat > "$BASE/slurm.conf" <<CONF
ClusterName=spillwaytest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/none
CredType=cred/none
AuthInfo=cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
DebugFlags=Power
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
MinJobAge=300
SlurmdTimeout=30
SchedulerParameters=sched_interval=5,bf_interval=5
SuspendProgram=$BASE/bin/suspend
ResumeProgram=$BASE/bin/resume
ResumeTimeout=90
SuspendTimeout=10
SuspendTime=20
ResumeRate=0
SuspendRate=0
SuspendExcParts=onprem
TreeWidth=65533
PrivateData=cloud
SlurmctldParameters=idle_on_node_suspend,cloud_dns
NodeName=n[1-2] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + 2))-$((PORT + 3)) CPUs=8 RealMemory=64000 State=UNKNOWN
NodeName=c[1-4] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + 4))-$((PORT + 7)) CPUs=8 RealMemory=64000 Gres=gpu:h100:8 State=CLOUD
PartitionName=onprem Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=cloud-p0 Nodes=c[1-4] MaxTime=INFINITE State=UP
PartitionName=cloud-p1 Nodes=c[1-4] MaxTime=INFINITE State=UP
PartitionName=cloud-p2 Nodes=c[1-4] MaxTime=INFINITE State=UP
CONF
cat > "$BASE/gres.conf" <<CONF
AutoDetect=off
NodeName=c[1-4] Name=gpu Type=h100 File=$BASE/dev/nvidia[0-7]
CONF
for verb in resume suspend; do
  cat > "$BASE/bin/$verb" <<SH
#!/bin/sh
exec "$BIN" slurm $verb --server "$URL" --token-file "$TOKEN_FILE" --log "$BASE/log/power.log" "\$1"
SH
  chmod 755 "$BASE/bin/$verb"
done
export SLURM_CONF=$BASE/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF" -N n1
/usr/sbin/slurmd -f "$SLURM_CONF" -N n2
for _ in $(seq 1 100); do
  [ "$(sinfo -h -p onprem -t idle -o %D 2>/dev/null)" = 2 ] && exit 0
  sleep 0.2
done
echo "slurm did not come up; see $BASE/log" >&2
exit 1
