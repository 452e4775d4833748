//! What an agent lets a task do before anything runs (docs/DESIGN.md §14,
//! docs/SECURITY.md): the programs each capability may run, and the
//! variables a task may set.
//!
//! * **Programs.** `--capability gcc@12=/usr/bin/gcc,/usr/bin/cc` names the
//!   programs a task of that capability may run. A task's `argv[0]` is
//!   resolved here (a bare name through the agent's own `PATH`, never the
//!   task's; a path must be absolute), both sides compared canonically (so
//!   a symbolic link to a listed program is that program), and the task
//!   runs the resolved path: a task cannot swap what runs by its
//!   environment. A capability without a list runs any program, and the
//!   agent says so at start.
//! * **Environment.** A task may set only plain names (letters, digits,
//!   `_`) that are not on the refused list: the dynamic loader's (`LD_*`,
//!   glibc's secure-mode list), the shell's start-up hooks, the
//!   interpreters' injection variables, and `PATH` itself. The agent's
//!   `--allow-env NAME` lets one through that the operator trusts.
//!
//! A refusal ends the task failed with a reason naming the program or the
//! variable, before it is admitted.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use lardon_proto::cluster as pb;

use crate::Capability;

/// Names a task may never set, unless the agent allows them by name:
/// they change what a program loads or runs rather than what it computes.
const REFUSED: &[&str] = &[
    // The search path: what `sh`, `env` or `make` run next.
    "PATH",
    // glibc's secure-mode list (unsecvars.h) beyond LD_*.
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
    // Shells' start-up hooks.
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "IFS",
    "PROMPT_COMMAND",
    // Interpreters that load code from the environment.
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PERL5LIB",
    "PERL5OPT",
    "PERLLIB",
    "RUBYLIB",
    "RUBYOPT",
    "NODE_OPTIONS",
    "NODE_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "LUA_INIT",
    "LUA_PATH",
    "LUA_CPATH",
    // Compilers' plug-in and helper lookups.
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
];

/// Prefixes a task may never set (the dynamic loader's `LD_*`, and
/// glibc's `MALLOC_*` tunables' older spellings).
const REFUSED_PREFIXES: &[&str] = &["LD_", "MALLOC_", "BASH_FUNC_"];

/// Why a variable name is refused, if it is.
fn refused_name(name: &str) -> Option<&'static str> {
    let plain = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        return Some("is not a plain name (letters, digits and _)");
    }
    if REFUSED.contains(&name) || REFUSED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Some("changes what runs rather than what it computes");
    }
    None
}

/// The programs one capability may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Programs {
    /// Any program (a capability declared without `=PROGRAM,…`).
    Any,
    /// Only these, canonical absolute paths.
    Only(BTreeSet<PathBuf>),
}

/// A capability as an agent declares it: the label it is routed by and
/// the programs it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The label (what the broker routes by).
    pub capability: Capability,
    /// What its tasks may run.
    pub programs: Programs,
}

/// A `--capability` value that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--capability: {0}")]
pub struct DeclareError(String);

impl Declared {
    /// Parses `NAME[@VERSION][:TARGET][=PROGRAM[,PROGRAM…]]`: each program
    /// an absolute path to an existing file, kept canonical.
    ///
    /// # Errors
    /// [`DeclareError`] naming the part that is wrong.
    pub fn parse(text: &str) -> Result<Declared, DeclareError> {
        let (label, programs) = match text.split_once('=') {
            Some((label, list)) => (label, Some(list)),
            None => (text, None),
        };
        let capability = Capability::parse(label).map_err(|e| DeclareError(e.to_string()))?;
        let Some(list) = programs else { return Ok(Declared { capability, programs: Programs::Any }) };
        let mut only = BTreeSet::new();
        for program in list.split(',') {
            let path = Path::new(program);
            if !path.is_absolute() {
                return Err(DeclareError(format!(
                    "`{program}` in {label}'s programs is not an absolute path (e.g. /usr/bin/gcc)"
                )));
            }
            let canonical = std::fs::canonicalize(path)
                .map_err(|e| DeclareError(format!("`{program}` in {label}'s programs: {e}")))?;
            if !canonical.is_file() {
                return Err(DeclareError(format!("`{program}` in {label}'s programs is not a file")));
            }
            only.insert(canonical);
        }
        Ok(Declared { capability, programs: Programs::Only(only) })
    }
}

/// The agent's rules for what its tasks may run and set.
#[derive(Debug, Clone, Default)]
pub struct Permit {
    /// By capability key; `None`: no program rules (any program), as an
    /// agent built without [`Permit::new`] has.
    programs: Option<HashMap<String, Programs>>,
    allow_env: BTreeSet<String>,
    /// The agent's own `PATH`, where a bare program name is looked up.
    search: Vec<PathBuf>,
}

impl Permit {
    /// The rules for `declared` capabilities, with `allow_env` let through
    /// the refused names, bare names looked up in `path` (the agent's own
    /// `PATH`).
    /// Two declarations of one capability keep the stricter (a list over
    /// any program).
    #[must_use]
    pub fn new(declared: &[Declared], allow_env: &[String], path: Option<&std::ffi::OsStr>) -> Self {
        Permit {
            programs: Some(declared.iter().fold(HashMap::new(), |mut map, d| {
                let entry = map.entry(d.capability.key()).or_insert(Programs::Any);
                match (&mut *entry, &d.programs) {
                    (_, Programs::Any) => {}
                    (Programs::Any, only) => *entry = only.clone(),
                    (Programs::Only(have), Programs::Only(more)) => have.extend(more.iter().cloned()),
                }
                map
            })),
            allow_env: allow_env.iter().cloned().collect(),
            search: path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default(),
        }
    }

    /// Checks `spec`, a task of capability `key`, and makes its `argv[0]`
    /// the program that will run (resolved, when its capability lists
    /// programs).
    ///
    /// # Errors
    /// One line naming the variable or the program refused.
    pub fn check(&self, key: &str, spec: &mut pb::TaskSpec) -> Result<(), String> {
        for v in &spec.env {
            if self.allow_env.contains(&v.name) {
                continue;
            }
            if let Some(why) = refused_name(&v.name) {
                return Err(format!(
                    "env: `{}` {why}: refused by this agent (its --allow-env {} lets it through)",
                    v.name, v.name
                ));
            }
        }
        let allowed = match self.programs.as_ref().map(|p| p.get(key)) {
            None | Some(Some(Programs::Any)) => return Ok(()),
            Some(Some(Programs::Only(allowed))) => allowed,
            // Fails closed: a capability without rules runs nothing.
            Some(None) => return Err(format!("capability {key} is not one this agent declared")),
        };
        let Some(program) = spec.argv.first() else { return Err("argv: empty".to_owned()) };
        let found = self.resolve(program)?;
        let canonical = std::fs::canonicalize(&found)
            .map_err(|e| format!("argv[0]: `{program}` ({}): {e}", found.display()))?;
        if !allowed.contains(&canonical) {
            let list: Vec<String> = allowed.iter().map(|p| p.display().to_string()).collect();
            return Err(format!(
                "argv[0]: `{program}` ({}) is not a program capability {key} may run here (it may run {})",
                canonical.display(),
                list.join(", ")
            ));
        }
        spec.argv[0] = found.display().to_string();
        Ok(())
    }

    /// `program` as a path: itself when absolute, else the first match in
    /// the agent's own `PATH`. A relative path with a `/` is refused (it
    /// would depend on where the task runs).
    fn resolve(&self, program: &str) -> Result<PathBuf, String> {
        let path = Path::new(program);
        if path.is_absolute() {
            return Ok(path.to_owned());
        }
        if program.contains('/') {
            return Err(format!(
                "argv[0]: `{program}` is a relative path; name the program or give its absolute path"
            ));
        }
        use std::os::unix::fs::PermissionsExt as _;
        self.search
            .iter()
            .map(|dir| dir.join(program))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
            .ok_or_else(|| format!("argv[0]: `{program}` is not found in this agent's PATH"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec(argv: &[&str], env: &[(&str, &str)]) -> pb::TaskSpec {
        pb::TaskSpec {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            env: env.iter().map(|(n, v)| pb::EnvVar { name: (*n).into(), value: (*v).into() }).collect(),
            ..Default::default()
        }
    }

    /// A directory with an executable `tool`, a link `alias` to it and an
    /// executable `other`.
    fn bin() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        for name in ["tool", "other"] {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::os::unix::fs::symlink(dir.path().join("tool"), dir.path().join("alias")).unwrap();
        dir
    }

    #[test]
    fn a_capability_runs_only_its_listed_programs_resolved_in_the_agents_path() {
        let dir = bin();
        let tool = dir.path().join("tool");
        let declared = Declared::parse(&format!("cc@1={}", tool.display())).unwrap();
        let any = Declared::parse("sh@1").unwrap();
        assert_eq!(any.programs, Programs::Any);
        let permit = Permit::new(&[declared, any], &[], Some(dir.path().as_os_str()));
        let (cc, sh) = (Capability::parse("cc@1").unwrap().key(), Capability::parse("sh@1").unwrap().key());

        let mut s = spec(&["tool", "-c"], &[]);
        permit.check(&cc, &mut s).unwrap();
        assert_eq!(s.argv[0], tool.display().to_string(), "runs the resolved path");
        let mut s = spec(&[dir.path().join("alias").to_str().unwrap()], &[]);
        permit.check(&cc, &mut s).unwrap();

        let e = permit.check(&cc, &mut spec(&["other"], &[])).unwrap_err();
        assert!(e.starts_with("argv[0]: `other` (") && e.contains("is not a program capability cc@1"), "{e}");
        let e = permit.check(&cc, &mut spec(&["./tool"], &[])).unwrap_err();
        assert!(e.contains("is a relative path"), "{e}");
        let e = permit.check(&cc, &mut spec(&["absent"], &[])).unwrap_err();
        assert!(e.contains("not found in this agent's PATH"), "{e}");
        // No list: anything runs, as given.
        let mut s = spec(&["other"], &[]);
        permit.check(&sh, &mut s).unwrap();
        assert_eq!(s.argv[0], "other");
        // Undeclared: refused (the agent checks it first; this fails closed).
        let e = permit.check("gcc@12:*", &mut spec(&["other"], &[])).unwrap_err();
        assert!(e.contains("not one this agent declared"), "{e}");
    }

    #[test]
    fn a_declared_program_must_be_an_absolute_existing_file() {
        let e = Declared::parse("cc@1=gcc").unwrap_err().to_string();
        assert!(e.starts_with("--capability: `gcc` in cc@1's programs is not an absolute path"), "{e}");
        let e = Declared::parse("cc@1=/nonexistent/gcc").unwrap_err().to_string();
        assert!(e.contains("/nonexistent/gcc"), "{e}");
        let e = Declared::parse("cc@1=/").unwrap_err().to_string();
        assert!(e.contains("is not a file"), "{e}");
        assert!(Declared::parse("bad capability=/bin/sh").is_err());
    }

    #[test]
    fn loader_and_interpreter_variables_are_refused_unless_allowed_by_name() {
        let permit = Permit::new(&[Declared::parse("sh@1").unwrap()], &["PYTHONPATH".into()], None);
        let sh = Capability::parse("sh@1").unwrap().key();
        for name in ["LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "BASH_ENV", "GLIBC_TUNABLES", "NODE_OPTIONS"] {
            let e = permit.check(&sh, &mut spec(&["sh"], &[("CC", "gcc"), (name, "x")])).unwrap_err();
            assert!(e.starts_with(&format!("env: `{name}` changes what runs")), "{e}");
        }
        let e = permit.check(&sh, &mut spec(&["sh"], &[("A=B", "x")])).unwrap_err();
        assert!(e.contains("is not a plain name"), "{e}");
        permit.check(&sh, &mut spec(&["sh"], &[("CFLAGS", "-O2"), ("PYTHONPATH", "/opt/lib")])).unwrap();
    }
}
