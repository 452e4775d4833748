//! `lardon` command lines: arguments split at NUL bytes, parsed as the
//! binary does, and for `submit` the task spec built as the verb would
//! send it. Never a panic. The harness lives in `lardon_cli::fuzzing`,
//! where property tests run it on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| lardon_cli::fuzzing::flags(bytes));
