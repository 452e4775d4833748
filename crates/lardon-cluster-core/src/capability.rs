//! Capabilities ("toolchains"): what an agent can run, matched on a
//! canonical identity — name, version and target — never a path, so two
//! machines with the same compiler in different places share one route.

use std::fmt;

use thiserror::Error;

/// A capability an agent declares and a task asks for, e.g.
/// `gcc@12.2.0:x86_64-linux-gnu` or `python@3.11`.
///
/// Each part is 1–64 characters of `[A-Za-z0-9._+-]`; the name starts
/// with a letter and is lower-cased. Two capabilities route together
/// exactly when their [`Capability::key`]s are equal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capability {
    name: String,
    version: String,
    target: String,
}

/// Why a capability was refused; names the part.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CapabilityError {
    /// A part is empty, too long or has a character outside the set.
    #[error("capability {part}: `{value}` must be 1-64 characters of A-Z a-z 0-9 . _ + - (no paths)")]
    BadPart {
        /// `name`, `version` or `target`.
        part: &'static str,
        /// What was given.
        value: String,
    },
    /// The name does not start with a letter.
    #[error("capability name: `{0}` must start with a letter")]
    NameStart(String),
}

fn part(part: &'static str, value: &str) -> Result<String, CapabilityError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c));
    if ok { Ok(value.to_owned()) } else { Err(CapabilityError::BadPart { part, value: value.to_owned() }) }
}

impl Capability {
    /// A capability from its parts; an empty version or target means "any"
    /// and is spelled `*` in the key.
    ///
    /// # Errors
    /// [`CapabilityError`] naming the bad part.
    pub fn new(name: &str, version: &str, target: &str) -> Result<Self, CapabilityError> {
        let name = part("name", &name.to_ascii_lowercase())?;
        if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(CapabilityError::NameStart(name));
        }
        // `*` (as `key` writes "any") reads back as any: keys round-trip.
        let any =
            |p: &'static str, v: &str| if v.is_empty() || v == "*" { Ok("*".to_owned()) } else { part(p, v) };
        Ok(Capability { name, version: any("version", version)?, target: any("target", target)? })
    }

    /// Parses `NAME[@VERSION][:TARGET]`.
    ///
    /// # Errors
    /// [`CapabilityError`] naming the bad part (a path such as
    /// `/usr/bin/gcc` is refused: `/` is not allowed).
    pub fn parse(text: &str) -> Result<Self, CapabilityError> {
        let (rest, target) = text.split_once(':').unwrap_or((text, ""));
        let (name, version) = rest.split_once('@').unwrap_or((rest, ""));
        Self::new(name, version, target)
    }

    /// The canonical route key: `name@version:target`.
    pub fn key(&self) -> String {
        format!("{}@{}:{}", self.name, self.version, self.target)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version; `None` when any will do.
    pub fn version(&self) -> Option<&str> {
        (self.version != "*").then_some(self.version.as_str())
    }

    /// The target; `None` when any will do.
    pub fn target(&self) -> Option<&str> {
        (self.target != "*").then_some(self.target.as_str())
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_canonical() {
        let a = Capability::parse("GCC@12.2.0:x86_64-linux-gnu").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.key(), "gcc@12.2.0:x86_64-linux-gnu");
        assert_eq!(Capability::parse("python@3.11").map(|c| c.key()), Ok("python@3.11:*".to_owned()));
        assert_eq!(Capability::parse("make").map(|c| c.key()), Ok("make@*:*".to_owned()));
        assert_eq!(
            Capability::parse("make@*:*").map(|c| c.key()),
            Ok("make@*:*".to_owned()),
            "a key round-trips"
        );
    }

    #[test]
    fn paths_and_junk_are_refused_naming_the_part() {
        let err = Capability::parse("/usr/bin/gcc").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("capability name") && err.contains("no paths"), "{err}");
        let err = Capability::parse("gcc@12 2").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("capability version"), "{err}");
        assert!(matches!(Capability::parse("9cc"), Err(CapabilityError::NameStart(_))));
        assert!(Capability::parse("").is_err());
    }
}
