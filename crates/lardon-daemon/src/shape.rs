//! The learning key of a task (docs/DESIGN.md §6, "Strangers never share
//! what was learned").
//!
//! A task that names a class learns under that class, as before. A task
//! that names none (the default class) learns only from runs of the same
//! *command shape*: the same program (`argv[0]`, as given) with the same
//! declared memory (fixed and per item, host and GPU) and batch bounds. Two
//! unrelated commands that happen to share the default class therefore
//! never inherit each other's peaks, and a 150 MiB job is never admitted at
//! a 2.5 GiB job's size; two runs of one command with one declaration —
//! the case learning is for — still teach each other.
//!
//! The key is `default.<program>.<hash>`: the program's base name cut to
//! the class syntax (so `explain` and the store say what it came from) and
//! 16 hex digits of a 64-bit FNV-1a hash of the whole shape (stable across
//! builds and restarts: the store's history is keyed by it).

use lardon::{Class, Estimate};

use crate::spec::TaskSpec;

/// Longest program name kept in a shape key (the whole key stays within the
/// class syntax's 64 characters: `default.` + 20 + `.` + 16).
const PROGRAM_CHARS: usize = 20;

/// The key `spec` learns under: its class when it names one, else its
/// command shape (module docs). Always a valid class key.
pub fn learning_class(spec: &TaskSpec) -> Class {
    let class = spec.estimate.class.as_str();
    if class != Class::DEFAULT && !class.is_empty() {
        return Class::new(class);
    }
    Class::new(shape_key(spec))
}

/// Whether `key` is a command-shape key (one [`learning_class`] made for a
/// task without a class).
pub fn is_shape_key(key: &str) -> bool {
    key.strip_prefix(Class::DEFAULT).is_some_and(|rest| rest.starts_with('.'))
}

/// `default.<program>.<hash>` for `spec`'s program and declaration.
fn shape_key(spec: &TaskSpec) -> String {
    let program = spec.argv.first().map(String::as_str).unwrap_or_default();
    let e = &spec.estimate;
    let mut h = Fnv::new();
    h.bytes(program.as_bytes());
    for v in [
        e.memory_fixed,
        e.memory_per_item,
        e.gpu_memory_fixed,
        e.gpu_memory_per_item,
        e.batch_min,
        e.batch_max(),
    ] {
        h.bytes(&v.to_le_bytes());
    }
    format!("{}.{}.{:016x}", Class::DEFAULT, program_label(program), h.0)
}

/// The program's base name in the class syntax: lower case, anything else
/// as `_`, at most [`PROGRAM_CHARS`]; `cmd` when nothing is left.
fn program_label(program: &str) -> String {
    let base = program.rsplit('/').next().unwrap_or(program);
    let label: String = base
        .chars()
        .take(PROGRAM_CHARS)
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-') { c } else { '_' }
        })
        .collect();
    let label = label.trim_start_matches(['.', '-', '_']);
    if label.is_empty() { "cmd".to_owned() } else { label.to_owned() }
}

/// 64-bit FNV-1a: small, and the same on every build (std's hashers are
/// seeded per process).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }
}

/// What a task learns under, as methods of the spec: here rather than in
/// `spec` so that the spec does not depend on the rule that keys it.
impl TaskSpec {
    /// The engine's estimate as admission and learning see it: the
    /// declared figures under the task's learning key
    /// ([`learning_class`]: its class, or its command shape
    /// when it names none), so that strangers never share what was learned
    /// (docs/DESIGN.md §6). Not validated, as [`crate::spec::EstimateSpec::to_estimate`].
    pub fn to_estimate(&self) -> Estimate {
        self.estimate.to_estimate().with_class(learning_class(self)).with_group(self.group.clone())
    }

    /// The key this task learns under ([`learning_class`]).
    pub fn learning_class(&self) -> Class {
        learning_class(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::EstimateSpec;

    const MIB: u64 = 1 << 20;

    fn unnamed(argv: &[&str], mem: u64) -> TaskSpec {
        let mut s = TaskSpec::command(argv.iter().copied());
        s.estimate = EstimateSpec { memory_fixed: mem, ..EstimateSpec::default() };
        s
    }

    #[test]
    fn tasks_without_a_class_learn_only_from_the_same_command_shape() {
        let small = learning_class(&unnamed(&["/usr/bin/python3", "a.py"], 150 * MIB));
        let big = learning_class(&unnamed(&["/usr/bin/python3", "b.py"], 2560 * MIB));
        let other = learning_class(&unnamed(&["gzip", "x"], 150 * MIB));
        assert_ne!(small, big, "a 150 MiB job must not share a 2.5 GiB job's key");
        assert_ne!(small, other, "another program is a stranger");
        // The same program with the same declaration is the same shape,
        // whatever its arguments.
        assert_eq!(small, learning_class(&unnamed(&["/usr/bin/python3", "c.py"], 150 * MIB)));
        for k in [&small, &big, &other] {
            assert!(k.is_valid(), "{k:?}");
            assert!(is_shape_key(k.as_str()), "{k:?}");
            assert_ne!(k.as_str(), Class::DEFAULT);
        }
        assert!(small.as_str().starts_with("default.python3."), "{small:?}");
    }

    #[test]
    fn a_named_class_keeps_its_own_key() {
        let mut s = unnamed(&["python3"], 150 * MIB);
        s.estimate.class = "features.extract".into();
        assert_eq!(learning_class(&s).as_str(), "features.extract");
        s.estimate.memory_fixed = 2560 * MIB;
        assert_eq!(learning_class(&s).as_str(), "features.extract", "named classes pool across sizes");
        assert!(!is_shape_key("features.extract"));
    }

    #[test]
    fn the_shape_key_is_stable_and_within_the_class_syntax() {
        // Stable across builds: the store's history is keyed by it.
        let k = learning_class(&unnamed(&["sh", "-c", "true"], 0));
        assert_eq!(k.as_str(), "default.sh.a6d3f32c1e98a697");
        let long = learning_class(&unnamed(&["/opt/Some Weird_Program-Name.with.LONG.tail"], MIB));
        assert!(long.is_valid() && long.as_str().len() <= 64, "{long:?}");
        assert!(learning_class(&unnamed(&["/"], MIB)).as_str().starts_with("default.cmd."));
        let batch = |b: u64| {
            let mut s = unnamed(&["sh"], MIB);
            s.estimate.batch_max = Some(b);
            learning_class(&s)
        };
        assert_ne!(batch(4), batch(8), "the batch bounds are part of the shape");
    }
}
