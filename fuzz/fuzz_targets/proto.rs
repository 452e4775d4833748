//! Protobuf decoding of every request the daemon accepts: never a panic,
//! and what decodes survives re-encoding. The harness lives in
//! `lardon_proto::fuzzing`, where a unit test runs it on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| lardon_proto::fuzzing::decode_requests(bytes));
