#!/usr/bin/env bash
# The whole test suite: installs what it needs, then builds and tests every crate
# (unit, integration, CLI, the C API examples, the MPI interposer under mpirun),
# model-checks the queuepair protocol with loom, and runs the transport tests under
# Miri when a nightly toolchain with Miri is installed. Stress runs are bounded; scale
# them with SMELT_STRESS=<factor>.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# No incremental caches under CI (they doubled the target directory); show the disk so a
# CI run that runs out of it says so up front.
[ -n "${CI:-}" ] && export CARGO_INCREMENTAL=0
df -h . | tail -1 | awk '{print "[smelt] disk: " $4 " free of " $2}'
echo "[smelt] build"
cargo build --workspace --all-targets
echo "[smelt] tests"
cargo test --workspace 2>&1
echo "[smelt] MPI interposer: smelt-mpi with its 'mpi' feature, C programs under mpirun"
cargo test -p smelt-mpi --features mpi 2>&1
echo "[smelt] the services across nodes: smelt-am, smelt-agg, smelt-global with their 'mpi' feature"
cargo test -p smelt-am --features mpi 2>&1
cargo test -p smelt-agg --features mpi 2>&1
cargo test -p smelt-global --features mpi 2>&1
echo "[smelt] worlds of MPI ranks: smelt-mesh's MPI layer, and smelt-world's mpirun tests (an rsmpi program's World; every service in one world of emulated nodes)"
cargo test -p smelt-mesh --features mpi --lib 2>&1
cargo test -p smelt-world --features mpi --test mpirun_world 2>&1
echo "[smelt] C and Fortran worlds of MPI ranks: libsmelt with its 'mpi' feature, examples/c/world.c and examples/fortran/world.F90 under mpirun"
cargo test -p smelt-capi --features mpi --test world --test fortran_world 2>&1
echo "[smelt] the one MPI driver, smelt-bench-mpi am|agg|global|tasks, under mpirun"
cargo build -p smelt-bench --features mpi --bin smelt-bench-mpi 2>&1
cargo test -p smelt-bench --features mpi --test mpirun_am --test mpirun_agg --test mpirun_global --test mpirun_tasks 2>&1
echo "[smelt] MPI interposer built against MPICH too (its own target directory), one C program run under mpiexec.mpich"
MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpich cargo build -p smelt-mpi --features mpi 2>&1
mpicc.mpich -O1 -Wall -Werror -o target/mpich/collectives crates/smelt-mpi/tests/c/collectives.c
# SMELT_MPI_MAX_BYTES as in the Rust tests: Debian's MPICH 4.0.2 itself crashes on an
# in-place MPI_Reduce of 4000 bytes to rank 1 of 2 (also without smelt), which smelt then takes.
# SMELT_MPI_MEASURE 0 for the same reason: measuring hands every other block of calls to
# MPICH's own path, and so that very call to MPICH's crashing reduce (the measuring itself is
# tested under Open MPI, tests/mpirun.rs and the mpi4py suite).
out="$(timeout -k 5 120 mpiexec.mpich -n 2 -genv LD_PRELOAD "$PWD/target/mpich/debug/libsmelt_mpi.so" \
    -genv SMELT_MPI_VERBOSE 1 -genv SMELT_MPI_MAX_BYTES 16384 -genv SMELT_MPI_MEASURE 0 target/mpich/collectives 2>&1)" || { echo "$out" | tail -30; exit 1; }
grep -q "collectives: OK" <<<"$out" && grep -qE "MPI_Allreduce: taken [1-9]" <<<"$out" \
    || { echo "$out" | tail -30; echo "[smelt] MPICH: smelt did not take the calls" >&2; exit 1; }
echo "[smelt] MPI interposer under an external suite: mpi4py's collective tests (2 and 4 ranks, emulated nodes)"
bash scripts/mpi4py_suite.sh 2>&1
echo "[smelt] the bundle for bare hosts: smelt, its libraries and prebuilt peers, run with PATH reduced to nothing"
bash scripts/bundle.sh target/bundle-test 2>&1 | tail -1
out="$(env -i PATH=/nonexistent LD_LIBRARY_PATH= HOME=/nonexistent XDG_CACHE_HOME="$PWD/target/bundle-test-cache" \
    "$PWD/target/bundle-test/smelt" bench --quick --threads 2 --peer-threads 2 --ops barrier --time-limit 120 2>&1)" \
    || { echo "$out" | tail -30; echo "[smelt] the bundle did not run" >&2; exit 1; }
for peer in pthread_barrier dissemination_barrier "omp_barrier (GOMP)" "omp_barrier (libomp)"; do
    grep -F "$peer" <<<"$out" | grep -qv skipped \
        || { echo "$out" | tail -30; echo "[smelt] the bundle's $peer peer did not run" >&2; exit 1; }
done
echo "[smelt] the bundle's smelt report with PATH=/usr/bin:/bin and LD_LIBRARY_PATH only the bundle's lib/"
rm -rf target/bundle-test-report
out="$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$PWD/target/bundle-test/lib" HOME=/nonexistent \
    XDG_CACHE_HOME="$PWD/target/bundle-test-cache" "$PWD/target/bundle-test/smelt" report \
    --only machine,trees,collectives --time-limit 90 --out "$PWD/target/bundle-test-report" 2>&1)" \
    || { echo "$out" | tail -30; echo "[smelt] the bundle's smelt report failed" >&2; exit 1; }
python3 - "$PWD/target/bundle-test-report" <<'EOF' || { echo "$out" | tail -30; exit 1; }
import json, sys
d = sys.argv[1]
html = open(f"{d}/report.html").read()
r = json.load(open(f"{d}/report.json"))
steps = {s["id"]: s["status"] for s in r["steps"]}
bad = [k for k in ("probe", "collectives") if steps.get(k) != "ok"]
missing = [k for k in ("machine", "trees", "collectives") if k not in r["data"]]
if bad or missing or "<svg" not in html:
    sys.exit(f"[smelt] the bundle's report is incomplete: steps {steps}, sections missing {missing}")
print(f"[smelt] the bundle's report: {len(html)} bytes of HTML, steps {steps}")
EOF
echo "[smelt] loom model check of the queuepair protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p smelt-transport --release --lib --test loom 2>&1
echo "[smelt] loom model check of the task pool's worker latch"
RUSTFLAGS="--cfg smelt_tasks_loom" CARGO_TARGET_DIR=target/loom-tasks cargo test -p smelt-tasks --release --lib latch 2>&1
if cargo +nightly miri --version >/dev/null 2>&1; then
    echo "[smelt] transport tests under Miri"
    MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p smelt-transport --test channel 2>&1
else
    echo "[smelt] Miri skipped: no nightly toolchain with the miri component on this machine"
fi
