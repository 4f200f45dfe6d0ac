#!/usr/bin/env bash
# Installs what smelt needs on a Debian machine, only what is missing.
#   hwloc (topology), pkg-config, graphviz (tree drawings), fontconfig/freetype (plots),
#   gcc/clang + OpenMP runtimes and Open MPI (the peers `smelt bench` compares against;
#   Open MPI's headers and mpicc also build smelt-mpi's interposer, whose bindings
#   bindgen makes with the libclang that the clang package brings; MPICH beside it, whose
#   mpicc.mpich builds the interposer for MPICH's ABI, and gfortran for its Fortran test).
#   chromium renders the page of `smelt report` in its browser test. ucx-utils brings
#   ucx_perftest, the UCX peer of `smelt bench am`.
# Extra Debian packages to make sure of may be given as arguments
# (`bash scripts/deps.sh python3-mpi4py`).
# Set SMELT_NO_INSTALL=1 to skip (then missing peers are reported as skipped).
set -euo pipefail
[ -n "${SMELT_NO_INSTALL:-}" ] && exit 0
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in pkg-config libhwloc-dev libudev-dev hwloc graphviz libfontconfig1-dev libfreetype-dev fonts-dejavu-core gcc clang libomp-dev gfortran openmpi-bin libopenmpi-dev libmpich-dev chromium ucx-utils "$@"; do
    have_pkg "$p" || need+=("$p")
done
if ! command -v cargo >/dev/null; then
    echo "smelt needs a Rust toolchain (cargo); install it with rustup first" >&2
    exit 1
fi
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "[smelt] installing Debian packages: ${need[*]}" >&2
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
