#!/usr/bin/env bash
# mpi4py at its default thread level (MPI_THREAD_MULTIPLE), unchanged, with and without
# the interposer: back-to-back Allreduce (buffer form, numpy float64, MPI.SUM), Bcast and
# Barrier, plain Open MPI and smelt (LD_PRELOAD) interleaved REPEATS times in one run.
#
#   crates/smelt-mpi/bench/mpi4py_latency.sh [-n RANKS] [-r REPEATS] [-i ITERATIONS] [-b BYTES]
#
# A figure is the slowest rank's time per call (µs) of one run; a row gives each
# configuration's median over the repeats and plain / smelt (> 1: smelt faster), and
# says how many calls smelt took (SMELT_MPI_VERBOSE's summary of a short run apart). Every result is checked
# against the sum a rank computes itself. Needs python3-mpi4py and python3-numpy
# (installed when missing, as scripts/mpi4py_suite.sh does).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
n=2
repeats=5
iters=20000
bytes=8
while getopts "n:r:i:b:" o; do
    case $o in
    n) n=$OPTARG ;;
    r) repeats=$OPTARG ;;
    i) iters=$OPTARG ;;
    b) bytes=$OPTARG ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
    esac
done
[ $((bytes % 8)) -eq 0 ] && [ "$bytes" -ge 8 ] || { echo "mpi4py_latency: -b takes a multiple of 8 bytes" >&2; exit 2; }
# Debian's python (python3 on the PATH may be another, pyenv's, without the packages).
PY=/usr/bin/python3
bash "$root/scripts/deps.sh" python3 python3-mpi4py python3-numpy >/dev/null
source "$here/common.sh"
cat >"$tmp/lat.py" <<'EOF'
import sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
iters, count = int(sys.argv[1]), int(sys.argv[2]) // 8
send = np.full(count, rank + 1.0)
recv = np.zeros(count)
want = size * (size + 1) / 2.0
def timed(f):
    for _ in range(max(iters // 10, 10)):
        f()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    t = (time.perf_counter() - t0) / iters
    return comm.allreduce(t, op=MPI.MAX) * 1e6
out = {}
out["allreduce"] = timed(lambda: comm.Allreduce(send, recv, op=MPI.SUM))
if not np.all(recv == want):
    sys.exit(f"rank {rank}: Allreduce gave {recv[:4]}, want {want}")
buf = np.full(count, 7.0 if rank == 0 else 0.0)
out["bcast"] = timed(lambda: comm.Bcast(buf, root=0))
if not np.all(buf == 7.0):
    sys.exit(f"rank {rank}: Bcast gave {buf[:4]}")
out["barrier"] = timed(comm.Barrier)
if rank == 0:
    print("thread level", MPI.Query_thread(), "of", MPI.THREAD_MULTIPLE)
    for k, v in out.items():
        print(f"RESULT {k} {v:.3f}")
EOF
for r in $(seq "$repeats"); do
    "${base[@]}" "$PY" "$tmp/lat.py" "$iters" "$bytes" >"$tmp/plain.$r" 2>&1 ||
        { cat "$tmp/plain.$r" >&2; exit 1; }
    "${base[@]}" -x LD_PRELOAD="$lib" "$PY" "$tmp/lat.py" "$iters" "$bytes" \
        >"$tmp/smelt.$r" 2>&1 || { cat "$tmp/smelt.$r" >&2; exit 1; }
done
# What smelt took, from a short run of its own (the verbose summary is not timed).
"${base[@]}" -x LD_PRELOAD="$lib" -x SMELT_MPI_VERBOSE=1 "$PY" "$tmp/lat.py" 100 "$bytes" \
    >"$tmp/verbose" 2>&1 || { cat "$tmp/verbose" >&2; exit 1; }
grep -q "thread level 3 of 3" "$tmp/plain.1" || { echo "mpi4py did not run at MPI_THREAD_MULTIPLE" >&2; cat "$tmp/plain.1" >&2; exit 1; }
echo "mpi4py $("$PY" -c 'import mpi4py; print(mpi4py.__version__)'), $n ranks, $bytes B, $iters calls, $repeats runs interleaved, MPI_THREAD_MULTIPLE"
taken=$(grep -hoE "MPI_(Allreduce|Bcast|Barrier): taken [0-9]+" "$tmp/verbose" | sort -u | tr '\n' ' ' || true)
echo "smelt took (a run of 100 calls, SMELT_MPI_VERBOSE=1): ${taken:-nothing}"
# med CONFIG OP: the median of OP's figures over CONFIG's runs.
med() {
    cat "$tmp/$1".* | awk -v o="$2" '$1 == "RESULT" && $2 == o { print $3 }' | sort -g |
        awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
printf "%-10s %12s %12s %10s\n" op "plain µs" "smelt µs" "plain/smelt"
for op in allreduce bcast barrier; do
    awk -v o="$op" -v p="$(med plain "$op")" -v s="$(med smelt "$op")" \
        'BEGIN { printf "%-10s %12.3f %12.3f %10.2f\n", o, p, s, p / s }'
done
