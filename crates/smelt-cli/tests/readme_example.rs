//! The README's library example, run on a model of this machine's first CPUs (or a
//! synthetic one), so the documented API cannot drift from the real one.

use smelt_model::Model;
use smelt_runtime::Group;
use smelt_tree::{predict, Payload, Topology};

#[test]
fn readme_library_example_runs() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("model.json");
    smelt_model::synthetic(2, 2, 30.0, 100.0, 3.0).save(&path)?;

    let model = Model::load(&path)?;
    let members = model.positions(&[0, 1, 2, 3])?;
    let tree = Topology::AdaptiveShuffled.generate(&model, &members, None)?;
    let predicted = predict(&model, &tree, Payload::default())?;
    let results = Group::new(&tree)?.run(|m| {
        m.barrier()?;
        let v = m.broadcast_word(if m.is_root() { 42 } else { 0 })?;
        m.allreduce(v + m.rank().index() as u64, |a, b| a + b)
    })?;

    assert!(predicted.barrier > predicted.broadcast && predicted.broadcast > 0.0);
    // 4 members each contribute 42 + rank: 4*42 + (0+1+2+3) = 174, seen by everyone.
    assert_eq!(results.len(), 4);
    for r in results {
        assert_eq!(r?, 174);
    }
    Ok(())
}
