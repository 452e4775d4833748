//! The action digest of a task: what makes two runs "the same" for the
//! cache. It covers the capability (name, version, target — never the
//! path of a tool), the argv, the environment variables on an allow-list
//! (the rest is ignored, so `HOME` or `PWD` differing between machines does
//! not split the cache) and the digest of the input root.

use prost::Message as _;
use sha2::{Digest as _, Sha256};

use super::reapi;
use crate::capability::Capability;

/// The platform property naming the capability in an `Action`.
pub const CAPABILITY_PROPERTY: &str = "lardon-capability";

/// The REAPI digest (lower-case hex sha256 and size) of `bytes`.
#[must_use]
pub fn digest_of(bytes: &[u8]) -> reapi::Digest {
    let hash = Sha256::digest(bytes);
    reapi::Digest {
        hash: hash.iter().map(|b| format!("{b:02x}")).collect(),
        size_bytes: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
    }
}

/// A task's cache identity: the `Command` and `Action` as REAPI encodes
/// them, and the action's digest (the key).
#[derive(Debug, Clone, PartialEq)]
pub struct ActionKey {
    /// The command (argv and kept environment).
    pub command: reapi::Command,
    /// The action (command digest, input root, capability).
    pub action: reapi::Action,
    /// The action's digest: the cache key.
    pub digest: reapi::Digest,
}

impl ActionKey {
    /// The key of running `argv` with `env` on `capability` over the
    /// inputs whose root is `input_root` (none: no inputs). Only variables
    /// named in `allow_env` count, sorted by name as REAPI requires.
    #[must_use]
    pub fn new(
        capability: &Capability,
        argv: &[String],
        env: &[(String, String)],
        allow_env: &[&str],
        input_root: Option<reapi::Digest>,
    ) -> Self {
        let mut kept: Vec<reapi::command::EnvironmentVariable> = env
            .iter()
            .filter(|(k, _)| allow_env.contains(&k.as_str()))
            .map(|(k, v)| reapi::command::EnvironmentVariable { name: k.clone(), value: v.clone() })
            .collect();
        kept.sort_by(|a, b| a.name.cmp(&b.name));
        kept.dedup_by(|a, b| a.name == b.name);
        let command =
            reapi::Command { arguments: argv.to_vec(), environment_variables: kept, ..Default::default() };
        let platform = reapi::Platform {
            properties: vec![reapi::platform::Property {
                name: CAPABILITY_PROPERTY.into(),
                value: capability.key(),
            }],
        };
        let action = reapi::Action {
            command_digest: Some(digest_of(&command.encode_to_vec())),
            input_root_digest: input_root
                .or_else(|| Some(digest_of(&reapi::Directory::default().encode_to_vec()))),
            platform: Some(platform),
            ..Default::default()
        };
        let digest = digest_of(&action.encode_to_vec());
        ActionKey { command, action, digest }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(cap: &str, argv: &[&str], env: &[(&str, &str)]) -> reapi::Digest {
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        let env: Vec<(String, String)> =
            env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        ActionKey::new(&Capability::parse(cap).unwrap(), &argv, &env, &["LANG", "CFLAGS"], None).digest
    }

    #[test]
    fn the_digest_is_sha256_of_the_bytes() {
        let d = digest_of(b"abc");
        assert_eq!(d.hash, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(d.size_bytes, 3);
    }

    #[test]
    fn the_key_covers_capability_argv_and_allowed_env_only() {
        let base = key("gcc@13:x86_64", &["gcc", "-c", "x.c"], &[("LANG", "C"), ("HOME", "/root")]);
        assert_eq!(
            base,
            key("gcc@13:x86_64", &["gcc", "-c", "x.c"], &[("HOME", "/home/u"), ("LANG", "C")]),
            "HOME ignored, order ignored"
        );
        assert_ne!(base, key("gcc@14:x86_64", &["gcc", "-c", "x.c"], &[("LANG", "C")]), "another version");
        assert_ne!(base, key("gcc@13:x86_64", &["gcc", "-c", "y.c"], &[("LANG", "C")]), "another argv");
        assert_ne!(
            base,
            key("gcc@13:x86_64", &["gcc", "-c", "x.c"], &[("LANG", "fr")]),
            "an allowed variable"
        );
        assert_eq!(base.hash.len(), 64);
    }
}
