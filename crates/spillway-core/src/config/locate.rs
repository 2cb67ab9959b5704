//! Finds the line of a key in a TOML text, so semantic errors (found after parsing) can name where they are.
//! It understands the subset our configs use: `[table]`, `[table.sub]`, `[[array]]` headers and `key = ...`
//! lines; anything it cannot find yields `None` and the error still names the key.

/// Returns the 1-based line of `key` inside the `index`-th `[[table]]` entry (or inside `[table]` when `index` is
/// `None`); with an empty `key`, the line of the header itself.
pub fn line_of(text: &str, table: &str, index: Option<usize>, key: &str) -> Option<usize> {
    let mut current: Option<(String, usize)> = None;
    let mut seen: usize = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let head = header(line);
        if let Some((name, true)) = head {
            let name = name.to_string();
            let idx = if name == table {
                seen += 1;
                seen - 1
            } else {
                0
            };
            current = Some((name, idx));
            if key.is_empty() && current.as_ref().is_some_and(|(n, k)| n == table && Some(*k) == index) {
                return Some(i + 1);
            }
            continue;
        }
        if let Some((name, false)) = head {
            current = Some((name.to_string(), 0));
            if key.is_empty() && index.is_none() && name == table {
                return Some(i + 1);
            }
            continue;
        }
        let Some((name, idx)) = &current else {
            if table.is_empty() && key_matches(line, key) {
                return Some(i + 1);
            }
            continue;
        };
        let in_table = name == table && index.is_none_or(|want| want == *idx);
        if in_table && !key.is_empty() && key_matches(line, key) {
            return Some(i + 1);
        }
    }
    None
}

/// Returns the key path of what byte `at` of `text` is in, for errors the TOML parser reports by position: the
/// table whose body holds it (`network.egress[0]`, array tables numbered in file order), then the key of its
/// line when it is a `key = ...` line (`pools[1].max_nodes`); `None` at the top level outside any key.
pub fn key_at(text: &str, at: usize) -> Option<String> {
    let (mut table, mut seen, mut pos): (Option<String>, Vec<(String, usize)>, usize) = (None, Vec::new(), 0);
    let mut key = None;
    for raw in text.split_inclusive('\n') {
        if pos > at {
            break;
        }
        pos += raw.len();
        let line = raw.trim();
        key = None;
        if let Some((name, true)) = header(line) {
            let name = name.to_string();
            let n = match seen.iter_mut().find(|(t, _)| *t == name) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    seen.push((name.clone(), 0));
                    0
                }
            };
            table = Some(format!("{name}[{n}]"));
        } else if let Some((name, false)) = header(line) {
            table = Some(name.to_string());
        } else if let Some((k, _)) = line.split_once('=').filter(|(k, _)| !k.trim().is_empty()) {
            key = Some(k.trim().trim_matches('"').to_string());
        }
    }
    match (table, key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (t, k) => t.or(k),
    }
}

/// Returns the table a trimmed `line` heads, if it is a header, and whether it is an array entry (`[[name]]`).
fn header(line: &str) -> Option<(&str, bool)> {
    if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
        return Some((name.trim(), true));
    }
    line.strip_prefix('[').and_then(|l| l.split(']').next()).map(|name| (name.trim(), false))
}

/// Returns the 1-based line and column (in chars) of byte `at` of `text`.
pub fn line_column(text: &str, at: usize) -> (usize, u32) {
    let before = text.get(..at.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()).saturating_add(1);
    (line, u32::try_from(column).unwrap_or(u32::MAX))
}

fn key_matches(line: &str, key: &str) -> bool {
    let Some(rest) = line.strip_prefix(key) else { return false };
    let rest = rest.trim_start();
    rest.starts_with('=') || (key.contains('.') && rest.starts_with('=')) || rest.starts_with('.') && rest.contains('=')
}

#[cfg(test)]
mod tests {
    use super::{key_at, line_of};

    #[test]
    fn a_position_is_named_by_its_table_entry_and_key() {
        let at = |needle: &str| TEXT.find(needle).unwrap();
        assert_eq!(key_at(TEXT, at("min_nodes")).as_deref(), Some("pools[1].min_nodes"));
        assert_eq!(key_at(TEXT, at("[[pools]]\nname = \"b\"")).as_deref(), Some("pools[1]"));
        assert_eq!(key_at(TEXT, at("queue_wait")).as_deref(), Some("tiers.p1.queue_wait_slo_s"));
        assert_eq!(key_at("a = 1\n", 2).as_deref(), Some("a"));
        assert_eq!(key_at("\n", 0), None);
    }

    const TEXT: &str = "[policy]\npreemption = true\n\n[[pools]]\nname = \"a\"\nmax_nodes = 3\n\n[[pools]]\nname = \"b\"\nmin_nodes = 5\nmax_nodes = 2\n[tiers.p1]\nqueue_wait_slo_s = 60\n";

    #[test]
    fn finds_a_key_in_the_second_array_entry() {
        assert_eq!(line_of(TEXT, "pools", Some(1), "min_nodes"), Some(10));
        assert_eq!(line_of(TEXT, "pools", Some(0), "max_nodes"), Some(6));
        assert_eq!(line_of(TEXT, "pools", Some(1), ""), Some(8));
    }

    #[test]
    fn finds_keys_in_plain_and_dotted_tables() {
        assert_eq!(line_of(TEXT, "policy", None, "preemption"), Some(2));
        assert_eq!(line_of(TEXT, "tiers.p1", None, "queue_wait_slo_s"), Some(13));
        assert_eq!(line_of(TEXT, "pools", Some(0), "min_nodes"), None);
    }
}
