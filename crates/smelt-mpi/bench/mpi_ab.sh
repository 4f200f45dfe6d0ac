#!/usr/bin/env bash
# Two builds of the interposer against each other and Open MPI, interleaved in one run:
# Open MPI's default, smelt through library A, smelt through library B, repeated; a cell
# is the lowest of its repeats (latency.c's figure: microseconds per call, mean over
# ranks). For before/after comparisons of a change (build A, copy the library aside,
# build B).
#
#   crates/smelt-mpi/bench/mpi_ab.sh -a LIB_A -b LIB_B [-n RANKS] [-r REPEATS]
#                                    [-m MAX_BYTES] [-w osu|loop] [-o OPS]
#
# Both libraries run with SMELT_MPI_MAX_BYTES=1073741824 (every size through smelt).
# Output: one row per operation and size: Open MPI, A, B (microseconds) and Open MPI's
# time over each (> 1: smelt faster).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
n=2
repeats=3
max=65536
way=loop
ops=reduce,allreduce
a=""
b=""
while getopts "a:b:n:r:m:w:o:" o; do
    case $o in
    a) a=$OPTARG ;;
    b) b=$OPTARG ;;
    n) n=$OPTARG ;;
    r) repeats=$OPTARG ;;
    m) max=$OPTARG ;;
    w) way=$OPTARG ;;
    o) ops=$OPTARG ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
    esac
done
if [ -z "$a" ] || [ -z "$b" ] || [ ! -f "$a" ] || [ ! -f "$b" ]; then
    echo "mpi_ab.sh: give two interposer libraries with -a and -b" >&2
    exit 2
fi
# common.sh builds the release interposer unless SMELT_MPI_LIB names one.
SMELT_MPI_LIB="$a"
. "$here/common.sh"
mpicc -O2 -o "$tmp/latency" "$here/latency.c"
out="$tmp/raw.txt"
: >"$out"
all=(-x SMELT_MPI_MAX_BYTES=1073741824)
for ((i = 0; i < repeats; i++)); do
    "${base[@]}" "$tmp/latency" "$max" ompi "$way" "$ops" >>"$out"
    "${base[@]}" -x LD_PRELOAD="$a" "${all[@]}" "$tmp/latency" "$max" A "$way" "$ops" >>"$out"
    "${base[@]}" -x LD_PRELOAD="$b" "${all[@]}" "$tmp/latency" "$max" B "$way" "$ops" >>"$out"
done
echo "# $n ranks, $(nproc) CPUs, $way timing, best of $repeats; microseconds per call (mean over ranks)"
echo "# A: $a"
echo "# B: $b"
awk '
    { key = $2 " " $3; v = $4 + 0
      if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
      if (!((key, $1) in best) || v < best[key, $1]) best[key, $1] = v }
    END {
      printf "%-10s %8s %9s %9s %9s %8s %8s\n", "op", "bytes", "ompi", "A", "B", "ompi/A", "ompi/B"
      for (i = 1; i <= nk; i++) {
        split(order[i], kb, " ")
        o = best[order[i], "ompi"]; x = best[order[i], "A"]; y = best[order[i], "B"]
        printf "%-10s %8s %9.2f %9.2f %9.2f %8.2f %8.2f\n", kb[1], kb[2], o, x, y, (x > 0 ? o / x : 0), (y > 0 ? o / y : 0)
      }
    }' "$out"
