#!/usr/bin/env bash
# Interleaved comparison of smelt's queuepair and barrier with the peer baselines on
# this machine (core-to-core latency in a VM drifts, so only ratios taken in one run
# mean anything). Builds the peers' C programs (LLVM libomp barrier, dissemination
# barrier) into a temporary directory; needs clang + libomp-dev (scripts/deps.sh).
#
#   bash crates/smelt-runtime/bench/compare_peers.sh [reps]
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPS=${1:-3}
PEERS=${PEERS:-../shared/peers}
[ -d "$PEERS/c" ] || PEERS=/work/shared/peers
T=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p smelt-runtime --example compare_spsc --example barrier_bench
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
clang -O2 -fopenmp "$PEERS/c/omp_barrier.c" -o "$TMP/omp_llvm" -lm
gcc -O2 "$PEERS/c/barriers.c" -o "$TMP/barriers" -lpthread -lm
export PB_RUNS=${PB_RUNS:-7} PB_BATCH_MS=${PB_BATCH_MS:-50}
echo "== queuepair vs cache-line floor vs rtrb (same process, interleaved)"
"$T/release/examples/compare_spsc" "$((REPS * 2))"
for n in 2 8 16; do
  echo "== barrier, $n threads"
  for _ in $(seq "$REPS"); do
    "$TMP/omp_llvm" "$n" llvm
    "$TMP/barriers" dissem_yield "$n"
    "$T/release/examples/barrier_bench" "$n" binary
    "$T/release/examples/barrier_bench" "$n" flat
  done
done
