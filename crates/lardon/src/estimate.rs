//! What a task declares it needs: the [`Estimate`] and its builder.
//!
//! An estimate is immutable once built. Building never fails: an invalid
//! estimate is not an API error but something admission REJECTs with a
//! reason ([`Estimate::validate`] says which field is wrong), so that a
//! task read from a file or an RPC always has a place to report its fault.

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

/// Thousandths of a CPU in one whole CPU.
pub const MILLIS_PER_CPU: u32 = 1000;

/// What was wrong with an [`Estimate`], naming the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EstimateError {
    /// `batch_min` must be at least 1.
    #[error("batch_min must be at least 1")]
    BatchMinZero,
    /// `batch_max` must be at least `batch_min`.
    #[error("batch_max ({max}) is below batch_min ({min})")]
    BatchRange {
        /// The minimum batch.
        min: u64,
        /// The maximum batch.
        max: u64,
    },
    /// `cpus` must be at least one thousandth.
    #[error("cpus must be more than 0")]
    CpusZero,
    /// GPU memory was asked for without a GPU slot.
    #[error("gpu_memory is set but gpu_slots is 0: ask for a GPU slot too")]
    GpuMemoryWithoutSlot,
    /// The class key is not `[a-z0-9][a-z0-9._-]{0,63}`.
    #[error("class `{0}` is invalid: use 1-64 characters of a-z 0-9 . _ - starting with a letter or digit")]
    BadClass(String),
    /// `fixed + per_item × batch_max` does not fit in 64 bits.
    #[error("{0} overflows at batch_max")]
    Overflow(&'static str),
}

/// A learning key: `[a-z0-9][a-z0-9._-]{0,63}`.
///
/// Construction does not validate (so an estimate read from outside can
/// carry a bad class to admission, which rejects it); [`Class::is_valid`]
/// answers, from a flag computed once at construction (admission asks on
/// every evaluation). Cloning is cheap, since every contract carries one: a
/// key of up to 22 bytes (the usual case) is stored in place and copied
/// without touching any shared count, a longer one is shared.
#[derive(Clone)]
pub struct Class(Repr);

/// Bytes a key may have to be stored in place (the enum then takes 24
/// bytes, the size of a `String`).
const INLINE: usize = 22;

/// The bit of [`Repr::Inline`]'s `meta` that says the key is valid; the
/// other bits hold its length (at most [`INLINE`], so they never reach it).
const VALID: u8 = 0x80;

#[derive(Clone)]
enum Repr {
    /// The first `meta & !VALID` bytes of `bytes` hold the key (valid
    /// UTF-8: copied from a `str`); `meta & VALID` says whether it matches
    /// the class syntax.
    Inline { meta: u8, bytes: [u8; INLINE] },
    /// A key too long to store in place, and whether it is valid.
    Shared { key: Arc<str>, valid: bool },
}

/// Whether `bytes` match `[a-z0-9][a-z0-9._-]{0,63}`.
fn valid_key(bytes: &[u8]) -> bool {
    let first_ok = bytes.first().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    first_ok
        && bytes.len() <= 64
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
}

impl Class {
    /// The class used when a task names none.
    pub const DEFAULT: &'static str = "default";

    /// Wraps a class key (validated at admission).
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        let valid = valid_key(name.as_bytes());
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..name.len()].copy_from_slice(name.as_bytes());
                let meta = if valid { len | VALID } else { len };
                Class(Repr::Inline { meta, bytes })
            }
            _ => Class(Repr::Shared { key: Arc::from(name), valid }),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { meta, bytes } => &bytes[..usize::from(*meta & !VALID)],
            Repr::Shared { key, .. } => key.as_bytes(),
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Copied from a `str` and cut at its own length, so always
            // valid; the fallback is unreachable but keeps this total.
            Repr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Shared { key, .. } => key,
        }
    }

    /// Whether the key matches `[a-z0-9][a-z0-9._-]{0,63}` (decided once,
    /// when the class was made).
    pub fn is_valid(&self) -> bool {
        let valid = match &self.0 {
            Repr::Inline { meta, .. } => meta & VALID != 0,
            Repr::Shared { valid, .. } => *valid,
        };
        debug_assert_eq!(valid, valid_key(self.as_bytes()), "the validity flag drifted from the key");
        valid
    }
}

// Equality, order and hash are the key's text's, whichever way it is
// stored (a key is stored in place exactly when it is short enough, so
// equal keys are stored alike, but nothing below relies on it).
impl PartialEq for Class {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Class {}

impl PartialOrd for Class {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Class {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Byte order is `str` order.
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::hash::Hash for Class {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // What `str`'s `Hash` writes, without re-checking UTF-8.
        state.write(self.as_bytes());
        state.write_u8(0xff);
    }
}

impl fmt::Debug for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Class").field(&self.as_str()).finish()
    }
}

impl Default for Class {
    fn default() -> Self {
        Class::new(Self::DEFAULT)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resources one task declares, per sequence.
///
/// Memory for a batch of `b` items is `memory_fixed + memory_per_item × b`
/// (likewise for GPU memory, per device). CPUs are in thousandths
/// ([`MILLIS_PER_CPU`]). Build one with [`Estimate::builder`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Estimate {
    pub(crate) memory_fixed: u64,
    pub(crate) memory_per_item: u64,
    pub(crate) gpu_memory_fixed: u64,
    pub(crate) gpu_memory_per_item: u64,
    pub(crate) batch_min: u64,
    pub(crate) batch_max: u64,
    pub(crate) cpus: u32,
    pub(crate) cpus_reducible: bool,
    pub(crate) gpu_slots: u32,
    pub(crate) io_slots: u32,
    pub(crate) scratch_bytes: u64,
    pub(crate) class: Class,
    pub(crate) items_left: Option<u64>,
    pub(crate) group: Option<crate::group::GroupName>,
}

impl Default for Estimate {
    fn default() -> Self {
        Estimate {
            memory_fixed: 0,
            memory_per_item: 0,
            gpu_memory_fixed: 0,
            gpu_memory_per_item: 0,
            batch_min: 1,
            batch_max: 1,
            cpus: MILLIS_PER_CPU,
            cpus_reducible: true,
            gpu_slots: 0,
            io_slots: 0,
            scratch_bytes: 0,
            class: Class::default(),
            items_left: None,
            group: None,
        }
    }
}

impl Estimate {
    /// Starts an estimate: batch 1..1, one CPU, no memory, class `default`.
    pub fn builder() -> EstimateBuilder {
        EstimateBuilder { estimate: Estimate::default() }
    }

    /// Fixed host memory per sequence, in bytes.
    pub fn memory_fixed(&self) -> u64 {
        self.memory_fixed
    }
    /// Host memory per item of the batch, in bytes.
    pub fn memory_per_item(&self) -> u64 {
        self.memory_per_item
    }
    /// Fixed GPU memory per device, in bytes.
    pub fn gpu_memory_fixed(&self) -> u64 {
        self.gpu_memory_fixed
    }
    /// GPU memory per item per device, in bytes.
    pub fn gpu_memory_per_item(&self) -> u64 {
        self.gpu_memory_per_item
    }
    /// Smallest useful batch (≥ 1).
    pub fn batch_min(&self) -> u64 {
        self.batch_min
    }
    /// Largest batch wanted.
    pub fn batch_max(&self) -> u64 {
        self.batch_max
    }
    /// CPUs wanted, in thousandths.
    pub fn cpus(&self) -> u32 {
        self.cpus
    }
    /// Whether fewer CPUs than wanted may be granted (default `true`).
    /// A non-reducible estimate waits for all of them, and is rejected if
    /// it wants more than the compute pool.
    pub fn cpus_reducible(&self) -> bool {
        self.cpus_reducible
    }
    /// GPU devices wanted (one slot on each).
    pub fn gpu_slots(&self) -> u32 {
        self.gpu_slots
    }
    /// IO slots wanted.
    pub fn io_slots(&self) -> u32 {
        self.io_slots
    }
    /// Scratch space wanted, in bytes (never counted as RAM).
    pub fn scratch_bytes(&self) -> u64 {
        self.scratch_bytes
    }
    /// Items the task still has to process, when the submitter said
    /// ([`EstimateBuilder::items_left`]).
    pub fn items_left(&self) -> Option<u64> {
        self.items_left
    }
    /// This estimate with `items` items left to process (what a batched
    /// task's next sequence is admitted with).
    #[must_use]
    pub fn with_items_left(&self, items: u64) -> Estimate {
        Estimate { items_left: Some(items), ..self.clone() }
    }
    /// This estimate learning under `class` instead (a caller that keys
    /// learning by something the estimate does not hold, such as the
    /// daemon's command shape for a task without a class).
    #[must_use]
    pub fn with_class(self, class: Class) -> Estimate {
        Estimate { class, ..self }
    }
    /// The learning key.
    pub fn class(&self) -> &Class {
        &self.class
    }
    /// The group whose limits this estimate's grants count against, if any.
    pub fn group(&self) -> Option<&crate::group::GroupName> {
        self.group.as_ref()
    }
    /// This estimate counted against `group`'s limits (or none).
    #[must_use]
    pub fn with_group(self, group: Option<crate::group::GroupName>) -> Estimate {
        Estimate { group, ..self }
    }

    /// Host memory for a batch of `batch` items, `None` on overflow.
    pub fn memory_for(&self, batch: u64) -> Option<u64> {
        self.memory_per_item.checked_mul(batch)?.checked_add(self.memory_fixed)
    }

    /// GPU memory per device for a batch of `batch` items, `None` on overflow.
    pub fn gpu_memory_for(&self, batch: u64) -> Option<u64> {
        self.gpu_memory_per_item.checked_mul(batch)?.checked_add(self.gpu_memory_fixed)
    }

    /// Whether the estimate asks for any GPU.
    pub fn wants_gpu(&self) -> bool {
        self.gpu_slots > 0 || self.gpu_memory_fixed > 0 || self.gpu_memory_per_item > 0
    }

    /// Checks every rule of an estimate (docs/DESIGN.md §2), first fault first.
    ///
    /// # Errors
    /// The [`EstimateError`] naming the faulty field.
    pub fn validate(&self) -> Result<(), EstimateError> {
        if self.is_valid() {
            return Ok(());
        }
        self.fault()
    }

    /// Whether every rule of [`Estimate::validate`] holds, without naming
    /// a fault (admission asks on every evaluation; debug builds check it
    /// agrees with the rule-by-rule check).
    #[inline]
    pub(crate) fn is_valid(&self) -> bool {
        let valid = self.batch_min > 0
            && self.batch_max >= self.batch_min
            && self.cpus > 0
            && (self.gpu_slots > 0 || (self.gpu_memory_fixed == 0 && self.gpu_memory_per_item == 0))
            && self.class.is_valid()
            && self.memory_for(self.batch_max).is_some()
            && self.gpu_memory_for(self.batch_max).is_some();
        debug_assert_eq!(valid, self.fault().is_ok(), "is_valid disagrees with the rules");
        valid
    }

    /// The rules one by one, first fault first.
    fn fault(&self) -> Result<(), EstimateError> {
        if self.batch_min == 0 {
            return Err(EstimateError::BatchMinZero);
        }
        if self.batch_max < self.batch_min {
            return Err(EstimateError::BatchRange { min: self.batch_min, max: self.batch_max });
        }
        if self.cpus == 0 {
            return Err(EstimateError::CpusZero);
        }
        if (self.gpu_memory_fixed > 0 || self.gpu_memory_per_item > 0) && self.gpu_slots == 0 {
            return Err(EstimateError::GpuMemoryWithoutSlot);
        }
        if !self.class.is_valid() {
            return Err(EstimateError::BadClass(self.class.as_str().to_owned()));
        }
        if self.memory_for(self.batch_max).is_none() {
            return Err(EstimateError::Overflow("memory"));
        }
        if self.gpu_memory_for(self.batch_max).is_none() {
            return Err(EstimateError::Overflow("gpu_memory"));
        }
        Ok(())
    }
}

/// Builds an [`Estimate`]; every setter is infallible and validation
/// happens at admission (or explicitly with [`Estimate::validate`]).
#[derive(Debug, Clone)]
#[must_use]
pub struct EstimateBuilder {
    estimate: Estimate,
}

impl EstimateBuilder {
    /// Fixed host memory per sequence.
    pub fn memory(mut self, bytes: u64) -> Self {
        self.estimate.memory_fixed = bytes;
        self
    }
    /// Host memory per item.
    pub fn memory_per_item(mut self, bytes: u64) -> Self {
        self.estimate.memory_per_item = bytes;
        self
    }
    /// Fixed GPU memory per device.
    pub fn gpu_memory(mut self, bytes: u64) -> Self {
        self.estimate.gpu_memory_fixed = bytes;
        self
    }
    /// GPU memory per item per device.
    pub fn gpu_memory_per_item(mut self, bytes: u64) -> Self {
        self.estimate.gpu_memory_per_item = bytes;
        self
    }
    /// Batch range `min..=max`.
    pub fn batch(mut self, min: u64, max: u64) -> Self {
        self.estimate.batch_min = min;
        self.estimate.batch_max = max;
        self
    }
    /// CPUs wanted, in thousandths (`1500` is one and a half CPUs).
    pub fn cpu_millis(mut self, millis: u32) -> Self {
        self.estimate.cpus = millis;
        self
    }
    /// Whole CPUs wanted.
    pub fn cpus(mut self, cpus: u32) -> Self {
        self.estimate.cpus = cpus.saturating_mul(MILLIS_PER_CPU);
        self
    }
    /// Require every wanted CPU (wait rather than run with fewer).
    pub fn cpus_exact(mut self) -> Self {
        self.estimate.cpus_reducible = false;
        self
    }
    /// GPU devices wanted.
    pub fn gpu_slots(mut self, slots: u32) -> Self {
        self.estimate.gpu_slots = slots;
        self
    }
    /// IO slots wanted.
    pub fn io_slots(mut self, slots: u32) -> Self {
        self.estimate.io_slots = slots;
        self
    }
    /// Scratch bytes wanted.
    pub fn scratch(mut self, bytes: u64) -> Self {
        self.estimate.scratch_bytes = bytes;
        self
    }
    /// Learning key.
    pub fn class(mut self, class: impl Into<String>) -> Self {
        self.estimate.class = Class::new(class);
        self
    }
    /// Items the task still has to process (a batched task's `--items`
    /// minus those done). Admission uses it while memory is contended to
    /// keep the tasks with the most work left on large batches
    /// (docs/DESIGN.md §4 step 9); unset, nothing is assumed.
    pub fn items_left(mut self, items: u64) -> Self {
        self.estimate.items_left = Some(items);
        self
    }
    /// The group whose limits the task's grants count against
    /// ([`crate::Governor::set_group_limits`]).
    pub fn group(mut self, group: crate::group::GroupName) -> Self {
        self.estimate.group = Some(group);
        self
    }
    /// Finishes the estimate (not validated here: see [`Estimate::validate`]).
    pub fn build(self) -> Estimate {
        self.estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short keys are stored in place and long ones shared; either way a
    /// class is its text: equality, order, hash, display and validity
    /// agree with the `str`'s, across the 22-byte boundary too.
    #[test]
    fn a_class_is_its_text_however_it_is_stored() {
        use std::hash::BuildHasher;
        let keys = ["", "a", "bench", &"x".repeat(21), &"x".repeat(22), &"x".repeat(23), &"y".repeat(64)];
        for a in keys {
            let c = Class::new(a);
            assert_eq!(c.as_str(), a);
            assert_eq!(c.to_string(), a);
            assert_eq!(format!("{c:?}"), format!("Class({a:?})"));
            assert_eq!(c.clone(), c);
            assert_eq!(c.is_valid(), !a.is_empty(), "{a:?}");
            let state = std::hash::RandomState::new();
            assert_eq!(state.hash_one(&c), state.hash_one(Class::new(a.to_owned())));
            for b in keys {
                let d = Class::new(b);
                assert_eq!(c == d, a == b, "{a:?} vs {b:?}");
                assert_eq!(c.cmp(&d), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
        assert!(!Class::new("x".repeat(65)).is_valid());
        assert!(!Class::new("Bench").is_valid());
        assert_eq!(Class::default().as_str(), Class::DEFAULT);
        assert_eq!(std::mem::size_of::<Class>(), 24, "a class is as small as a String");
    }

    #[test]
    fn defaults_are_valid() {
        let e = Estimate::builder().build();
        assert_eq!(e.validate(), Ok(()));
        assert_eq!(e.cpus(), 1000);
        assert_eq!(e.class().as_str(), "default");
    }

    #[test]
    fn each_rule_names_its_field() {
        assert_eq!(Estimate::builder().batch(0, 4).build().validate(), Err(EstimateError::BatchMinZero));
        assert_eq!(
            Estimate::builder().batch(5, 4).build().validate(),
            Err(EstimateError::BatchRange { min: 5, max: 4 })
        );
        assert_eq!(Estimate::builder().cpu_millis(0).build().validate(), Err(EstimateError::CpusZero));
        assert_eq!(
            Estimate::builder().gpu_memory(1).build().validate(),
            Err(EstimateError::GpuMemoryWithoutSlot)
        );
        assert_eq!(
            Estimate::builder().gpu_memory_per_item(1).build().validate(),
            Err(EstimateError::GpuMemoryWithoutSlot)
        );
        assert!(Estimate::builder().gpu_memory(1).gpu_slots(1).build().validate().is_ok());
        assert_eq!(
            Estimate::builder().memory(1).memory_per_item(u64::MAX).batch(1, 2).build().validate(),
            Err(EstimateError::Overflow("memory"))
        );
    }

    #[test]
    fn class_syntax() {
        for ok in ["a", "0", "features.extract", "x-y_z.1", &"a".repeat(64)] {
            assert!(Class::new(ok).is_valid(), "{ok}");
        }
        for bad in ["", "A", "-a", ".a", "a b", "é", &"a".repeat(65)] {
            assert!(!Class::new(bad).is_valid(), "{bad}");
            assert!(matches!(
                Estimate::builder().class(bad).build().validate(),
                Err(EstimateError::BadClass(_))
            ));
        }
    }

    #[test]
    fn memory_for_batch() {
        let e = Estimate::builder().memory(100).memory_per_item(10).batch(1, 8).build();
        assert_eq!(e.memory_for(8), Some(180));
        assert_eq!(e.memory_for(u64::MAX), None);
    }
}
