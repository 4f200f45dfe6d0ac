//! With the `mpi` feature: compiles `src/shim.c` (MPI's handles) and `src/fortran.c`
//! (the Fortran entry points) with the MPI compiler wrapper that
//! rsmpi's probe finds (`$MPICC`, `mpicc`, or `$MPI_PKG_CONFIG`), so the interposer is
//! built for exactly the MPI ABI it will be loaded with. Without the feature: nothing.

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=src/fortran.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo:rerun-if-env-changed=MPI_PKG_CONFIG");
    #[cfg(feature = "mpi")]
    shim();
}

#[cfg(feature = "mpi")]
fn shim() {
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(errs) => {
            let why: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            panic!(
                "smelt-mpi: the `mpi` feature needs an MPI library (mpicc on PATH, $MPICC, or $MPI_PKG_CONFIG):\n{}",
                why.join("\n")
            );
        }
    };
    let mut b = cc::Build::new();
    b.file("src/shim.c").file("src/fortran.c").warnings(true);
    match &lib.mpicc {
        Some(mpicc) => {
            b.compiler(mpicc);
        }
        None => {
            for inc in &lib.include_paths {
                b.include(inc);
            }
        }
    }
    b.compile("smelt_mpi_shim");
}
