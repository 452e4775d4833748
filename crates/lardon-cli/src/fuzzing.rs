//! Fuzz harnesses of the command line's outside input, shared by the
//! cargo-fuzz targets in `fuzz/fuzz_targets/{flags,workload}.rs` (nightly)
//! and the property tests below (stable, in CI), so that each harness
//! compiles and runs where no nightly toolchain is installed.
//!
//! The property every harness checks: no input makes the parser panic;
//! bad input is an error value (which the binary prints naming the field).

use std::path::Path;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::commands::submit;
use crate::each;

/// Parses `bytes` as a workload file (`lardon run FILE`). Never panics;
/// text that is not UTF-8 is refused before parsing, as the verb does.
pub fn workload(bytes: &[u8]) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = crate::workload::parse(Path::new("fuzz.toml"), text);
    }
}

/// Splits `bytes` at NUL bytes into the arguments after `lardon`, parses
/// them as the binary does and, for `submit`, builds the task spec the
/// verb would send (for `--each`, from `bytes` as the input lines too) —
/// everything short of connecting to a daemon. Never panics.
pub fn flags(bytes: &[u8]) {
    let args = bytes.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned());
    let Ok(cli) = Cli::try_parse_from(std::iter::once("lardon".to_owned()).chain(args)) else {
        return;
    };
    let Command::Submit(args) = &cli.command else {
        return;
    };
    let parts = submit::parts(args, Path::new("/"));
    if args.each.is_some() {
        if let Ok(inputs) = each::read_inputs(bytes, "-") {
            for input in &inputs {
                let _ = submit::each_spec(args, &parts, input);
            }
        }
    } else {
        let _ = crate::commands::spec::task_spec(&args.needs, parts, crate::commands::spec::Style::Flags);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Flags built from the real vocabulary, so that the parser gets past
    /// clap into the size, count and batch parsers most of the time.
    fn argv() -> impl Strategy<Value = Vec<String>> {
        let word = prop_oneof![
            Just("submit".to_owned()),
            Just("--mem".to_owned()),
            Just("--mem-per-item".to_owned()),
            Just("--items".to_owned()),
            Just("--batch".to_owned()),
            Just("--cpus".to_owned()),
            Just("--gpu-mem".to_owned()),
            Just("--scratch".to_owned()),
            Just("--env".to_owned()),
            Just("--after".to_owned()),
            Just("--priority".to_owned()),
            Just("--each".to_owned()),
            Just("-".to_owned()),
            Just("--".to_owned()),
            "[0-9.]{0,6}(|B|KiB|MiB|GiB|TiB|k|m|%)",
            "[0-9]{0,3}\\.\\.[0-9]{0,3}",
            "[A-Za-z_=]{0,6}",
            any::<String>(),
        ];
        prop::collection::vec(word, 0..10)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn no_flags_make_the_cli_panic(args in argv()) {
            flags(args.join("\0").as_bytes());
        }

        #[test]
        fn no_bytes_make_the_cli_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            flags(&bytes);
        }

        #[test]
        fn no_text_makes_the_workload_parser_panic(text in any::<String>()) {
            workload(text.as_bytes());
        }

        /// Workload-shaped text, so that parsing reaches the field checks
        /// (and error positions inside multi-byte text).
        #[test]
        fn no_workload_makes_the_workload_parser_panic(
            lines in prop::collection::vec(prop_oneof![
                Just("[[task]]".to_owned()),
                Just("[host]".to_owned()),
                Just("[policy]".to_owned()),
                "(name|argv|mem|mem_per_item|items|batch|cpus|gpu_mem|scratch|after|memory|cpus|priority) = ",
                "\"[0-9.]{0,5}(|MiB|GiB|é)\"",
                "\\[\"[a-zé ]{0,5}\"\\]",
                "[0-9-]{0,4}",
                any::<String>(),
            ], 0..12)
        ) {
            workload(lines.join("\n").as_bytes());
        }
    }

    /// Seeds that once needed care: an error position inside a multi-byte
    /// character, and the real demo workload.
    #[test]
    fn seeds() {
        workload("[[task]]\nname = \"é\"\nmem = \"é1GiB\"\n".as_bytes());
        workload(include_bytes!("../../../examples/demo.toml"));
        flags(b"submit\0--mem\x001.6GiB\0--\0true");
        flags(b"submit\0--each\0-\0--\0echo\0{}\n\nline");
    }
}
