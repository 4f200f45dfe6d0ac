#!/usr/bin/env bash
# Communicator churn (issue 22): MPI_Comm_dup + CALLS MPI_Allreduce (one int) +
# MPI_Comm_free, ITERS times, in plain MPI and through the interposer, interleaved,
# best of REPEATS. The program is the test program tests/c/comm_churn.c (it checks
# every result, and that descriptors and the shared-memory directory stay flat).
#
#   crates/smelt-mpi/bench/comm_churn.sh [-n RANKS] [-i ITERS] [-c CALLS] [-r REPEATS]
#
# Rows: plain MPI; smelt with its default set-up threshold (SMELT_MPI_SETUP_AFTER=5:
# a communicator's first 5 calls go to MPI); smelt setting every communicator up at
# its first call (SMELT_MPI_SETUP_AFTER=0: the loop then measures a set-up and release
# per iteration). Columns: "loop" (microseconds per dup + CALLS allreduces + free),
# its ratio to plain MPI (<= 1.5 is issue 22's target), and "reuse" (microseconds per
# allreduce on one duplicate used 4 * ITERS times). -c 12: every duplicate is set up in
# the default row too. Release library (SMELT_MPI_LIB overrides it); smelt's segments
# go to a private directory under /dev/shm, which the program checks stays as it was.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
n=2
iters=2000
calls=1
repeats=3
while getopts "n:i:c:r:" o; do
    case $o in
    n) n=$OPTARG ;;
    i) iters=$OPTARG ;;
    c) calls=$OPTARG ;;
    r) repeats=$OPTARG ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
    esac
done
. "$here/common.sh"
shm="$(mktemp -d -p /dev/shm smelt-comm-churn.XXXXXX 2>/dev/null || mktemp -d)"
cleanup+=("$shm")
mpicc -O2 -o "$tmp/comm_churn" "$root/crates/smelt-mpi/tests/c/comm_churn.c"
out="$tmp/raw.txt"
: >"$out"
one() { # label [mpirun options...]
    local label="$1"; shift
    "${base[@]}" -x SMELT_SHM_DIR="$shm" "$@" "$tmp/comm_churn" "$iters" "$calls" | sed -n "s/^comm_churn: \(loop\|setup\|reuse\) [a-z_]*=\([0-9.]*\).*/$label \1 \2/p" >>"$out"
}
for ((i = 0; i < repeats; i++)); do
    one plain
    one smelt -x LD_PRELOAD="$lib"
    one smelt-eager -x LD_PRELOAD="$lib" -x SMELT_MPI_SETUP_AFTER=0
done
echo "# $n ranks, $(nproc) CPUs, $iters iterations of dup + $calls allreduce + free, best of $repeats; microseconds"
awk '
    { k = $1 " " $2; if (!(k in best) || $3 + 0 < best[k]) best[k] = $3 + 0
      if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END {
      printf "%-12s %10s %12s %10s\n", "", "loop", "loop/plain", "reuse"
      for (i = 1; i <= n; i++) {
        l = order[i]
        printf "%-12s %10.2f %12.2f %10.3f\n", l, best[l " loop"], best[l " loop"] / best["plain loop"], best[l " reuse"]
      }
    }' "$out"
