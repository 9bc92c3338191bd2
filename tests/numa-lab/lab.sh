#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The NUMA lab, run by busybox sh as the /init of a guest with two NUMA
# nodes (scripts/numa-lab.sh boots it; docs/testing.rst, "NUMA lab").
#
# nuksmd runs on the guest's real nodes with --policy priority; two qtest
# VMs hold the same 48 MiB: VM A (priority 10) on node 0's CPU, VM B
# (priority 1) on node 1's CPU.  Once merging has settled, store-nodes
# asks move_pages() where each page of each store file physically is:
#
#   - every page of a store file of node N must sit on node N (nuksmd's
#     mbind);
#   - the merged copies must be split as the policy says: node 0, VM A's
#     home, holds 10/11 = 90.9% of them, within 3 points.
#
# Then ksm-order puts every copy on one node, and nuKSM's five-page
# example runs on them: of five regions P0..P4 (8 MiB each), VM A keeps
# reading P0, P2 and P3, VM B P1, P2 and P3 (qtest-reader), nobody P4.
# Under fair, once re-placement by reads has settled, each VM's remote
# share of the reads of merged pages its sampling caught must be at most
# half of the larger one under ksm-order, and every store page still on
# its node (move_pages()).  A reader's round takes seconds under TCG
# (about 3): the VMs' hot-window is 6 s, so that a region read every
# round is read in every window.
#
# Last, AdaptMD-S: a third VM C, unlike the two, starts on node 1.  Under
# global, nuksmd's saving is the reference.  Under auto, the co-location
# plan moves B to A's node (nuksmd runs with --colocate-pins=move: the
# lab's taskset pins count as the operator's), `nuksmctl plan --apply`
# carries it out (--colocate-apply=all: B is no libvirt domain), and
# then: B's memory is on node 0 (numa_maps), A's and B's merged pages
# are all local, the store pages physically on their node (move_pages()),
# C has not moved, and the saving is at least 96% of global's (AdaptMD-S
# reaches 96% on 8 nodes).
#
# Prints progress lines "numa-lab: ..." and ends with exactly one verdict,
# "numa-lab: PASS: ..." (exit 0) or "numa-lab: FAIL: ..." (exit 1).
#
# Kernel command line knobs: numalab.pages=N (pages of identical content,
# default 12288), numalab.timeout=S (seconds to wait for merging, 300).
#
# Copyright (c) 2026 nuksm developers

PATH=/lab/bin:$PATH

PAGES=12288             # 48 MiB of distinct, non-zero pages in each VM
TIMEOUT=300
PRIO_A=10               # VM A, node 0
PRIO_B=1                # VM B, node 1
TOLERANCE=30            # per mille (3 percentage points)
MAX_CPU=50              # scanner budget of each VM, percent of a core
HOT_WINDOW=6000         # ms: a round of a reader takes seconds under TCG
READ_MEASURE=60         # s of reads per share: 10 windows, ~120 samples
SOCK=/run/nuksmd.sock
STATE=/dev/shm/state
BLOB=/dev/shm/blob
LOGS=/tmp

for arg in $(cat /proc/cmdline); do
    case $arg in
    numalab.pages=*) PAGES=${arg#*=} ;;
    numalab.timeout=*) TIMEOUT=${arg#*=} ;;
    esac
done
MIN_SHARING=$((PAGES * 2 / 3))

say() {
    echo "numa-lab: $*"
}

# The last lines of the agent's and the VMs' logs, less nuksmctl's visits.
show_logs() {
    for log in nuksmd vmA vmB vmC; do
        if [ -s "$LOGS/$log.log" ]; then
            say "--- last lines of $log's log:"
            grep -v -e ': control client$' -e ': info: connection from pid' \
                -e 'client [0-9]* (pid [0-9]*) disconnected$' \
                "$LOGS/$log.log" | tail -n 10 | sed 's/^/numa-lab:   /'
        fi
    done
}

# A failure that stops the lab before the placement checks.
abort() {
    show_logs
    say "FAIL: $*"
    exit 1
}

# Fields of `nuksmctl --json status` (one line of JSON).
STATUS=
read_status() {
    STATUS=$(nuksmctl --socket "$SOCK" --json status 2>&1) || return 1
}
status_num() {
    echo "$STATUS" | sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p"
}
status_store() {
    echo "$STATUS" | sed -n 's/.*"store_pages": \[\([^]]*\)\].*/\1/p'
}

# "local/remote" reads of merged pages of VM $1, from `nuksmctl vms`.
vm_reads() {
    nuksmctl --socket "$SOCK" vms | awk -v vm="$1" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $col["NAME"] == vm { print $col["READS"] }'
}

# Remote share (per mille) of the reads of VM $1 since "local/remote" $2.
remote_share() {
    now=$(vm_reads "$1")
    lo=$((${now%/*} - ${2%/*}))
    re=$((${now#*/} - ${2#*/}))
    [ $((lo + re)) -ge 20 ] || return 1
    echo $((1000 * re / (lo + re)))
}

# Where the pages of the store files $S0 and $S1 are: store-nodes'
# lines for them in L0 and L1, shown on the console.
locate_stores() {
    OUT=$(store-nodes "$S0" "$S1" 2>&1)
    rc=$?
    echo "$OUT" | sed 's/^/numa-lab: store-nodes: /'
    [ "$rc" -le 1 ] || abort "store-nodes failed (exit $rc)"
    L0=$(echo "$OUT" | grep "^$S0 ")
    L1=$(echo "$OUT" | grep "^$S1 ")
}

# Field NAME=value of a store-nodes line.
field() {
    echo "$2" | sed -n "s/.* $1=\([0-9]*\).*/\1/p"
}

# Per mille as a percentage with one decimal.
pct() {
    echo "$(($1 / 10)).$(($1 % 10))%"
}

first_cpu() {
    sed 's/[-,].*//' "/sys/devices/system/node/node$1/cpulist"
}

node_mib() {
    awk '/MemTotal/ { print int($4 / 1024) }' \
        "/sys/devices/system/node/node$1/meminfo"
}

# ---------------------------------------------------------------- nodes
say "guest kernel $(uname -r), $(nproc) CPUs"
for n in 0 1; do
    [ -d /sys/devices/system/node/node$n ] ||
        abort "the guest has no NUMA node $n (boot it with two -numa nodes)"
done
[ -d /sys/devices/system/node/node2 ] &&
    abort "the guest has more than two NUMA nodes"
CPU0=$(first_cpu 0)
CPU1=$(first_cpu 1)
[ -n "$CPU0" ] && [ -n "$CPU1" ] ||
    abort "a NUMA node has no CPU (node0: '$CPU0', node1: '$CPU1')"
for n in 0 1; do
    say "node $n: cpus $(cat /sys/devices/system/node/node$n/cpulist)," \
        "$(node_mib $n) MiB"
done

# ---------------------------------------------------------------- agent
nuksmd --policy priority --replace-rate 20000 --state-dir "$STATE" \
    --socket "$SOCK" --colocate-pins move --colocate-apply all \
    --colocate-vcpus-per-cpu 0 --colocate-min-gain 8 \
    --log-level info >"$LOGS/nuksmd.log" 2>&1 &
AGENT=$!
i=0
until read_status; do
    i=$((i + 1))
    kill -0 "$AGENT" 2>/dev/null || abort "nuksmd exited at start-up"
    [ "$i" -lt 100 ] || abort "nuksmd does not answer: $STATUS"
    sleep 0.2
done
NODES=$(status_num nodes)
say "nuksmd (pid $AGENT) up: policy $(echo "$STATUS" |
    sed -n 's/.*"policy": "\([^"]*\)".*/\1/p'), $NODES nodes"
[ "$NODES" = 2 ] || abort "nuksmd sees $NODES NUMA nodes, not 2"

# ---------------------------------------------------------------- VMs
store-nodes --blob "$BLOB" "$PAGES" || abort "cannot write $BLOB"
store-nodes --blob "$BLOB.c" "$PAGES" 1000000 || abort "cannot write $BLOB.c"
say "wrote $BLOB: $PAGES distinct pages ($((PAGES / 256)) MiB), and" \
    "$BLOB.c, as many others"

# start_vm NAME CPU PRIORITY [BLOB]: a qtest VM pinned (every thread) to
# CPU, its RAM at 16 MiB holding the blob (QEMU's generic loader writes it
# in at reset).  Sets VM_PID.
start_vm() {
    taskset -c "$2" qemu-system-x86_64 -L /lab/share/qemu \
        -accel qtest -machine q35 -m 256M -nodefaults -display none \
        -monitor none -qtest unix:"/tmp/$1.qtest",server=on,wait=off \
        -name "$1" \
        -device loader,file="${4:-$BLOB}",addr=0x1000000,force-raw=on \
        -object nuksm,id=dedup0,agent="$SOCK",priority="$3",max-cpu=$MAX_CPU,hot-window=$HOT_WINDOW \
        >"$LOGS/$1.log" 2>&1 &
    VM_PID=$!
}

start_vm vmA "$CPU0" "$PRIO_A"
VMA=$VM_PID
start_vm vmB "$CPU1" "$PRIO_B"
VMB=$VM_PID
say "vmA: pid $VMA, priority $PRIO_A, pinned to cpu $CPU0 (node 0)"
say "vmB: pid $VMB, priority $PRIO_B, pinned to cpu $CPU1 (node 1)"

i=0
while :; do
    for pid in $VMA $VMB; do
        kill -0 "$pid" 2>/dev/null || abort "a VM (pid $pid) exited"
    done
    read_status || abort "nuksmctl status: $STATUS"
    [ "$(status_num vms)" = 2 ] && break
    i=$((i + 1))
    [ "$i" -lt 150 ] || abort "the VMs did not connect to nuksmd in 30 s"
    sleep 0.2
done
for pid in $VMA $VMB; do
    say "pid $pid: its threads may run on cpus $(taskset -a -c -p "$pid" |
        sed 's/.*: //' | sort -u | tr '\n' ' ')"
done
nuksmctl --socket "$SOCK" vms | sed 's/^/numa-lab:   /'

# ---------------------------------------------------------------- merge
say "waiting (at most ${TIMEOUT}s) for pages_sharing >= $MIN_SHARING to settle"
start=$(date +%s)
last=
stable=0
while :; do
    for pid in $VMA $VMB; do
        kill -0 "$pid" 2>/dev/null || abort "a VM (pid $pid) exited"
    done
    kill -0 "$AGENT" 2>/dev/null || abort "nuksmd exited"
    read_status || abort "nuksmctl status: $STATUS"
    SHARED=$(status_num pages_shared)
    SHARING=$(status_num pages_sharing)
    STORE=$(status_store)
    elapsed=$(($(date +%s) - start))
    say "t=${elapsed}s pages_shared=$SHARED pages_sharing=$SHARING" \
        "store_pages=[$STORE]"
    now="$SHARING/$STORE"
    if [ "$SHARING" -ge "$MIN_SHARING" ] && [ "$now" = "$last" ]; then
        stable=$((stable + 1))
        [ "$stable" -ge 3 ] && break
    else
        stable=0
    fi
    [ "$elapsed" -lt "$TIMEOUT" ] ||
        abort "merging did not settle at pages_sharing >= $MIN_SHARING" \
              "within ${TIMEOUT}s (pages_sharing=$SHARING)"
    last=$now
    sleep 2
done
nuksmctl --socket "$SOCK" vms | sed 's/^/numa-lab:   /'

# ---------------------------------------------------------------- check
AGENT0=${STORE%%,*}
AGENT1=${STORE##*, }
# Both VMs are in merge domain "default": one store file per node.
set -- "$STATE"/store-*-node0
S0=$1
set -- "$STATE"/store-*-node1
S1=$1
[ -f "$S0" ] && [ -f "$S1" ] || abort "no store files of domain default"
locate_stores
F0=$(field pages "$L0")
F1=$(field pages "$L1")
F0_ON0=$(field node0 "$L0")
F0_ON1=$(field node1 "$L0")
F1_ON0=$(field node0 "$L1")
F1_ON1=$(field node1 "$L1")
ERR=$(($(field errors "$L0") + $(field errors "$L1")))

problems=
problem() {
    say "check FAILED: $*"
    problems="$problems${problems:+; }$*"
}

# 1. Each store file's pages are physically on its node.
if [ "$F0_ON0" = "$F0" ] && [ "$F1_ON1" = "$F1" ] && [ "$ERR" = 0 ]; then
    physical="every store page on its node"
    if [ "$F0" = 0 ] || [ "$F1" = 0 ]; then
        physical="$physical (one store empty: its binding not exercised)"
    fi
    say "check ok: store-node0: $F0 pages, all on node 0;" \
        "store-node1: $F1 pages, all on node 1"
else
    physical="store pages off their node"
    problem "physical placement: store-node0 has $F0_ON1 of $F0 pages on" \
            "node 1, store-node1 has $F1_ON0 of $F1 pages on node 0," \
            "$ERR pages not located"
fi

# 2. The files hold what nuksmd counts, and the copies are all there.
TOTAL=$((F0 + F1))
if [ "$F0" = "$AGENT0" ] && [ "$F1" = "$AGENT1" ]; then
    say "check ok: the files hold the store_pages nuksmd reports" \
        "($AGENT0, $AGENT1)"
else
    problem "store files hold $F0 + $F1 pages, nuksmd reports" \
            "store_pages=[$STORE]"
fi
if [ "$SHARED" -lt "$MIN_SHARING" ] || [ "$TOTAL" -lt "$SHARED" ]; then
    problem "pages_shared=$SHARED, $TOTAL store pages: fewer merged" \
            "copies than the $MIN_SHARING expected"
fi

# 3. The split follows the policy: priority 10:1 puts 10/11 on node 0.
WANT=$((1000 * PRIO_A / (PRIO_A + PRIO_B)))
if [ "$TOTAL" -gt 0 ]; then
    GOT=$((1000 * F0 / TOTAL))
else
    GOT=0
fi
DIFF=$((GOT - WANT))
[ "$DIFF" -lt 0 ] && DIFF=$((-DIFF))
split="node 0 holds $(pct $GOT) of $TOTAL merged copies"
split="$split (policy priority $PRIO_A:$PRIO_B wants $(pct $WANT)"
split="$split +-$((TOLERANCE / 10)) points)"
if [ "$DIFF" -le "$TOLERANCE" ]; then
    say "check ok: $split"
else
    hint=
    if [ "$F1" = 0 ]; then
        hint=": nothing was placed on node 1 (is placement by policy in yet?)"
    fi
    problem "policy split: $split$hint"
fi

# 4. Re-placement: under ksm-order every copy belongs on the node of the
# VM that registered last (whichever said HELLO second).  The agent moves
# them; they must then sit physically on that node, the other store empty.
nuksmctl --socket "$SOCK" policy ksm-order >/dev/null ||
    abort "nuksmctl policy ksm-order failed"
start=$(date +%s)
while :; do
    read_status || abort "nuksmctl status: $STATUS"
    STORE=$(status_store)
    PENDING=$(status_num moves_pending)
    MOVED_PAGES=$(status_num pages_moved)
    say "re-placement: pages_moved=$MOVED_PAGES pending=$PENDING" \
        "store_pages=[$STORE]"
    if [ "$PENDING" = 0 ] &&
       { [ "${STORE%%,*}" = 0 ] || [ "${STORE##*, }" = 0 ]; }; then
        break
    fi
    [ $(($(date +%s) - start)) -lt "$TIMEOUT" ] || break
    sleep 1
done
locate_stores
M0=$(field pages "$L0")
M1=$(field pages "$L1")
if [ "$M0" = 0 ]; then
    TARGET=1 EMPTY=0 HELD=$M1 ON_TARGET=$(field node1 "$L1")
else
    TARGET=0 EMPTY=$M1 HELD=$M0 ON_TARGET=$(field node0 "$L0")
fi
moved="after ksm-order: $MOVED_PAGES pages moved, store-node$TARGET holds"
moved="$moved $HELD ($ON_TARGET on node $TARGET), the other $EMPTY"
if [ "$EMPTY" = 0 ] && [ "$HELD" -ge "$SHARED" ] &&
   [ "$ON_TARGET" = "$HELD" ] && [ "$MOVED_PAGES" -gt 0 ]; then
    say "check ok: $moved"
else
    problem "re-placement: $moved, expected every copy on one node"
fi

# 5. nuKSM's five-page example: placement by reads.  P0..P4, 8 MiB each
# from 16 MiB, the blob's first 40 MiB.
P0=0x1000000 P1=0x1800000 P2=0x2000000 P3=0x2800000 P4=0x3000000
R=0x800000
qtest-reader /tmp/vmA.qtest $P0:$R $P2:$R $P3:$R >"$LOGS/readerA.log" 2>&1 &
READER_A=$!
qtest-reader /tmp/vmB.qtest $P1:$R $P2:$R $P3:$R >"$LOGS/readerB.log" 2>&1 &
READER_B=$!
say "readers: vmA reads P0 P2 P3 (pid $READER_A), vmB P1 P2 P3" \
    "(pid $READER_B), nobody P4"

# measure_shares SECONDS: sets SHARE_A and SHARE_B, the remote shares
# (per mille) of the reads caught over SECONDS.
measure_shares() {
    before_a=$(vm_reads vmA)
    before_b=$(vm_reads vmB)
    sleep "$1"
    for pid in $READER_A $READER_B; do
        kill -0 "$pid" 2>/dev/null || abort "a reader (pid $pid) exited:" \
            "$(cat "$LOGS"/reader*.log)"
    done
    SHARE_A=$(remote_share vmA "$before_a") ||
        abort "too few reads of vmA caught ($before_a -> $(vm_reads vmA))"
    SHARE_B=$(remote_share vmB "$before_b") ||
        abort "too few reads of vmB caught ($before_b -> $(vm_reads vmB))"
}
max() {
    if [ "$1" -ge "$2" ]; then echo "$1"; else echo "$2"; fi
}

# Under ksm-order (every copy on one node): one VM reads mostly remote.
# The first sweeps fault in pages not mapped since they merged: skip them.
sleep 10
measure_shares "$READ_MEASURE"
KSM_MAX=$(max "$SHARE_A" "$SHARE_B")
say "ksm-order: remote share of sampled reads: vmA $(pct "$SHARE_A")," \
    "vmB $(pct "$SHARE_B")"
nuksmctl --socket "$SOCK" vms | sed 's/^/numa-lab:   /'

nuksmctl --socket "$SOCK" policy fair >/dev/null ||
    abort "nuksmctl policy fair failed"
# Settled: nothing pending, no page moved for three looks 3 s apart
# (re-placement by reads runs at most every 5 s).
start=$(date +%s)
last=
stable=0
while :; do
    read_status || abort "nuksmctl status: $STATUS"
    PENDING=$(status_num moves_pending)
    MOVED_PAGES=$(status_num pages_moved)
    say "re-placement by reads: pages_moved=$MOVED_PAGES" \
        "pending=$PENDING store_pages=[$(status_store)]"
    if [ "$PENDING" = 0 ] && [ "$MOVED_PAGES" = "$last" ]; then
        stable=$((stable + 1))
        [ "$stable" -ge 3 ] && break
    else
        stable=0
    fi
    [ $(($(date +%s) - start)) -lt "$TIMEOUT" ] || break
    last=$MOVED_PAGES
    sleep 3
done
measure_shares "$READ_MEASURE"
FAIR_MAX=$(max "$SHARE_A" "$SHARE_B")
say "fair: remote share of sampled reads: vmA $(pct "$SHARE_A")," \
    "vmB $(pct "$SHARE_B")"
say "readers: vmA's $(tail -n 1 "$LOGS/readerA.log"), vmB's" \
    "$(tail -n 1 "$LOGS/readerB.log")"
nuksmctl --socket "$SOCK" vms | sed 's/^/numa-lab:   /'
kill $READER_A $READER_B 2>/dev/null

locate_stores
R0=$(field pages "$L0")
R1=$(field pages "$L1")
reads="by reads: the larger remote share $(pct "$KSM_MAX") under ksm-order,"
reads="$reads $(pct "$FAIR_MAX") under fair; store-node0 $R0 pages"
reads="$reads ($(field node0 "$L0") on node 0), store-node1 $R1"
reads="$reads ($(field node1 "$L1") on node 1)"
if [ $((2 * FAIR_MAX)) -le "$KSM_MAX" ] && [ "$R0" -gt 0 ] && \
   [ "$R1" -gt 0 ] && [ "$(field node0 "$L0")" = "$R0" ] && \
   [ "$(field node1 "$L1")" = "$R1" ]; then
    say "check ok: $reads"
else
    problem "placement $reads: fair's must be at most half of" \
            "ksm-order's, both stores used, every page on its node"
fi

# 6. AdaptMD-S.  A third VM, unlike A and B, on node 1.
start_vm vmC "$CPU1" 1 "$BLOB.c"
VMC=$VM_PID
say "vmC: pid $VMC, its own contents, pinned to cpu $CPU1 (node 1)"
nuksmctl --socket "$SOCK" policy global >/dev/null ||
    abort "nuksmctl policy global failed"

# settle WHAT: until nothing is pending and pages_sharing and the stores
# hold still for three looks 2 s apart.  Sets SAVED, the guest pages
# merging saves (pages_sharing, as KSM counts it).
settle() {
    start=$(date +%s)
    last=
    stable=0
    while :; do
        for pid in $VMA $VMB $VMC; do
            kill -0 "$pid" 2>/dev/null || abort "a VM (pid $pid) exited"
        done
        read_status || abort "nuksmctl status: $STATUS"
        now="$(status_num vms) $(status_num pages_sharing) $(status_store)"
        now="$now $(status_num moves_pending)"
        say "$1: vms, pages_sharing, store_pages, pending: $now"
        if [ "$now" = "$last" ] && [ "$(status_num moves_pending)" = 0 ] &&
           [ "$(status_num vms)" = 3 ]; then
            stable=$((stable + 1))
            [ "$stable" -ge 3 ] && break
        else
            stable=0
        fi
        [ $(($(date +%s) - start)) -lt "$TIMEOUT" ] ||
            abort "$1 did not settle within ${TIMEOUT}s"
        last=$now
        sleep 2
    done
    SAVED=$(status_num pages_sharing)
}
settle global
SAVED_GLOBAL=$SAVED
say "global saves $SAVED_GLOBAL pages"

nuksmctl --socket "$SOCK" policy auto >/dev/null ||
    abort "nuksmctl policy auto failed"
i=0
until nuksmctl --socket "$SOCK" --json plan | grep -q '"verdict": "planned"'
do
    i=$((i + 1))
    [ "$i" -lt 60 ] || abort "no move planned in 60 s:" \
        "$(nuksmctl --socket "$SOCK" plan)"
    sleep 1
done
nuksmctl --socket "$SOCK" plan | sed 's/^/numa-lab:   /'
APPLY=$(nuksmctl --socket "$SOCK" plan --apply 2>&1)
APPLY_RC=$?
echo "$APPLY" | sed 's/^/numa-lab:   /'
settle "auto after the move"
SAVED_S=$SAVED
locate_stores
nuksmctl --socket "$SOCK" vms | sed 's/^/numa-lab:   /'

# vm_column VM COLUMN: a column of `nuksmctl vms` for VM.
vm_column() {
    nuksmctl --socket "$SOCK" vms | awk -v vm="$1" -v c="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $col["NAME"] == vm { print $col[c] }'
}
# anon_pages PID NODE: pages of PID's private anonymous memory on NODE.
anon_pages() {
    grep ' anon=' "/proc/$1/numa_maps" | grep -o " N$2=[0-9]*" |
        awk -F= '{ n += $2 } END { print n + 0 }'
}
B_ON0=$(anon_pages "$VMB" 0)
B_ON1=$(anon_pages "$VMB" 1)
C_ON1=$(anon_pages "$VMC" 1)
REMOTE_A=$(vm_column vmA REMOTE)
REMOTE_B=$(vm_column vmB REMOTE)
MERGED_B=$(vm_column vmB MERGED)
S0_PAGES=$(field pages "$L0")
S0_ON0=$(field node0 "$L0")
S1_PAGES=$(field pages "$L1")
S1_ON1=$(field node1 "$L1")
colocated="vmB moved to node 0 (its memory: $B_ON0 pages on node 0,"
colocated="$colocated $B_ON1 on node 1); merged pages remote: vmA"
colocated="$colocated $REMOTE_A, vmB $REMOTE_B of $MERGED_B; store-node0"
colocated="$colocated $S0_PAGES ($S0_ON0 on node 0), store-node1 $S1_PAGES"
colocated="$colocated ($S1_ON1 on node 1); saving $SAVED_S pages, global's"
colocated="$colocated $SAVED_GLOBAL"
if [ "$APPLY_RC" = 0 ] &&
   echo "$APPLY" | grep -q "vmB, node 1 -> node 0: moved by nuksmd" &&
   echo "$APPLY" | grep -q "memory moved" &&
   [ $((B_ON1 * 100)) -le "$B_ON0" ] && [ "$C_ON1" -gt 0 ] &&
   [ "$REMOTE_A" = 0 ] && [ "$REMOTE_B" = 0 ] &&
   [ "$MERGED_B" -ge "$MIN_SHARING" ] &&
   [ "$S0_ON0" = "$S0_PAGES" ] && [ "$S1_ON1" = "$S1_PAGES" ] &&
   [ $((SAVED_S * 100)) -ge $((SAVED_GLOBAL * 96)) ] &&
   nuksmctl --socket "$SOCK" --json plan | grep -q '"moves": \[\]'; then
    say "check ok: AdaptMD-S: $colocated"
else
    problem "AdaptMD-S: $colocated; the move (exit $APPLY_RC), its memory" \
            "on node 0 (at most 1% left), no remote merged page, every" \
            "store page on its node, at least 96% of global's saving and" \
            "an empty plan expected"
fi

summary="2 nodes, pages_sharing=$SHARING, store-node0=$F0 store-node1=$F1"
if [ -z "$problems" ]; then
    say "PASS: $summary, $physical, $split; $moved; $reads; AdaptMD-S:" \
        "$colocated"
    exit 0
fi
say "FAIL: $problems ($summary; $physical)"
exit 1
