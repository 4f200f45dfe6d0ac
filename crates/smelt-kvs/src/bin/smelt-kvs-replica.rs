//! One replica of a `smelt-kvs` store whose replicas run as processes
//! (`Deployment::Processes`): started by the store with the replica's environment, it
//! serves until the store closes and prints its report as one JSON line.

fn main() {
    if let Err(e) = smelt_kvs::process::run_replica_from_env() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}
