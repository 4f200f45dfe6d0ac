#!/usr/bin/env bash
# MPI_Bcast / MPI_Reduce / MPI_Allreduce / MPI_Gather / MPI_Scatter / MPI_Barrier latency,
# 8 B to 64 KiB, in one run for: Open MPI's default (tuned), Open MPI's shared-memory component
# (--mca coll_sm_priority 100), and smelt through the interposer (LD_PRELOAD, with no
# cut-off, so the table shows where smelt stops winning).
#
#   crates/smelt-mpi/bench/mpi_latency.sh [-n RANKS] [-k RANKS_PER_NODE] [-r REPEATS]
#                                         [-m MAX_BYTES] [-w osu|loop]
#
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
while getopts "n:k:r:m:w:" o; do
    case $o in
    n) n=$OPTARG ;;
    k) k=$OPTARG ;;
    r) repeats=$OPTARG ;;
    m) max=$OPTARG ;;
    w) way=$OPTARG ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
    esac
done
lib="${SMELT_MPI_LIB:-$root/target/release/libsmelt_mpi.so}"
if [ -z "${SMELT_MPI_LIB:-}" ]; then
    (cd "$root" && cargo build --release -q -p smelt-mpi --features mpi)
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/latency" "$here/latency.c"
out="${OUT:-$tmp/raw.txt}"
: >"$out"
asroot=()
[ "$(id -u)" = 0 ] && asroot=(--allow-run-as-root)
base=(mpirun "${asroot[@]}" --oversubscribe -np "$n")
nodes=()
[ -n "$k" ] && nodes=(-x "SMELT_RANKS_PER_NODE=$k")
for ((i = 0; i < repeats; i++)); do
    "${base[@]}" "$tmp/latency" "$max" ompi "$way" >>"$out"
    "${base[@]}" --mca coll_sm_priority 100 "$tmp/latency" "$max" sm "$way" >>"$out"
    "${base[@]}" -x LD_PRELOAD="$lib" -x SMELT_MPI_MAX_BYTES=1073741824 "${nodes[@]}" \
        "$tmp/latency" "$max" smelt "$way" >>"$out"
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
