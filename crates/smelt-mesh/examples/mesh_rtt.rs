//! The round trip of a world's mesh alone, between two pinned threads: a 16-byte
//! message and an empty answer, as an active-message request and its reply travel, with
//! no active-message layer (what `smelt_am`'s round trip adds to it is its own work).
//!
//! `cargo run --release -p smelt-mesh --example mesh_rtt [-- ROUND_TRIPS]` (default
//! 200 000; prints ns per round trip, 5 repetitions after a warm-up)

use smelt_mesh::world::MeshSpec;
use smelt_mesh::{CpuId, Rank, World};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200_000);
    let worlds = World::threads(2)?;
    let spec = MeshSpec::all_to_all();
    let mut client = worlds[0].mesh(&spec)?;
    let mut server = worlds[1].mesh(&spec)?;
    let total = 6 * n;
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let echo = s.spawn(move || -> Result<(), smelt_mesh::mesh::MeshError> {
            let _ = smelt_transport::pin_current_thread(CpuId(1));
            let mut buf = [0u8; 64];
            for _ in 0..total {
                let (from, tag, _) = server.recv_any(&mut buf, Duration::from_secs(30))?;
                server.send(from, tag, &[], Duration::from_secs(30))?;
            }
            Ok(())
        });
        let _ = smelt_transport::pin_current_thread(CpuId(0));
        let mut buf = [0u8; 64];
        let msg = [7u8; 16];
        let mut round_trip = || -> Result<(), smelt_mesh::mesh::MeshError> {
            while client.try_send(Rank(1), 42, &msg).is_err() {}
            loop {
                if client.try_recv_any(&mut buf)?.is_some() {
                    return Ok(());
                }
            }
        };
        for _ in 0..n {
            round_trip()?;
        }
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..n {
                round_trip()?;
            }
            println!(
                "mesh round trip {:.1} ns",
                t.elapsed().as_nanos() as f64 / n as f64
            );
        }
        echo.join().expect("the echo thread")?;
        Ok(())
    })
}
