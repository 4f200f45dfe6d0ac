#!/usr/bin/env bash
# Makes a self-contained folder that runs smelt on a bare x86-64 Linux host: no Rust,
# no compiler, no MPI, no network. Usage:
#
#   bash scripts/bundle.sh [DIR]          # default DIR: target/smelt-bundle
#   DIR/smelt run --no-peers              # on the other host: the main job
#   DIR/smelt bench --quick               # or any smelt command
#
# DIR holds
#   smelt            a wrapper that sets LD_LIBRARY_PATH, SMELT_PEERS_DIR and (with the
#                    interposer) SMELT_MPI_LIB, then runs
#   bin/smelt        the smelt executable (debug info stripped)
#   bin/smelt-bench-mpi  the one MPI driver of the services' benchmarks (`smelt bench
#                    am|aggregation|offload|tasks` run it under mpirun from next to
#                    smelt), where this machine has MPI; it needs the host's MPI
#   lib/             libsmelt.so and libsmelt_mpi.so (for programs built elsewhere) and
#                    every shared library the programs need beyond the C library itself
#                    (hwloc, udev, libgomp, libomp, ...), copied from this machine
#   peers/           the C peers (pthread and sense-reversal barriers, the UMP ring,
#                    OpenMP with gcc and clang) built here, found by smelt where no
#                    compiler is (crates/smelt-peers: STEM-COMPILER-prebuilt)
#   MANIFEST         what was built, from which commit, on which machine
#
# The Open MPI peers and `smelt bench mpi` need an MPI installation on the host;
# without one they are reported as skipped, as everywhere else.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/smelt-bundle}"
bash scripts/deps.sh
cargo build --release -p smelt-cli -p smelt-capi
# The interposer and the MPI driver only where MPI is (deps.sh installs Open MPI):
# without mpicc they are left out (said on stderr); with it, a failed build is an error,
# not a bundle that quietly lacks them.
have_mpi_lib=0
have_driver=0
if command -v mpicc >/dev/null; then
    cargo build --release -p smelt-mpi --features mpi
    have_mpi_lib=1
    cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi
    have_driver=1
else
    echo "[bundle] no mpicc: libsmelt_mpi.so and smelt-bench-mpi are left out" >&2
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/peers"
strip_copy() { # strip_copy SRC DEST: a copy without debug information
    if command -v objcopy >/dev/null; then
        objcopy --strip-debug "$1" "$2"
    else
        cp "$1" "$2"
    fi
}
strip_copy target/release/smelt "$out/bin/smelt"
strip_copy target/release/libsmelt.so "$out/lib/libsmelt.so"
[ "$have_mpi_lib" = 1 ] && strip_copy target/release/libsmelt_mpi.so "$out/lib/libsmelt_mpi.so"
[ "$have_driver" = 1 ] && strip_copy target/release/smelt-bench-mpi "$out/bin/smelt-bench-mpi"

# The C peers, built as smelt builds them (crates/smelt-peers/src/c.rs: the same
# flags), under the names it looks for when the host has no compiler.
src=crates/smelt-peers/c
build_peer() { # build_peer STEM COMPILER FLAGS...
    local stem="$1" cc="$2"
    shift 2
    if command -v "$cc" >/dev/null; then
        "$cc" "$@" -o "$out/peers/$stem-$cc-prebuilt" "$src/$stem.c" -I "$src" ||
            echo "[bundle] $cc could not build $stem.c: that peer will be skipped" >&2
    else
        echo "[bundle] no $cc: the $stem peer built with it will be skipped" >&2
    fi
}
build_peer barriers cc -O2 -pthread
build_peer ump cc -O2 -pthread
build_peer omp gcc -O2 -fopenmp
build_peer omp clang -O2 -fopenmp

# Every shared library the programs load, except the C library's own (present on
# every glibc host, and tied to its dynamic loader).
copy_libs() { # copy_libs ELF...
    ldd "$@" 2>/dev/null | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
        case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
        *) cp -L "$lib" "$out/lib/" ;;
        esac
    done
}
copy_libs "$out"/bin/* "$out"/lib/libsmelt*.so "$out"/peers/*-prebuilt
# libsmelt_mpi.so needs the MPI library of the program it is preloaded into: never
# bundle one MPI's libraries for another's programs.
rm -f "$out"/lib/libmpi*.so* "$out"/lib/libopen-*.so* "$out"/lib/libpmix.so* \
    "$out"/lib/libprrte.so* "$out"/lib/libhwloc-plugins* 2>/dev/null || true

cat >"$out/smelt" <<'EOF'
#!/bin/sh
# Runs the bundled smelt with its own libraries and prebuilt peers.
# No external command (not even dirname): it must run with PATH reduced to nothing.
case "$0" in */*) here="${0%/*}" ;; *) here=. ;; esac
here="$(cd "$here" && pwd)"
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SMELT_PEERS_DIR="${SMELT_PEERS_DIR:-$here/peers}"
export LD_LIBRARY_PATH SMELT_PEERS_DIR
# The interposer `smelt bench mpi` (and the report's MPI section) preloads: in lib/,
# not next to bin/smelt where smelt looks by default.
if [ -z "${SMELT_MPI_LIB:-}" ] && [ -f "$here/lib/libsmelt_mpi.so" ]; then
    SMELT_MPI_LIB="$here/lib/libsmelt_mpi.so"
    export SMELT_MPI_LIB
fi
exec "$here/bin/smelt" "$@"
EOF
chmod +x "$out/smelt"
{
    echo "smelt bundle"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built on: $(uname -srm), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "files:"
    (cd "$out" && find . -type f | sort | sed 's/^/  /')
} >"$out/MANIFEST"
echo "[bundle] $out ($(du -sh "$out" | cut -f1)): run $out/smelt" >&2
