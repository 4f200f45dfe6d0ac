#!/usr/bin/env bash
# What one small collective costs through the interposer, 2 ranks, back to back
# (back_to_back.c: 8 bytes, root 0; -d: that many doubles):
#   1. instructions per call on rank 0 (the root), counted by callgrind (rank 1 runs
#      natively; smelt's path, SMELT_MPI_MEASURE=0): deterministic, unlike time on a
#      shared VM, but for the polls of a wait;
#   2. time per call, Open MPI alone and through the interposer, alternated PAIRS
#      times, the median of each and of the ratios; with -b, through a second build
#      of the interposer too, in the same rounds (a before/after of a change: the
#      median of the pairs' B / A).
#
#   crates/smelt-mpi/bench/call_cost.sh [-p PAIRS] [-n CALLS] [-o OPS] [-c 0] [-d DOUBLES]
#                                       [-b LIB_B]
#
# -o: bcast,reduce,allreduce,barrier (default), allgather; -c 0 skips the callgrind count.
# The library (A): SMELT_MPI_LIB, else the release build (built when needed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
n=2
pairs=5
calls=500000
ops=bcast,reduce,allreduce,barrier
count=1
doubles=1
lib_b=""
while getopts "p:n:o:c:d:b:" o; do
    case $o in
    p) pairs=$OPTARG ;;
    n) calls=$OPTARG ;;
    o) ops=$OPTARG ;;
    c) count=$OPTARG ;;
    d) doubles=$OPTARG ;;
    b) lib_b=$OPTARG ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
    esac
done
. "$here/common.sh"
mpicc -O2 -o "$tmp/b2b" "$here/back_to_back.c"
# Rank 0 under callgrind, counting only inside the MPI call named by CALL_COST_FN
# (and what it calls): the total is the call's inclusive count, however the compiler
# inlined the interposer.
cat >"$tmp/vg.sh" <<VG
#!/bin/sh
if [ "\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}" = 0 ]; then
    exec valgrind -q --tool=callgrind --collect-atstart=no --toggle-collect="\$CALL_COST_FN" --callgrind-out-file="$tmp/cg.out" -- "\$@"
fi
exec "\$@"
VG
chmod +x "$tmp/vg.sh"
time_of() { "$@" | awk '{print $2}'; }
for op in ${ops//,/ }; do
    if [ "$count" != 0 ] && command -v valgrind >/dev/null; then
        k=200000
        # SMELT_MPI_MEASURE=0: smelt's path is counted (timing trials under callgrind,
        # 50x slower on rank 0 alone, would route at random).
        case $op in
        bcast) fn=MPI_Bcast ;; reduce) fn=MPI_Reduce ;; allreduce) fn=MPI_Allreduce ;;
        allgather) fn=MPI_Allgather ;; *) fn=MPI_Barrier ;;
        esac
        "${base[@]}" -x SMELT_MPI_MEASURE=0 -x CALL_COST_FN="$fn" -x LD_PRELOAD="$lib" "$tmp/vg.sh" "$tmp/b2b" "$k" "$op" "$doubles" >/dev/null 2>&1
        # Everything counted was inside the call: its inclusive count.
        tot="$(callgrind_annotate "$tmp/cg.out" 2>/dev/null \
            | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')"
        echo "$op: $((tot / k)) instructions per call on the root (callgrind, $k calls)"
    fi
    : >"$tmp/pairs"
    for ((i = 0; i < pairs; i++)); do
        m="$(time_of "${base[@]}" "$tmp/b2b" "$calls" "$op" "$doubles")"
        s="$(time_of "${base[@]}" -x LD_PRELOAD="$lib" "$tmp/b2b" "$calls" "$op" "$doubles")"
        b=""
        [ -n "$lib_b" ] && b="$(time_of "${base[@]}" -x LD_PRELOAD="$lib_b" "$tmp/b2b" "$calls" "$op" "$doubles")"
        echo "$m $s $b" >>"$tmp/pairs"
    done
    sort -n -k1 "$tmp/pairs" | awk -v op="$op" '{m[NR] = $1} END {printf "%s: Open MPI %.1f ns a call (median of %d)", op, m[int((NR + 1) / 2)], NR}'
    sort -n -k2 "$tmp/pairs" | awk '{s[NR] = $2} END {printf ", smelt %.1f ns", s[int((NR + 1) / 2)]}'
    awk '{print $1 / $2}' "$tmp/pairs" | sort -n | awk '{r[NR] = $1} END {printf ", Open MPI / smelt %.2f (median of the pairs)\n", r[int((NR + 1) / 2)]}'
    if [ -n "$lib_b" ]; then
        sort -n -k3 "$tmp/pairs" | awk -v op="$op" '{b[NR] = $3} END {printf "%s: B %.1f ns a call", op, b[int((NR + 1) / 2)]}'
        awk '{print $1 / $3}' "$tmp/pairs" | sort -n | awk '{r[NR] = $1} END {printf ", Open MPI / B %.2f", r[int((NR + 1) / 2)]}'
        awk '{print $3 / $2}' "$tmp/pairs" | sort -n | awk '{r[NR] = $1} END {printf ", B / A %.3f (median of the pairs)\n", r[int((NR + 1) / 2)]}'
    fi
done
