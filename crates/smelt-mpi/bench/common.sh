# Sourced by the MPI bench scripts here (comm_churn.sh, mpi_latency.sh): after their
# options are parsed, with `root` set to the repository and `n` to the rank count.
# Sets `lib` (SMELT_MPI_LIB, else the release interposer, built when needed), `tmp` (a
# directory removed on exit, with any extra paths in `cleanup`) and `base` (mpirun of
# `n` ranks, oversubscribed, as root when needed).
lib="${SMELT_MPI_LIB:-$root/target/release/libsmelt_mpi.so}"
if [ -z "${SMELT_MPI_LIB:-}" ]; then
    (cd "$root" && cargo build --release -q -p smelt-mpi --features mpi)
fi
tmp="$(mktemp -d)"
cleanup=("$tmp")
trap 'rm -rf "${cleanup[@]}"' EXIT
asroot=()
[ "$(id -u)" = 0 ] && asroot=(--allow-run-as-root)
base=(mpirun "${asroot[@]}" --oversubscribe -np "$n")
