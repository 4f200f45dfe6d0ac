//! `World::stages`: sizes out of range are refused with an error on every member
//! (before any arithmetic on them), never a panic; a valid call gives each member its
//! ends and the others `None`.

use smelt_mesh::world::{World, WorldBuilder, WorldError};
use smelt_mesh::Rank;

#[test]
fn stages_out_of_range_are_errors_not_panics() {
    let job = WorldBuilder::new(3)
        .arena(8 << 20)
        .create_job(false)
        .unwrap();
    let worlds: Vec<World> = (0..3).map(|r| job.join(Rank(r)).unwrap()).collect();
    let pairs = [(Rank(0), Rank(1))];
    for (slots, bytes) in [
        (4, usize::MAX),
        (usize::MAX, 64),
        (0, 64),
        (4, 0),
        (65, 64),
        (4, (64 << 20) + 1),
    ] {
        for w in &worlds {
            let e = w.stages(&pairs, slots, bytes, None, None).unwrap_err();
            assert!(
                matches!(&e, WorldError::Invalid(m) if m.contains("buffers")),
                "{slots} x {bytes}: {e}"
            );
        }
    }
    // Nothing was carved: a valid call still agrees on every member.
    let got: Vec<Vec<bool>> = worlds
        .iter()
        .map(|w| {
            w.stages(&pairs, 2, 1000, None, None)
                .unwrap()
                .iter()
                .map(Option::is_some)
                .collect()
        })
        .collect();
    assert_eq!(got, vec![vec![true], vec![true], vec![false]]);
}
