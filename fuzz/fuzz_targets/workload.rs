//! Workload files (`lardon run FILE`): any bytes through the TOML parser
//! and the field checks. Never a panic. The harness lives in
//! `lardon_cli::fuzzing`, where property tests run it on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| lardon_cli::fuzzing::workload(bytes));
