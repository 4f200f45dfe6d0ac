//! The tree type shared by every generator, the simulator and the runtime.

use serde::{Deserialize, Serialize};
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// OS CPU id of each member; a member's index is its position here.
    pub members: Vec<u32>,
    /// Member index of the root.
    pub root: usize,
    /// `children[m]`: member indices of m's children, in the order m sends to them.
    pub children: Vec<Vec<usize>>,
}

/// JSON form: `{"root": r, "children": {"r": [c1, c2, ...], ...}}` with OS CPU ids.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TreeJson {
    /// OS CPU id of the root.
    pub root: u32,
    /// OS CPU id (as a string key) → its children's OS CPU ids in send order.
    pub children: BTreeMap<String, Vec<u32>>,
}

impl Tree {
    /// Builds and validates a tree.
    pub fn new(
        members: Vec<u32>,
        root: usize,
        children: Vec<Vec<usize>>,
    ) -> Result<Tree, TreeError> {
        let t = Tree {
            members,
            root,
            children,
        };
        t.validate()?;
        Ok(t)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True if the tree has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
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
        if self.root >= n {
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
        let mut parent = vec![usize::MAX; n];
        for (p, cs) in self.children.iter().enumerate() {
            for &c in cs {
                if c >= n {
                    return Err(TreeError::Invalid(format!("child index {c} out of range")));
                }
                if c == self.root {
                    return Err(TreeError::Invalid(format!(
                        "the root (CPU {}) is a child of CPU {}",
                        self.members[c], self.members[p]
                    )));
                }
                if parent[c] != usize::MAX {
                    return Err(TreeError::Invalid(format!(
                        "CPU {} has two parents",
                        self.members[c]
                    )));
                }
                parent[c] = p;
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

    /// Parent member index of every member (`None` for the root).
    pub fn parents(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.len()];
        for (i, cs) in self.children.iter().enumerate() {
            for &c in cs {
                p[c] = Some(i);
            }
        }
        p
    }

    /// Members in pre-order (root first, children in send order). Stops at cycles.
    pub fn preorder(&self) -> Vec<usize> {
        let mut seen = vec![false; self.len()];
        let mut out = Vec::with_capacity(self.len());
        let mut stack = vec![self.root];
        while let Some(m) = stack.pop() {
            if m >= self.len() || seen[m] {
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

    /// Members without children.
    pub fn leaves(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&m| self.children[m].is_empty())
            .collect()
    }

    /// The JSON form with OS CPU ids.
    pub fn to_json(&self) -> TreeJson {
        TreeJson {
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

    /// Builds a tree from its JSON form. Members are the root and every CPU named.
    pub fn from_json(j: &TreeJson) -> Result<Tree, TreeError> {
        let mut members = vec![j.root];
        for (p, cs) in &j.children {
            let p: u32 = p
                .parse()
                .map_err(|_| TreeError::Invalid(format!("'{p}' is not a CPU id")))?;
            for &c in std::iter::once(&p).chain(cs) {
                if !members.contains(&c) {
                    members.push(c);
                }
            }
        }
        let idx = |c: u32| members.iter().position(|&m| m == c).unwrap();
        let mut children = vec![Vec::new(); members.len()];
        for (p, cs) in &j.children {
            let pi = idx(p.parse().unwrap());
            children[pi] = cs.iter().map(|&c| idx(c)).collect();
        }
        Tree::new(members, 0, children)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_shape() {
        assert!(Tree::new(vec![4, 5, 6], 0, vec![vec![1, 2], vec![], vec![]]).is_ok());
        assert!(Tree::new(vec![], 0, vec![]).is_err());
        assert!(Tree::new(vec![4, 5], 0, vec![vec![], vec![]]).is_err());
        assert!(Tree::new(vec![4, 5], 0, vec![vec![1], vec![0]]).is_err());
        assert!(Tree::new(vec![4, 5, 6], 0, vec![vec![1, 2], vec![2], vec![]]).is_err());
    }

    #[test]
    fn json_round_trip() {
        let t = Tree::new(
            vec![4, 5, 6, 7],
            1,
            vec![vec![3], vec![0, 2], vec![], vec![]],
        )
        .unwrap();
        let j = t.to_json();
        assert_eq!(j.root, 5);
        let back = Tree::from_json(&j).unwrap();
        assert_eq!(back.to_json().children, j.children);
        assert_eq!(back.members[back.root], 5);
    }
}
