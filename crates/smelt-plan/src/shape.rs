//! The trait of tree builders: how a service that keeps a tree over its members (the
//! store's acceptor broadcast) is handed the tree crate's generators without
//! depending on them, and rebuilds its tree over the members that are left.

use crate::table::TableError;
use crate::tree::{Tree, TreeError};
use smelt_ids::{CpuId, Pos};
use std::fmt;
use std::sync::Arc;

/// Builds a group's tree over any subset of its members. The tree crate implements it
/// for its topologies (`smelt_tree::Topology` over a uniform machine,
/// `smelt_tree::shape::ModelShape` over a machine model); a service holds an
/// `Arc<dyn Shape>` and calls it when its members change. Building must be
/// deterministic: members that build the same tree from the same arguments agree on
/// it without talking.
pub trait Shape: Send + Sync + fmt::Debug {
    /// A short name for reports (`adaptive-shuffled`).
    fn name(&self) -> String;

    /// The tree over `members` (distinct indices into a group of `size` members; tree
    /// position `i` is `members[i]`), rooted at `root` (one of `members`; `None`: the
    /// builder's own choice). Errors say what is wrong (an index out of range, a root
    /// that is not a member, ...).
    fn build(&self, size: usize, members: &[usize], root: Option<usize>)
        -> Result<Tree, TreeError>;

    /// This builder as text from which the same program rebuilds it in another
    /// process (the tree crate's `smelt_tree::shape::from_description`); `None` if it
    /// cannot be sent (the default).
    fn describe(&self) -> Option<String> {
        None
    }
}

/// Checks the arguments of [`Shape::build`]: members distinct and below `size`, at
/// least one, and the root (if given) one of them; returns the root's position among
/// `members`. For implementations.
pub fn check_members(
    size: usize,
    members: &[usize],
    root: Option<usize>,
) -> Result<Option<usize>, TreeError> {
    if members.is_empty() {
        return Err(TreeError::Empty);
    }
    let mut seen = vec![false; size];
    for &m in members {
        if m >= size {
            return Err(TreeError::Invalid(format!(
                "member {m} is not one of the group's {size}"
            )));
        }
        if std::mem::replace(&mut seen[m], true) {
            return Err(TreeError::Invalid(format!("member {m} is listed twice")));
        }
    }
    root.map(|r| {
        members
            .iter()
            .position(|&m| m == r)
            .ok_or_else(|| TreeError::Invalid(format!("the root {r} is not one of the members")))
    })
    .transpose()
}

/// The trees that are a function of the ranks alone (no machine): the star, the
/// binary tree and the k-nomial trees, laid out as MPI libraries do (the root is rank
/// 0, the other members follow in the order given). The tree crate's generators of
/// the same names (`sequential`, `binary`, `knomial:K`) build their trees here; a
/// service that needs a tree without a machine model (the store's default) uses them
/// directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ranked {
    /// Star: the root sends to every member in turn.
    Sequential,
    /// Binary tree in rank order: rank `i` sends to `2i+1`, then `2i+2`.
    Binary,
    /// k-nomial tree of radix `k` (1 = chain, 2 = binomial); larger subtrees first.
    Knomial(u32),
}

impl Ranked {
    /// The name the tree crate's registry gives it (`sequential`, `binary`,
    /// `knomial:4`).
    pub fn name(self) -> String {
        match self {
            Ranked::Sequential => "sequential".into(),
            Ranked::Binary => "binary".into(),
            Ranked::Knomial(k) => format!("knomial:{k}"),
        }
    }

    /// The shape named `name` as [`name`](Self::name) writes it (and the tree crate's
    /// aliases `star`, `flat`, `chain`, `binomial`), if it is one of these.
    pub fn from_name(name: &str) -> Option<Ranked> {
        let n = name.trim().to_ascii_lowercase();
        Some(match n.as_str() {
            "sequential" | "star" | "flat" => Ranked::Sequential,
            "binary" | "bintree" => Ranked::Binary,
            "chain" => Ranked::Knomial(1),
            "binomial" => Ranked::Knomial(2),
            _ => match n.strip_prefix("knomial:")?.parse::<u32>() {
                Ok(k) if k >= 1 => Ranked::Knomial(k),
                _ => return None,
            },
        })
    }

    /// The child lists (local indices `0..n`, send order) rooted at local index
    /// `root`.
    pub fn children(self, n: usize, root: usize) -> Vec<Vec<usize>> {
        match self {
            Ranked::Sequential => ranked(
                n,
                root,
                |r, n| {
                    if r == 0 {
                        (1..n).collect()
                    } else {
                        vec![]
                    }
                },
            ),
            Ranked::Binary => ranked(n, root, |r, n| {
                [2 * r + 1, 2 * r + 2]
                    .into_iter()
                    .filter(|&x| x < n)
                    .collect()
            }),
            Ranked::Knomial(k) => {
                let k = k.max(1) as usize;
                ranked(n, root, |r, n| knomial_children(r, n, k))
            }
        }
    }
}

impl Shape for Ranked {
    fn name(&self) -> String {
        Ranked::name(*self)
    }

    /// Over `members` (tree member `i` is CPU id `members[i]`), rooted at `root`,
    /// else at the first member.
    fn build(
        &self,
        size: usize,
        members: &[usize],
        root: Option<usize>,
    ) -> Result<Tree, TreeError> {
        let root = check_members(size, members, root)?.unwrap_or(0);
        let children = self.children(members.len(), root);
        Tree::new(
            members.iter().map(|&m| CpuId(m as u32)).collect(),
            Pos(root),
            children.into_iter().map(Pos::list).collect(),
        )
    }

    fn describe(&self) -> Option<String> {
        Some(description(&Ranked::name(*self)))
    }
}

/// The description ([`Shape::describe`]) of a shape known by its name alone:
/// `{"shape":"NAME"}`. The tree crate adds its fields (a machine model, CPUs) to the
/// same object.
pub fn description(name: &str) -> String {
    serde_json::json!({ "shape": name }).to_string()
}

/// The shape of a description, if it is a [`Ranked`] one (only a `shape` field naming
/// it); `Ok(None)` for a description of another shape (the tree crate's
/// `smelt_tree::shape::from_description` reads every one); `Err` ([`TableError`]) for
/// text that is not a description.
pub fn ranked_from_description(text: &str) -> Result<Option<Arc<dyn Shape>>, TableError> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| TableError(format!("not a tree shape's description: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| TableError(format!("not a tree shape's description: {text}")))?;
    let name = obj.get("shape").and_then(|s| s.as_str()).ok_or_else(|| {
        TableError(format!(
            "a tree shape's description without \"shape\": {text}"
        ))
    })?;
    if obj.len() != 1 {
        return Ok(None);
    }
    Ok(Ranked::from_name(name).map(|r| Arc::new(r) as Arc<dyn Shape>))
}

/// Lays out a rank-based shape: rank 0 is `root`, ranks 1.. are the other members
/// in order; `kids(rank, n)` gives a rank's children (ranks) in send order. Returns
/// the child lists by local index.
pub fn ranked(n: usize, root: usize, kids: impl Fn(usize, usize) -> Vec<usize>) -> Vec<Vec<usize>> {
    let mut seq = Vec::with_capacity(n);
    seq.push(root);
    seq.extend((0..n).filter(|&i| i != root));
    let mut ch = vec![Vec::new(); n];
    for r in 0..n {
        ch[seq[r]] = kids(r, n).into_iter().map(|x| seq[x]).collect();
    }
    ch
}

/// Children of rank `r` in a k-nomial tree of `n` ranks: at distance `k^s` for
/// every digit position `s` below `r`'s lowest non-zero base-k digit, largest
/// distance (largest subtree) first.
pub fn knomial_children(r: usize, n: usize, k: usize) -> Vec<usize> {
    if k == 1 {
        return if r + 1 < n { vec![r + 1] } else { vec![] };
    }
    let mut dists = Vec::new();
    let mut d = 1usize;
    while d < n && r.is_multiple_of(d.saturating_mul(k)) {
        dists.push(d);
        d = d.saturating_mul(k);
    }
    let mut out = Vec::new();
    for &d in dists.iter().rev() {
        for j in 1..k {
            let c = r + j * d;
            if c < n {
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_checked() {
        assert_eq!(check_members(4, &[3, 1], Some(1)), Ok(Some(1)));
        assert_eq!(check_members(4, &[3, 1], None), Ok(None));
        assert_eq!(check_members(4, &[], None), Err(TreeError::Empty));
        for (m, r, want) in [
            (&[4usize][..], None, "not one of the group's 4"),
            (&[1, 1][..], None, "twice"),
            (&[1, 2][..], Some(3), "root 3 is not one of the members"),
        ] {
            let e = check_members(4, m, r).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn ranked_shapes_and_their_descriptions() {
        let t = Ranked::Binary.build(8, &[5, 2, 7, 1], Some(7)).unwrap();
        assert_eq!(t.cpu(t.root), CpuId(7));
        assert_eq!(t.children[t.root].len(), 2);
        let star = Ranked::Sequential.build(4, &[0, 1, 2, 3], None).unwrap();
        assert_eq!(star.children[0], Pos::list([1, 2, 3]));
        let chain = Ranked::Knomial(1).build(3, &[0, 1, 2], None).unwrap();
        assert_eq!(chain.children, vec![Pos::list([1]), Pos::list([2]), vec![]]);
        for r in [Ranked::Sequential, Ranked::Binary, Ranked::Knomial(4)] {
            let back = ranked_from_description(&r.describe().unwrap())
                .unwrap()
                .unwrap();
            assert_eq!(back.name(), r.name());
            assert_eq!(Ranked::from_name(&r.name()), Some(r));
        }
        assert_eq!(Ranked::from_name("binomial"), Some(Ranked::Knomial(2)));
        assert_eq!(Ranked::from_name("knomial:0"), None);
        assert!(ranked_from_description(r#"{"shape":"adaptive"}"#)
            .unwrap()
            .is_none());
        assert!(ranked_from_description(r#"{"shape":"binary","model":{}}"#)
            .unwrap()
            .is_none());
        assert!(ranked_from_description("[]").is_err());
        assert!(ranked_from_description("{}").is_err());
        assert!(Ranked::Binary.build(2, &[0, 2], None).is_err());
    }
}
