//! The tree type shared by every generator, the simulator, the runtime and the
//! services that broadcast over a tree (the store).

use serde::{Deserialize, Serialize};
pub use smelt_ids::{CpuId, Pos};
use std::collections::BTreeMap;

/// Errors about the shape of a tree.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TreeError {
    /// No member at all.
    #[error("the group is empty")]
    Empty,
    /// A malformed tree or group (the message says what is wrong).
    #[error("invalid tree: {0}")]
    Invalid(String),
}

/// A rooted spanning tree over a group of CPUs, with each member's children in send
/// order (the Smelt paper's `T`, `v_root` and edge priorities `w`).
///
/// Members are named by [`Pos`]ition in [`members`](Tree::members); `Vec`s indexed by
/// position (`children`, [`parents`](Tree::parents)) can be indexed with a `Pos`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// OS CPU id of each member; a member's position is its index here.
    pub members: Vec<CpuId>,
    /// Position of the root.
    pub root: Pos,
    /// `children[m]`: positions of m's children, in the order m sends to them.
    pub children: Vec<Vec<Pos>>,
}

/// JSON form (a tree file): `{"members": [m0, m1, ...], "root": r, "children":
/// {"r": [c1, c2, ...], ...}}` with OS CPU ids. `members` gives every member's rank
/// (its index), so a file round trip keeps ranks, root and child order; files
/// without it (older versions) are read with members in the order they appear
/// (root, then parents and children in key order). Other fields (`algo`,
/// `predicted_ns`, ... as `smelt tree --format json` writes them) are ignored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TreeJson {
    /// OS CPU id of every member, in rank order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<CpuId>>,
    /// OS CPU id of the root.
    pub root: CpuId,
    /// OS CPU id (as a string key) → its children's OS CPU ids in send order.
    pub children: BTreeMap<String, Vec<CpuId>>,
}

impl Tree {
    /// Builds and validates a tree.
    pub fn new(members: Vec<CpuId>, root: Pos, children: Vec<Vec<Pos>>) -> Result<Tree, TreeError> {
        let t = Tree {
            members,
            root,
            children,
        };
        t.validate()?;
        Ok(t)
    }

    /// [`Tree::new`] from bare numbers: OS CPU ids, the root's position and child
    /// positions (for literals in tests and examples, and for algorithms that work on
    /// plain indices).
    pub fn from_raw(
        members: Vec<u32>,
        root: usize,
        children: Vec<Vec<usize>>,
    ) -> Result<Tree, TreeError> {
        Tree::new(
            CpuId::list(members),
            Pos(root),
            children.into_iter().map(Pos::list).collect(),
        )
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True if the tree has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every position, in order (`Pos(0)..Pos(len)`).
    pub fn positions(&self) -> impl Iterator<Item = Pos> + '_ {
        (0..self.len()).map(Pos)
    }

    /// The child lists as bare indices (for algorithms on local indices, such as
    /// the tree crate's simulator and costs, where index `i` is `Pos(i)`).
    pub fn child_indices(&self) -> Vec<Vec<usize>> {
        self.children
            .iter()
            .map(|cs| cs.iter().map(|c| c.index()).collect())
            .collect()
    }

    /// OS CPU id of the member at position `p`.
    pub fn cpu(&self, p: Pos) -> CpuId {
        self.members[p]
    }

    /// Position of the member on CPU `cpu`, if it is one.
    pub fn position_of(&self, cpu: CpuId) -> Option<Pos> {
        self.members.iter().position(|&c| c == cpu).map(Pos)
    }

    /// Checks that every member except the root has exactly one parent, that the
    /// root has none, and that every member is reachable from the root.
    pub fn validate(&self) -> Result<(), TreeError> {
        let n = self.members.len();
        if n == 0 {
            return Err(TreeError::Empty);
        }
        if self.children.len() != n {
            return Err(TreeError::Invalid(format!(
                "{} child lists for {n} members",
                self.children.len()
            )));
        }
        if self.root.index() >= n {
            return Err(TreeError::Invalid(format!(
                "root index {} out of range",
                self.root
            )));
        }
        let mut uniq = self.members.clone();
        uniq.sort_unstable();
        uniq.dedup();
        if uniq.len() != n {
            return Err(TreeError::Invalid("a CPU is listed twice".into()));
        }
        let mut parent = vec![None; n];
        for (p, cs) in self.children.iter().enumerate() {
            for &c in cs {
                if c.index() >= n {
                    return Err(TreeError::Invalid(format!("child index {c} out of range")));
                }
                if c == self.root {
                    return Err(TreeError::Invalid(format!(
                        "the root (CPU {}) is a child of CPU {}",
                        self.members[c], self.members[p]
                    )));
                }
                if parent[c].is_some() {
                    return Err(TreeError::Invalid(format!(
                        "CPU {} has two parents",
                        self.members[c]
                    )));
                }
                parent[c] = Some(p);
            }
        }
        let reached = self.preorder().len();
        if reached != n {
            return Err(TreeError::Invalid(format!(
                "only {reached} of {n} members are reachable from the root"
            )));
        }
        Ok(())
    }

    /// Parent's position of every member, by position (`None` for the root).
    pub fn parents(&self) -> Vec<Option<Pos>> {
        let mut p = vec![None; self.len()];
        for (i, cs) in self.children.iter().enumerate() {
            for &c in cs {
                p[c] = Some(Pos(i));
            }
        }
        p
    }

    /// Members' positions in pre-order (root first, children in send order). Stops at
    /// cycles.
    pub fn preorder(&self) -> Vec<Pos> {
        let mut seen = vec![false; self.len()];
        let mut out = Vec::with_capacity(self.len());
        let mut stack = vec![self.root];
        while let Some(m) = stack.pop() {
            if m.index() >= self.len() || seen[m] {
                continue;
            }
            seen[m] = true;
            out.push(m);
            for &c in self.children[m].iter().rev() {
                stack.push(c);
            }
        }
        out
    }

    /// Positions of the members without children.
    pub fn leaves(&self) -> Vec<Pos> {
        self.positions()
            .filter(|&m| self.children[m].is_empty())
            .collect()
    }

    /// The JSON form with OS CPU ids.
    pub fn to_json(&self) -> TreeJson {
        TreeJson {
            members: Some(self.members.clone()),
            root: self.members[self.root],
            children: self
                .children
                .iter()
                .enumerate()
                .filter(|(_, cs)| !cs.is_empty())
                .map(|(p, cs)| {
                    (
                        self.members[p].to_string(),
                        cs.iter().map(|&c| self.members[c]).collect(),
                    )
                })
                .collect(),
        }
    }

    /// Builds a tree from its JSON form, checking it: every CPU named once as a
    /// member, every parent and child a member, a spanning tree from the root.
    pub fn from_json(j: &TreeJson) -> Result<Tree, TreeError> {
        let mut parsed: Vec<(CpuId, &Vec<CpuId>)> = Vec::with_capacity(j.children.len());
        for (p, cs) in &j.children {
            let cpu: CpuId = p
                .trim()
                .parse()
                .map_err(|_| TreeError::Invalid(format!("'{p}' is not a CPU id")))?;
            parsed.push((cpu, cs));
        }
        let members = match &j.members {
            Some(m) => {
                let mut seen = std::collections::HashSet::new();
                if let Some(d) = m.iter().find(|c| !seen.insert(**c)) {
                    return Err(TreeError::Invalid(format!(
                        "CPU {d} is listed twice in \"members\""
                    )));
                }
                m.clone()
            }
            None => {
                let mut members = vec![j.root];
                for (p, cs) in &parsed {
                    for &c in std::iter::once(p).chain(cs.iter()) {
                        if !members.contains(&c) {
                            members.push(c);
                        }
                    }
                }
                members
            }
        };
        let idx = |c: CpuId| {
            members
                .iter()
                .position(|&m| m == c)
                .map(Pos)
                .ok_or_else(|| {
                    TreeError::Invalid(format!("CPU {c} is in the tree but not in \"members\""))
                })
        };
        let mut children = vec![Vec::new(); members.len()];
        for (p, cs) in parsed {
            children[idx(p)?.index()] = cs.iter().map(|&c| idx(c)).collect::<Result<_, _>>()?;
        }
        Tree::new(members.clone(), idx(j.root)?, children)
    }

    /// Parses a tree file's text ([`TreeJson`]).
    pub fn from_json_str(text: &str) -> Result<Tree, TreeError> {
        let j: TreeJson = serde_json::from_str(text)
            .map_err(|e| TreeError::Invalid(format!("not a tree file: {e}")))?;
        Tree::from_json(&j)
    }

    /// Reads a tree file (as `smelt tree --format json` writes it).
    pub fn load(path: &std::path::Path) -> Result<Tree, TreeError> {
        let text = crate::input::read_input_text(path)
            .map_err(|e| TreeError::Invalid(format!("cannot read {e}")))?;
        Tree::from_json_str(&text)
            .map_err(|e| TreeError::Invalid(format!("{}: {e}", path.display())))
    }

    /// The tree file's text: pretty JSON with a trailing newline.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(&self.to_json()).expect("a tree always serializes") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(members: &[u32], root: usize, children: &[&[usize]]) -> Result<Tree, TreeError> {
        Tree::new(
            CpuId::list(members.iter().copied()),
            Pos(root),
            children
                .iter()
                .map(|cs| Pos::list(cs.iter().copied()))
                .collect(),
        )
    }

    #[test]
    fn validates_shape() {
        assert!(tree(&[4, 5, 6], 0, &[&[1, 2], &[], &[]]).is_ok());
        assert!(tree(&[], 0, &[]).is_err());
        assert!(tree(&[4, 5], 0, &[&[], &[]]).is_err());
        assert!(tree(&[4, 5], 0, &[&[1], &[0]]).is_err());
        assert!(tree(&[4, 5, 6], 0, &[&[1, 2], &[2], &[]]).is_err());
    }

    #[test]
    fn json_round_trip() {
        let t = tree(&[4, 5, 6, 7], 1, &[&[3], &[0, 2], &[], &[]]).unwrap();
        let j = t.to_json();
        assert_eq!(j.root, CpuId(5));
        let back = Tree::from_json(&j).unwrap();
        assert_eq!(back.to_json().children, j.children);
        assert_eq!(back.members[back.root], CpuId(5));
        assert_eq!(back.cpu(back.root), CpuId(5));
        assert_eq!(
            back.position_of(CpuId(7)),
            back.children[back.position_of(CpuId(4)).unwrap()]
                .first()
                .copied()
        );
    }

    /// The typed ids serialize as bare numbers; files without `members` (older
    /// versions) still load.
    #[test]
    fn json_text_unchanged() {
        let text = r#"{"root":5,"children":{"4":[7],"5":[4,6]}}"#;
        let j: TreeJson = serde_json::from_str(text).unwrap();
        let t = Tree::from_json(&j).unwrap();
        assert_eq!(
            serde_json::to_string(&t.to_json()).unwrap(),
            r#"{"members":[5,4,7,6],"root":5,"children":{"4":[7],"5":[4,6]}}"#
        );
        let big = r#"{"root":4000000000,"children":{"4000000000":[0]}}"#;
        let j: TreeJson = serde_json::from_str(big).unwrap();
        assert_eq!(j.root, CpuId(4_000_000_000));
        assert_eq!(serde_json::to_string(&j).unwrap(), big);
    }

    /// A file round trip keeps every rank (member order), the root and child order.
    #[test]
    fn file_round_trip_keeps_ranks() {
        let t = tree(&[9, 2, 7, 4, 3], 2, &[&[], &[3], &[4, 1, 0], &[], &[]]).unwrap();
        let back = Tree::from_json_str(&t.to_json_string()).unwrap();
        assert_eq!(back, t);
        let dir = std::env::temp_dir().join(format!("smelt-tree-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.json");
        std::fs::write(&f, t.to_json_string()).unwrap();
        assert_eq!(Tree::load(&f).unwrap(), t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_tree_files_are_refused() {
        for (text, want) in [
            ("", "not a tree file"),
            ("{}", "not a tree file"),
            (r#"{"root":1,"children":{"x":[2]}}"#, "not a CPU id"),
            (r#"{"members":[1,2,1],"root":1,"children":{}}"#, "twice"),
            (
                r#"{"members":[1,2],"root":1,"children":{"1":[3]}}"#,
                "not in",
            ),
            (r#"{"members":[1,2],"root":3,"children":{}}"#, "not in"),
            (
                r#"{"members":[1,2],"root":1,"children":{}}"#,
                "invalid tree",
            ),
            (
                r#"{"members":[1,2],"root":1,"children":{"1":[2],"2":[1]}}"#,
                "invalid tree",
            ),
        ] {
            let e = Tree::from_json_str(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        let e = Tree::load(std::path::Path::new("/nonexistent/t.json")).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
    }
}
