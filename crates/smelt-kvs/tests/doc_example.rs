//! The example of docs/kvs.md ("From Rust"), so the documented API cannot drift.

use smelt_kvs::{Protocol, Store, StoreConfig, TreeSpec};
use smelt_tree::Topology;

#[test]
fn docs_example_runs() -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = StoreConfig::new(8, 16)
        .protocol(Protocol::OnePaxos)
        .tree(TreeSpec::shaped(Topology::AdaptiveShuffled));
    cfg.key_len = 8;
    cfg.value_len = 16;
    let mut store = Store::start(cfg)?;
    let clients = store.take_clients();
    std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .into_iter()
            .map(|mut c| {
                s.spawn(move || {
                    c.set(b"key", b"value")?;
                    let v: Option<Vec<u8>> = c.get(b"key")?;
                    assert!(v.is_some());
                    Ok::<_, smelt_kvs::KvsError>(())
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
    });
    let report = store.close()?;
    report.check_logs()?;
    assert_eq!(report.replicas[0].as_ref().unwrap().applied, 16);
    Ok(())
}
