#!/usr/bin/env bash
# MPI_Bcast / MPI_Reduce / MPI_Allreduce / MPI_Gather / MPI_Scatter / MPI_Barrier latency,
# 8 B to 64 KiB, in one run for: Open MPI's default (tuned), Open MPI's shared-memory component
# (--mca coll_sm_priority 100), and smelt through the interposer (LD_PRELOAD, with no
# cut-off, so the table shows where smelt stops winning).
#
#   crates/smelt-mpi/bench/mpi_latency.sh [-n RANKS] [-k RANKS_PER_NODE] [-r REPEATS]
#                                         [-m MAX_BYTES] [-w osu|loop] [-o OPS]
#                                         [-c CUT_OFF]
#
# -o: operations, comma-separated (latency.c's names: bcast, reduce, allreduce, gather,
# scatter, allgather, scan, rsb, alltoall, rs, barrier; "new" for the five after scatter;
# default all). -c: smelt's SMELT_MPI_MAX_BYTES (default: none, so the table shows
# where smelt stops winning; "default" runs with the library's own cut-offs).
# -k runs smelt with SMELT_MPI_FORCE=1 unless -f 0: nodes of 1-2 ranks otherwise go to
# MPI (-f 0 measures what a user gets).
# -w: how calls are timed (latency.c): osu (default; root 0, each call after a
# barrier, timed alone) or loop (back to back, rotating roots).
# Each configuration runs REPEATS times, interleaved; a cell is the lowest of its
# repeats (mean per call, averaged over ranks: see latency.c). Output: one row per
# operation and size with the three figures (microseconds) and smelt's speed-up over
# the default (>1: smelt faster). Raw lines go to $OUT (default: a temporary file).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
n=2
k=""
repeats=3
max=65536
way=osu
ops=all
cut=1073741824
force=1
while getopts "n:k:r:m:w:o:c:f:" o; do
    case $o in
    n) n=$OPTARG ;;
    k) k=$OPTARG ;;
    r) repeats=$OPTARG ;;
    m) max=$OPTARG ;;
    w) way=$OPTARG ;;
    o) ops=$OPTARG ;;
    c) cut=$OPTARG ;;
    f) force=$OPTARG ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
    esac
done
. "$here/common.sh"
mpicc -O2 -o "$tmp/latency" "$here/latency.c"
out="${OUT:-$tmp/raw.txt}"
: >"$out"
nodes=()
[ -n "$k" ] && nodes=(-x "SMELT_RANKS_PER_NODE=$k")
[ -n "$k" ] && [ "$force" = 1 ] && nodes+=(-x SMELT_MPI_FORCE=1)
cutoff=(-x "SMELT_MPI_MAX_BYTES=$cut")
[ "$cut" = default ] && cutoff=()
for ((i = 0; i < repeats; i++)); do
    "${base[@]}" "$tmp/latency" "$max" ompi "$way" "$ops" >>"$out"
    "${base[@]}" --mca coll_sm_priority 100 "$tmp/latency" "$max" sm "$way" "$ops" >>"$out"
    "${base[@]}" -x LD_PRELOAD="$lib" "${cutoff[@]}" "${nodes[@]}" \
        "$tmp/latency" "$max" smelt "$way" "$ops" >>"$out"
done
echo "# $n ranks${k:+, emulated nodes of $k}, $(nproc) CPUs, $way timing, best of $repeats; microseconds per call (mean over ranks)"
awk '
    { key = $2 " " $3; v = $4 + 0
      if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
      if (!((key, $1) in best) || v < best[key, $1]) best[key, $1] = v }
    END {
      printf "%-10s %8s %10s %10s %10s %9s\n", "op", "bytes", "ompi", "sm", "smelt", "ompi/smelt"
      for (i = 1; i <= nk; i++) {
        split(order[i], kb, " ")
        o = best[order[i], "ompi"]; s = best[order[i], "sm"]; m = best[order[i], "smelt"]
        printf "%-10s %8s %10.2f %10.2f %10.2f %9.2f\n", kb[1], kb[2], o, s, m, (m > 0 ? o / m : 0)
      }
    }' "$out"
