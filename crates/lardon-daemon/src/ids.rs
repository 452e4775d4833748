//! Task ids at the API boundary.
//!
//! Locally a task id is the store's number, printed as plain decimal
//! (`17`). Parsing is lenient so that the cluster mode (docs/DESIGN.md §14) can
//! later prefix ids with a host without breaking clients: `17`, `#17`,
//! `host:17` and `host/17` all name local task 17 (the prefix is ignored
//! for now).

use crate::spec::TaskId;

/// The API form of a local task id.
pub fn format_id(id: TaskId) -> String {
    id.0.to_string()
}

/// Parses an API id leniently (see the module docs); `None` if it names no
/// task number.
pub fn parse_id(text: &str) -> Option<TaskId> {
    let t = text.trim();
    let t = t.rsplit([':', '/']).next().unwrap_or(t);
    let t = t.strip_prefix('#').unwrap_or(t);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok().map(TaskId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_ids() {
        for (s, n) in [("17", 17), (" #17 ", 17), ("host:17", 17), ("a/b/3", 3)] {
            assert_eq!(parse_id(s), Some(TaskId(n)), "{s}");
        }
        for s in ["", "x", "-1", "1.5", "host:", "99999999999999999999999"] {
            assert_eq!(parse_id(s), None, "{s}");
        }
        assert_eq!(format_id(TaskId(5)), "5");
    }
}
