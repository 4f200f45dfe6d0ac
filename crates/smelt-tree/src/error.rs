//! The crate's one error type.

/// Why a tuning file, an override, a benchmark file, a plot, a shape's description or
/// an operation's tree cannot be used; the message names the file, the field or the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A tuning file, a tuning rule or an override (`tuning`).
    #[error("{0}")]
    Tuning(String),
    /// A benchmark file read as input (`evaluate::read_ab_bench`).
    #[error("{0}")]
    Input(String),
    /// A chart that could not be drawn or written (`plot`).
    #[error("{0}")]
    Plot(String),
    /// An algorithm that does not run an operation (`Algorithm::check_op`).
    #[error("{0}")]
    Op(String),
    /// A tree shape's description that cannot be read (`shape::from_description`).
    #[error("{0}")]
    Shape(String),
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}
