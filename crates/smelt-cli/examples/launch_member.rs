//! A member program for `smelt launch`: joins the job from its environment, runs every
//! collective for some rounds and checks each result against a sequential computation.
//!
//! `smelt launch -n 4 -- target/debug/examples/launch_member [ROUNDS] [fail-at RANK ROUND]`

use smelt_runtime::process::join_from_env;
use smelt_runtime::Rank;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let fail_at: Option<(Rank, u64)> = (args.get(2).map(String::as_str) == Some("fail-at"))
        .then(|| (args[3].parse().unwrap(), args[4].parse().unwrap()));
    let mut m = match join_from_env() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let (n, me) = (m.size() as u64, m.rank().index() as u64);
    let r: Result<(), smelt_runtime::GroupError> = (|| {
        for r in 0..rounds {
            if fail_at == Some((m.rank(), r)) {
                std::process::exit(7);
            }
            m.barrier()?;
            let b = m.broadcast_word(if m.is_root() { r + 1 } else { 0 })?;
            assert_eq!(b, r + 1);
            let s = m.allreduce(me + r, |a, b| a + b)?;
            assert_eq!(s, n * (n - 1) / 2 + n * r);
            let g = m.gather_word(me)?;
            if let Some(g) = g {
                assert_eq!(g, (0..n).collect::<Vec<_>>());
            }
            let vals: Vec<u64> = (0..n).map(|k| k * 3 + r).collect();
            assert_eq!(
                m.scatter_word(m.is_root().then_some(&vals[..]))?,
                me * 3 + r
            );
            let mut v = vec![me as f64; 20];
            m.allreduce_slice(&mut v, |a, b| a + b)?;
            assert!(v.iter().all(|&x| x == (n * (n - 1) / 2) as f64));
        }
        Ok(())
    })();
    match r {
        Ok(()) => {
            if m.rank() == Rank(0) {
                println!("ok: {n} members, {rounds} rounds of every collective");
            }
        }
        Err(e) => {
            eprintln!("member {me}: {e}");
            std::process::exit(3);
        }
    }
}
