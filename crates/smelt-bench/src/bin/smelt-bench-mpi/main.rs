//! `smelt-bench-mpi`: the one MPI driver of smelt's services, run under `mpirun` (feature
//! `mpi` of `smelt-bench`). The first argument names the service; the rest are that
//! service's own arguments:
//!
//! ```text
//! cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi
//! mpirun -np 4 -x SMELT_RANKS_PER_NODE=2 target/release/smelt-bench-mpi am all
//! mpirun -np 4 -x SMELT_RANKS_PER_NODE=2 target/release/smelt-bench-mpi agg --items 10000
//! mpirun -np 4 target/release/smelt-bench-mpi global check|stealing|bench [--quick]
//! mpirun -np 4 -x SMELT_RANKS_PER_NODE=2 target/release/smelt-bench-mpi tasks --fib 20
//! ```
//!
//! * `am`: active messages — a correctness flood, LogP of a pair of ranks, the
//!   distributed histogram ([`am`]).
//! * `agg`: message aggregation, every scheme checked by checksums ([`agg`]).
//! * `global`: global arrays — the tests' checks, work stealing, the benchmark
//!   ([`global`]).
//! * `tasks`: fork-join tasks, fib and UTS checked against the sequential results
//!   ([`tasks`]).
//!
//! Every service runs in one world of the MPI ranks (`World::from_mpi_with`, [`job`]),
//! made from it with its `from_world` constructor. A missing or unknown service is a
//! usage line and exit status 2.

mod agg;
mod am;
mod global;
mod job;
mod tasks;

use std::process::ExitCode;

const USAGE: &str = "usage: mpirun -np N smelt-bench-mpi am|agg|global|tasks [ARGS...]   \
(a bad argument prints the service's own usage)";

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("am") => am::main(),
        Some("agg") => {
            agg::main();
            ExitCode::SUCCESS
        }
        Some("global") => {
            global::main();
            ExitCode::SUCCESS
        }
        Some("tasks") => tasks::main(),
        Some(other) => {
            eprintln!("smelt-bench-mpi: unknown service {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
        None => {
            eprintln!("smelt-bench-mpi: which service?\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
