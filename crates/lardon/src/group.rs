//! Task groups: a [`GroupName`] a task may carry in its [`crate::Estimate`],
//! and the [`GroupLimits`] the Governor holds a group to (docs/DESIGN.md §4,
//! "Group limits"; §10 "Groups").

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

/// The longest group name, in bytes.
pub const MAX_GROUP_NAME: usize = 64;

/// Why a text is not a [`GroupName`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GroupNameError {
    /// The name is empty.
    #[error("group name is empty: use 1-64 characters of A-Z a-z 0-9 . _ -")]
    Empty,
    /// The name is longer than [`MAX_GROUP_NAME`].
    #[error("group name `{0}` is longer than 64 characters")]
    TooLong(String),
    /// The name has a character outside `[A-Za-z0-9._-]`.
    #[error("group name `{0}` is invalid: use 1-64 characters of A-Z a-z 0-9 . _ -")]
    BadChar(String),
}

/// A group's name: 1–64 bytes of `[A-Za-z0-9._-]`, checked when made (the
/// field is private, so every `GroupName` is valid). Cheap to clone: every
/// estimate and contract of a group carries one.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupName(Arc<str>);

impl GroupName {
    /// Checks `name` and wraps it.
    ///
    /// # Errors
    /// [`GroupNameError`] naming what is wrong.
    pub fn new(name: &str) -> Result<Self, GroupNameError> {
        if name.is_empty() {
            return Err(GroupNameError::Empty);
        }
        if name.len() > MAX_GROUP_NAME {
            return Err(GroupNameError::TooLong(name.to_owned()));
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
            return Err(GroupNameError::BadChar(name.to_owned()));
        }
        Ok(GroupName(Arc::from(name)))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for GroupName {
    type Err = GroupNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GroupName::new(s)
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupName({})", &*self.0)
    }
}

/// What a group's tasks may hold at once, together; `None` for no limit
/// on that resource. Enforced by admission on top of the host's budgets: a
/// task whose grant would take its group past a limit waits with reason
/// `group_limit`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupLimits {
    /// Reservations (running tasks) at once.
    pub max_running: Option<u32>,
    /// Host memory reserved at once, bytes.
    pub memory: Option<u64>,
    /// CPUs reserved at once, thousandths.
    pub cpu_millis: Option<u64>,
}

impl GroupLimits {
    /// Whether no resource is limited.
    pub fn is_unlimited(&self) -> bool {
        self.max_running.is_none() && self.memory.is_none() && self.cpu_millis.is_none()
    }
}

/// What a group's active reservations hold now, and its limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupUsage {
    /// The group.
    pub name: Option<GroupName>,
    /// Its limits (all `None` when it has none).
    pub limits: GroupLimits,
    /// Reservations held.
    pub running: u32,
    /// Host memory charged, bytes.
    pub memory: u64,
    /// CPUs held, thousandths.
    pub cpu_millis: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(GroupName::new("render-1.a_B").map(|g| g.to_string()).as_deref(), Ok("render-1.a_B"));
        assert_eq!(GroupName::new(""), Err(GroupNameError::Empty));
        assert!(matches!(GroupName::new("a b"), Err(GroupNameError::BadChar(_))));
        assert!(matches!(GroupName::new("é"), Err(GroupNameError::BadChar(_))));
        assert!(GroupName::new(&"x".repeat(64)).is_ok());
        assert!(matches!(GroupName::new(&"x".repeat(65)), Err(GroupNameError::TooLong(_))));
    }
}
