//! The Fortran entry points (`mpi_bcast_`, ...; see `src/fortran.c`): exported here,
//! because a Rust library exports only the symbols it defines itself, and bodies in C,
//! where MPI's Fortran handles, `MPI_Fint` and the Fortran `MPI_IN_PLACE` are known.
//! Each call goes to the interposer's C function (`MPI_Bcast`, ...), so Fortran
//! programs take the same paths (and counts) as C ones.

use std::os::raw::{c_char, c_void};

type P = *mut c_void;

/// Declares `$body` (in `src/fortran.c`: arguments `$args`, then the symbol's name)
/// and defines each `$sym` (the manglings of one Fortran entry point) as a call of it
/// with its arguments and its own name.
macro_rules! fortran {
    ($body:ident $args:tt: $($sym:ident)+) => {
        fortran_body!($body $args);
        $(fortran_symbol!($body $args $sym);)+
    };
}

/// The declaration of [`fortran!`]'s body.
macro_rules! fortran_body {
    ($body:ident ($($a:ident),*)) => {
        extern "C" {
            fn $body($($a: P,)* name: *const c_char);
        }
    };
}

/// One symbol of [`fortran!`].
macro_rules! fortran_symbol {
    ($body:ident ($($a:ident),*) $sym:ident) => {
        /// A Fortran MPI entry point, taken over (see `src/fortran.c`).
        ///
        /// # Safety
        /// MPI's contract for the Fortran binding of this call.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $sym($($a: P),*) {
            // The caller's arguments, passed on unchanged (MPI's contract for
            // this Fortran call), and this symbol's name as a NUL-terminated string.
            // SAFETY: as argued in the lines above.
            unsafe { $body($($a,)* concat!(stringify!($sym), "\0").as_ptr().cast()) }
        }
    };
}

fortran!(smelt_mpi_f_bcast(b, c, t, r, m, e): mpi_bcast_ mpi_bcast__ MPI_BCAST mpi_bcast);
fortran!(smelt_mpi_f_reduce(s, d, c, t, o, r, m, e): mpi_reduce_ mpi_reduce__ MPI_REDUCE mpi_reduce);
fortran!(smelt_mpi_f_allreduce(s, d, c, t, o, m, e): mpi_allreduce_ mpi_allreduce__ MPI_ALLREDUCE mpi_allreduce);
fortran!(smelt_mpi_f_barrier(m, e): mpi_barrier_ mpi_barrier__ MPI_BARRIER mpi_barrier);
fortran!(smelt_mpi_f_gather(s, sc, st, d, dc, dt, r, m, e): mpi_gather_ mpi_gather__ MPI_GATHER mpi_gather);
fortran!(smelt_mpi_f_scatter(s, sc, st, d, dc, dt, r, m, e): mpi_scatter_ mpi_scatter__ MPI_SCATTER mpi_scatter);
fortran!(smelt_mpi_f_finalize(e): mpi_finalize_ mpi_finalize__ MPI_FINALIZE mpi_finalize);
