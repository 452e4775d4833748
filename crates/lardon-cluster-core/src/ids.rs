//! Identities at the cluster boundary: tasks, submitters and agents.

use std::fmt;

use thiserror::Error;

/// An identity was refused; names which.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{what}: `{value}` must be 1-128 characters of A-Z a-z 0-9 . _ : -")]
pub struct IdError {
    /// `task id`, `submitter id` or `agent id`.
    pub what: &'static str,
    /// What was given (cut to 64 characters).
    pub value: String,
}

fn check(what: &'static str, value: &str) -> Result<String, IdError> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c));
    if ok { Ok(value.to_owned()) } else { Err(IdError { what, value: value.chars().take(64).collect() }) }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates `value`.
            ///
            /// # Errors
            /// [`IdError`] for an empty, too long or odd identity.
            pub fn new(value: &str) -> Result<Self, IdError> {
                check($what, value).map($name)
            }

            /// The text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A task's id, unique across submitters (a submitting daemon prefixes
    /// its host); a resubmission with the same id is the same task.
    TaskId,
    "task id"
);
id_type!(
    /// A submitter: one offloading daemon. Fair share is between these.
    SubmitterId,
    "submitter id"
);
id_type!(
    /// An agent: one `lardon agent` process in an engine's allocation.
    AgentId,
    "agent id"
);
