//! Human units from outside input (flags, TOML, RPC text): never a panic,
//! and what parses round-trips through its plain decimal form.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(bytes) = lardon::parse_bytes(text) {
        let _ = lardon::format_bytes(bytes);
        assert_eq!(lardon::parse_bytes(&bytes.to_string()), Ok(bytes));
    }
    if let Ok(millis) = lardon::parse_cpus(text) {
        let shown = lardon::format_cpus(millis);
        assert_eq!(lardon::parse_cpus(&shown), Ok(millis), "{text:?} -> {shown}");
    }
});
