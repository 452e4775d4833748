//! `lardon submit --each`: one task per input line, GNU parallel style.
//!
//! In the command (and `--name`), `{}` becomes the line and `{#}` its
//! number (1, 2, … over the lines used); a command with no `{}` gets the
//! line as its last argument, as `parallel` does. Blank lines are skipped,
//! as `xargs` does. The lines are read whole before anything is sent, so a
//! bad line refuses the whole submission instead of queuing half of it.

use std::io::BufRead;

use anyhow::Result;

use crate::error::usage;

/// The placeholder for the line.
const LINE: &str = "{}";
/// The placeholder for the line's number.
const NUMBER: &str = "{#}";

/// One input line kept for a task, with its number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Input {
    pub(crate) number: u64,
    pub(crate) line: String,
}

/// The non-blank lines of `reader`, numbered from 1. `source` names the
/// input in errors (`--each FILE` or `--each -`).
///
/// # Errors
/// A usage error naming `--each` and the line for text that is not UTF-8
/// or contains a NUL byte (it could not be an argument), and read errors.
pub(crate) fn read_inputs(reader: impl BufRead, source: &str) -> Result<Vec<Input>> {
    let mut inputs = Vec::new();
    for (i, line) in reader.split(b'\n').enumerate() {
        let bytes = line.map_err(|e| usage(format!("--each {source}: cannot read: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| usage(format!("--each {source}: line {} is not UTF-8 text", i + 1)))?;
        let text = text.strip_suffix('\r').unwrap_or(&text);
        if text.contains('\0') {
            return Err(usage(format!("--each {source}: line {} holds a NUL byte", i + 1)));
        }
        if text.trim().is_empty() {
            continue;
        }
        let number = u64::try_from(inputs.len()).unwrap_or(u64::MAX).saturating_add(1);
        inputs.push(Input { number, line: text.to_owned() });
    }
    Ok(inputs)
}

/// `text` with `{}` and `{#}` replaced for `input`.
pub(crate) fn fill(text: &str, input: &Input) -> String {
    text.replace(NUMBER, &input.number.to_string()).replace(LINE, &input.line)
}

/// The command for `input`: placeholders filled, or the line appended
/// when the template has no `{}`.
pub(crate) fn command(template: &[String], input: &Input) -> Vec<String> {
    let mut argv: Vec<String> = template.iter().map(|a| fill(a, input)).collect();
    if !template.iter().any(|a| a.contains(LINE)) {
        argv.push(input.line.clone());
    }
    argv
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn inputs(text: &str) -> Vec<Input> {
        read_inputs(text.as_bytes(), "-").unwrap_or_default()
    }

    #[test]
    fn placeholders_are_filled_as_in_gnu_parallel() {
        let ins = inputs("a.jpg\n\nb c.jpg\r\n");
        assert_eq!(ins.len(), 2, "the blank line is skipped");
        let t = strings(&["convert", "{}", "out/{#}.png"]);
        assert_eq!(command(&t, &ins[0]), strings(&["convert", "a.jpg", "out/1.png"]));
        // One argument even with a space: argv, never a shell.
        assert_eq!(command(&t, &ins[1]), strings(&["convert", "b c.jpg", "out/2.png"]));
    }

    #[test]
    fn without_a_line_placeholder_the_line_is_appended() {
        let ins = inputs("x\n");
        assert_eq!(command(&strings(&["echo", "{#}"]), &ins[0]), strings(&["echo", "1", "x"]));
    }

    #[test]
    fn a_line_that_holds_a_placeholder_is_not_expanded_again() {
        let ins = inputs("{#}\n");
        assert_eq!(command(&strings(&["echo", "{}"]), &ins[0]), strings(&["echo", "{#}"]));
    }

    #[test]
    fn bad_lines_are_refused_naming_the_flag_and_line() {
        let err = read_inputs(&b"ok\n\xff\n"[..], "in.txt").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("--each in.txt") && err.contains("line 2"), "{err}");
        let err = read_inputs(&b"a\0b\n"[..], "-").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("line 1") && err.contains("NUL"), "{err}");
    }

    proptest! {
        #[test]
        fn every_non_blank_line_becomes_one_task_in_order(lines in proptest::collection::vec("[a-z {}#]{0,8}", 0..30)) {
            let text = lines.join("\n");
            let ins = inputs(&text);
            let expected: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
            prop_assert_eq!(ins.len(), expected.len());
            for (i, (input, line)) in ins.iter().zip(expected).enumerate() {
                prop_assert_eq!(&input.line, line);
                prop_assert_eq!(input.number, i as u64 + 1);
                prop_assert_eq!(command(&strings(&["x", "{}"]), input), strings(&["x", line]));
            }
        }
    }
}
