#!/usr/bin/env bash
# An external suite written by others through the interposer: mpi4py's own tests of
# collective communication (and of the communicator calls whose state smelt caches),
# run unchanged under mpirun with libsmelt_mpi.so preloaded.
#
# mpi4py is Debian's python3-mpi4py (built by Debian against the system Open MPI;
# 3.1.4 on Debian 12), its test suite comes from the PyPI sdist of exactly the version
# installed (the Debian package ships no tests). Both are cached: the packages stay
# installed, the sdist's test/ lives in target/mpi4py/ (delete it to fetch it again).
#
# Runs: 2 ranks, 4 ranks on the machine's CPUs (oversubscribed), 4 ranks as 2 emulated
# nodes (SMELT_RANKS_PER_NODE=2), at mpi4py's default thread level (MPI_THREAD_MULTIPLE,
# what Python users get), and 2 ranks at MPI_THREAD_SERIALIZED. Each must pass (exit 0,
# every rank finishes, no test fails) and rank 0's SMELT_MPI_VERBOSE summary must show
# smelt took MPI_Bcast, MPI_Reduce, MPI_Allreduce and MPI_Barrier calls. Nothing is
# excluded: every selected test passes through smelt.
#
#   SMELT_MPI4PY_TESTS  regex of test modules (default: test_cco|test_comm|test_attributes)
#   SMELT_MPI4PY_BASELINE=1  also run each configuration without the interposer
#   SMELT_NO_INSTALL=1  install nothing (fails if mpi4py is missing)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=/usr/bin/python3   # Debian's python: python3 on the PATH may be another (pyenv) without the package
TESTS_RE="${SMELT_MPI4PY_TESTS:-test_cco|test_comm|test_attributes}"
TARGET="${CARGO_TARGET_DIR:-target}"
CACHE="$TARGET/mpi4py"
RUN_TIMEOUT=300

# Open MPI, clang (bindgen) and mpi4py's packages, only what is missing (nothing with
# SMELT_NO_INSTALL=1); python3-numpy: mpi4py's tests then also run every collective on
# NumPy arrays.
bash scripts/deps.sh python3 python3-pip python3-mpi4py python3-numpy

VERSION="$("$PY" -c 'import mpi4py; print(mpi4py.__version__)')"
SRC="$CACHE/mpi4py-$VERSION"
if [ ! -f "$SRC/test/runtests.py" ]; then
    mkdir -p "$CACHE"
    echo "[mpi4py] fetching the test suite of mpi4py $VERSION (PyPI sdist)" >&2
    "$PY" -m pip download -q --no-binary :all: --no-deps \
        -d "$CACHE" "mpi4py==$VERSION" >&2
    tar -xzf "$CACHE/mpi4py-$VERSION.tar.gz" -C "$CACHE" "mpi4py-$VERSION/test"
    rm -f "$CACHE/mpi4py-$VERSION.tar.gz"
fi

cargo build -q -p smelt-mpi --features mpi
LIB="$(cd "$TARGET/debug" && pwd)/libsmelt_mpi.so"
[ -f "$LIB" ] || { echo "[mpi4py] $LIB not built" >&2; exit 1; }

MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
LOGS="$CACHE/logs"
mkdir -p "$LOGS"

# THREAD_LEVEL=serialized in a configuration passes --thread-level=serialized (mpi4py
# asks for MPI_THREAD_MULTIPLE by default; the interposer takes calls at every level).
# --no-builddir: test the installed (Debian) mpi4py, not a build tree.
suite() { # name np preload(0/1) [VAR=value ...] [THREAD_LEVEL=level]
    local name="$1" np="$2" preload="$3"; shift 3
    local env=() log="$LOGS/$name.log" level=()
    for kv in "$@"; do
        case "$kv" in
        THREAD_LEVEL=*) level=(--thread-level="${kv#THREAD_LEVEL=}") ;;
        *) env+=(-x "$kv") ;;
        esac
    done
    [ "$preload" = 1 ] && env+=(-x "LD_PRELOAD=$LIB" -x SMELT_MPI_VERBOSE=1)
    local t0=$SECONDS rc=0
    timeout -k 10 "$RUN_TIMEOUT" "${MPIRUN[@]}" -np "$np" "${env[@]}" \
        "$PY" "$SRC/test/runtests.py" --no-builddir -q "${level[@]}" \
        -i "$TESTS_RE" >"$log" 2>&1 || rc=$?
    local secs=$((SECONDS - t0))
    local ran ok
    # ranks' outputs interleave, even within a line: match anywhere, count occurrences
    ran="$(grep -oE 'Ran [0-9]+ tests' "$log" | head -1 | awk '{print $2}' || true)"
    ok="$(grep -oE 'Ran [0-9]+ tests' "$log" | wc -l)"
    local fail=""
    [ "$rc" = 0 ] || fail="exit $rc$([ "$rc" = 124 ] && echo " (timed out after ${RUN_TIMEOUT}s)")"
    [ -z "$fail" ] && [ "$ok" != "$np" ] && fail="$ok of $np ranks finished the tests"
    [ -z "$fail" ] && grep -qE 'FAILED \(|^(ERROR|FAIL):' "$log" && fail="tests failed"
    local took=""
    if [ "$preload" = 1 ] && [ -z "$fail" ]; then
        for call in Bcast Reduce Allreduce Barrier Gather Scatter Allgather Allgatherv Reduce_scatter_block Reduce_scatter; do
            local n
            # the largest count: a test that spawns processes adds their (rank 0) summaries
            n="$(sed -nE "s/.*smelt-mpi: MPI_$call: taken ([0-9]+),.*/\1/p" "$log" | sort -n | tail -1)"
            took+=" $call ${n:-none}"
            case "$call" in Bcast|Reduce|Allreduce|Barrier)
                [ -n "$n" ] && [ "$n" -gt 0 ] || fail+="${fail:+, }smelt took no MPI_$call call";;
            esac
        done
    fi
    local skipped
    skipped="$(grep -m1 -oE 'skipped=[0-9]+' "$log" || echo skipped=0)"
    if [ -n "$fail" ]; then
        grep -q '^smelt-mpi: summary' "$log" || [ "$preload" = 0 ] || fail+=" (no smelt-mpi summary: not loaded?)"
        echo "[mpi4py] FAIL $name: np=$np, ${ran:-?} tests, ${secs}s: $fail (log: $log)"
        grep -E '^(ERROR|FAIL):|Error|smelt-mpi' "$log" | head -40 || true
        tail -30 "$log"
        return 1
    fi
    echo "[mpi4py] ok $name: np=$np, $ran tests on every rank, $skipped, ${secs}s${took:+; smelt took:$took}"
}

echo "[mpi4py] mpi4py $VERSION ($("$PY" -c 'import mpi4py; print(mpi4py.__path__[0])')), tests matching '$TESTS_RE', interposer $LIB"
status=0
configs=("np2 2" "np4 4" "np4-nodes2 4 SMELT_RANKS_PER_NODE=2 SMELT_MPI_FORCE=1" "np2-serialized 2 THREAD_LEVEL=serialized")
for c in "${configs[@]}"; do
    # shellcheck disable=SC2086
    set -- $c
    name="$1" np="$2"; shift 2
    if [ -n "${SMELT_MPI4PY_BASELINE:-}" ]; then
        suite "$name-plain" "$np" 0 "$@" || status=1
    fi
    suite "$name-smelt" "$np" 1 "$@" || status=1
done
exit $status
