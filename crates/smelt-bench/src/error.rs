//! What can go wrong while planning or measuring a benchmark: the crate's one error
//! type for its library functions (the command-line figures keep a failed
//! measurement's text in their rows).

/// Why a benchmark's plan, measurement or estimate cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A tree that cannot be generated over the group.
    #[error(transparent)]
    Tree(#[from] smelt_tree::TreeError),
    /// A tuning file, rule or candidate list that cannot be used.
    #[error(transparent)]
    Tuning(#[from] smelt_tree::Error),
    /// An algorithm table (`SMELT_TUNE`'s syntax) that cannot be parsed.
    #[error(transparent)]
    Table(#[from] smelt_tree::tuning::TableError),
    /// The measured group failed (start-up, pinning, a member's failure, a timeout).
    #[error(transparent)]
    Group(#[from] smelt_runtime::GroupError),
    /// A request or a result that does not make sense (the message says which): an
    /// operation that is not measured, an inconsistent estimate, `auto` that cannot be
    /// resolved.
    #[error("{0}")]
    Invalid(String),
}

impl From<String> for BenchError {
    fn from(why: String) -> Self {
        BenchError::Invalid(why)
    }
}
