//! The action digest of a task: what makes two runs "the same" for the
//! cache. It covers the capability (name, version, target — never the
//! path of a tool), the argv, the environment variables on an allow-list
//! (the rest is ignored, so `HOME` or `PWD` differing between machines does
//! not split the cache), the declared output paths and the digest of the
//! input root: a REAPI Merkle tree of `Directory` messages over the input
//! files' digests, so two tasks with the same inputs share a key wherever
//! their files came from.

use std::collections::BTreeMap;

use prost::Message as _;

use super::reapi;
use lardon_cluster_core::Capability;

/// The platform property naming the capability in an `Action`.
pub const CAPABILITY_PROPERTY: &str = "lardon-capability";

pub use lardon_submit::blobs::digest_of;

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
    /// The input root's `Directory` messages, encoded (the root first;
    /// empty without inputs), to store in the CAS beside the Action.
    pub directories: Vec<Vec<u8>>,
}

/// One input file of a task: its path relative to the task's directory,
/// its content's digest and whether it is executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputEntry {
    /// Relative path (`/`-separated plain names).
    pub path: String,
    /// Its content.
    pub digest: reapi::Digest,
    /// The owner's execute bit.
    pub executable: bool,
}

#[derive(Debug, Default)]
struct Tree {
    files: BTreeMap<String, (reapi::Digest, bool)>,
    dirs: BTreeMap<String, Tree>,
}

impl Tree {
    fn insert(&mut self, parts: &[&str], digest: &reapi::Digest, executable: bool) {
        match parts {
            [] => {}
            [name] => {
                self.files.insert((*name).to_owned(), (digest.clone(), executable));
            }
            [dir, rest @ ..] => {
                self.dirs.entry((*dir).to_owned()).or_default().insert(rest, digest, executable)
            }
        }
    }

    /// Encodes this directory after its subdirectories (pushed to `out`);
    /// returns its own encoding. Names are sorted, as REAPI requires.
    fn encode(&self, out: &mut Vec<Vec<u8>>) -> Vec<u8> {
        let directories = self
            .dirs
            .iter()
            .map(|(name, sub)| {
                let bytes = sub.encode(out);
                let node = reapi::DirectoryNode { name: name.clone(), digest: Some(digest_of(&bytes)) };
                out.push(bytes);
                node
            })
            .collect();
        let files = self
            .files
            .iter()
            .map(|(name, (digest, executable))| reapi::FileNode {
                name: name.clone(),
                digest: Some(digest.clone()),
                is_executable: *executable,
                ..Default::default()
            })
            .collect();
        reapi::Directory { files, directories, ..Default::default() }.encode_to_vec()
    }
}

/// The input root of `inputs`: its digest and every `Directory` of the
/// tree, encoded (the root first).
#[must_use]
pub fn input_root(inputs: &[InputEntry]) -> (reapi::Digest, Vec<Vec<u8>>) {
    let mut tree = Tree::default();
    for f in inputs {
        let parts: Vec<&str> = f.path.split('/').collect();
        tree.insert(&parts, &f.digest, f.executable);
    }
    let mut subdirs = Vec::new();
    let root = tree.encode(&mut subdirs);
    let digest = digest_of(&root);
    let mut all = vec![root];
    all.extend(subdirs);
    (digest, all)
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
        Self::build(capability, argv, env, allow_env, input_root, Vec::new(), &[])
    }

    /// The key of a task with input files and declared outputs: the input
    /// root is the Merkle tree of `inputs`, and the sorted `outputs` are
    /// the Command's output paths (asking for another file is another
    /// action).
    #[must_use]
    pub fn with_files(
        capability: &Capability,
        argv: &[String],
        env: &[(String, String)],
        allow_env: &[&str],
        inputs: &[InputEntry],
        outputs: &[String],
    ) -> Self {
        let (root, directories) = if inputs.is_empty() {
            (None, Vec::new())
        } else {
            let (d, dirs) = input_root(inputs);
            (Some(d), dirs)
        };
        Self::build(capability, argv, env, allow_env, root, directories, outputs)
    }

    fn build(
        capability: &Capability,
        argv: &[String],
        env: &[(String, String)],
        allow_env: &[&str],
        input_root: Option<reapi::Digest>,
        directories: Vec<Vec<u8>>,
        outputs: &[String],
    ) -> Self {
        let mut output_paths = outputs.to_vec();
        output_paths.sort();
        output_paths.dedup();
        let mut kept: Vec<reapi::command::EnvironmentVariable> = env
            .iter()
            .filter(|(k, _)| allow_env.contains(&k.as_str()))
            .map(|(k, v)| reapi::command::EnvironmentVariable { name: k.clone(), value: v.clone() })
            .collect();
        kept.sort_by(|a, b| a.name.cmp(&b.name));
        kept.dedup_by(|a, b| a.name == b.name);
        let command = reapi::Command {
            arguments: argv.to_vec(),
            environment_variables: kept,
            output_paths,
            ..Default::default()
        };
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
        ActionKey { command, action, digest, directories }
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

    #[test]
    fn input_contents_paths_and_outputs_are_part_of_the_key() {
        let cap = Capability::parse("gcc@12:x86_64-linux-gnu").unwrap();
        let argv: Vec<String> = ["gcc", "-c", "x.i"].map(String::from).to_vec();
        let entry = |path: &str, text: &[u8]| InputEntry {
            path: path.into(),
            digest: digest_of(text),
            executable: false,
        };
        let k = |inputs: &[InputEntry], outputs: &[&str]| {
            let outputs: Vec<String> = outputs.iter().map(|s| (*s).to_owned()).collect();
            ActionKey::with_files(&cap, &argv, &[], &[], inputs, &outputs)
        };
        let base = k(&[entry("x.i", b"int x;"), entry("inc/a.h", b"")], &["x.o"]);
        assert_eq!(
            base.digest,
            k(&[entry("inc/a.h", b""), entry("x.i", b"int x;")], &["x.o"]).digest,
            "order"
        );
        assert_ne!(
            base.digest,
            k(&[entry("x.i", b"int y;"), entry("inc/a.h", b"")], &["x.o"]).digest,
            "content"
        );
        assert_ne!(
            base.digest,
            k(&[entry("y.i", b"int x;"), entry("inc/a.h", b"")], &["x.o"]).digest,
            "path"
        );
        assert_ne!(
            base.digest,
            k(&[entry("x.i", b"int x;"), entry("inc/a.h", b"")], &["y.o"]).digest,
            "outputs"
        );
        assert_ne!(base.digest, ActionKey::new(&cap, &argv, &[], &[], None).digest, "no inputs");
        // The root and the `inc` directory, each in the CAS-ready form.
        assert_eq!(base.directories.len(), 2);
        assert_eq!(base.action.input_root_digest, Some(digest_of(&base.directories[0])));
        let root = reapi::Directory::decode(base.directories[0].as_slice()).unwrap();
        assert_eq!((root.files[0].name.as_str(), root.directories[0].name.as_str()), ("x.i", "inc"));
        assert_eq!(root.directories[0].digest, Some(digest_of(&base.directories[1])));
        // Without inputs the key is the one `new` gives.
        assert_eq!(k(&[], &[]).digest, ActionKey::new(&cap, &argv, &[], &[], None).digest);
    }
}
