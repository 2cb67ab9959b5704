//! The first check of a config file: every key against [`super::schema`], in one pass, so a user fixes all
//! misspelt keys and wrong types at once. Each error has the line and column, the key's path, what was expected
//! and, for a near miss, "did you mean".

use super::ConfigError;
use super::schema::{Key, Kind, TOP, kind_name};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Returns every unknown key, wrong type and value outside a fixed set in `text`, in file order; an empty list
/// when there are none or when the text is not TOML (the parser's own error then says where).
pub fn check(file: &str, text: &str) -> Vec<ConfigError> {
    let Ok(root) = DeTable::parse(text) else { return Vec::new() };
    let mut errs = Vec::new();
    let cx = Walk { file };
    cx.table(root.get_ref(), TOP, "", &mut errs);
    errs.sort_by_key(|(at, _)| *at);
    // The first ones, then a count: a file of thousands of mistakes is fixed from the top. Only the ones shown
    // are located (finding a line scans the text before it).
    let more = errs.len().saturating_sub(MAX_ERRORS);
    let mut out: Vec<ConfigError> = errs
        .into_iter()
        .take(MAX_ERRORS)
        .map(|(at, e)| {
            let (line, column) = super::locate::line_column(text, at);
            ConfigError { line: Some(line), column: Some(column), ..e }
        })
        .collect();
    if more > 0
        && let Some(last) = out.last().cloned()
    {
        out.push(ConfigError { key: "(more)".into(), message: format!("and {more} more errors"), ..last });
    }
    out
}

/// Most errors one check reports.
const MAX_ERRORS: usize = 50;

/// The walk over the file's tables: what its errors name.
struct Walk<'a> {
    file: &'a str,
}

type Found = Vec<(usize, ConfigError)>;

impl Walk<'_> {
    /// Returns an error at byte `at` for key `path` (located once it is known to be shown, see [`check`]).
    fn err(&self, at: usize, path: &str, message: String) -> (usize, ConfigError) {
        let path = &short(path);
        let e = ConfigError {
            file: self.file.into(),
            key: if path.is_empty() { "(top level)".into() } else { path.into() },
            line: None,
            message,
            column: None,
            also: Vec::new(),
        };
        (at, e)
    }

    /// Checks a table's keys against `keys`.
    fn table(&self, t: &DeTable, keys: &[Key], path: &str, errs: &mut Found) {
        for (name, value) in t {
            let full = join(path, name.get_ref());
            match keys.iter().find(|k| k.name == name.get_ref()) {
                Some(k) => self.value(value, &k.kind, &full, errs),
                None => {
                    let hint = nearest(name.get_ref(), keys.iter().map(|k| k.name))
                        .map_or(String::new(), |n| format!("; did you mean `{n}`?"));
                    let known = if path.is_empty() { "top-level table" } else { "key here" };
                    errs.push(self.err(name.span().start, &full, format!("unknown {known}{hint}")));
                }
            }
        }
    }

    /// Checks one value against `kind`.
    fn value(&self, v: &Spanned<DeValue>, kind: &Kind, path: &str, errs: &mut Found) {
        let at = v.span().start;
        let got = v.get_ref();
        let ok = match (kind, got) {
            (Kind::Int | Kind::SignedInt, DeValue::Integer(i)) => {
                let (v, radix) = (i.as_str(), i.radix());
                let fits = if matches!(kind, Kind::Int) {
                    u32::from_str_radix(v, radix).is_ok()
                } else {
                    i32::from_str_radix(v, radix).is_ok()
                };
                if !fits {
                    errs.push(self.err(at, path, format!("{i} is out of range for {}", kind_name(kind))));
                }
                true
            }
            (Kind::Secs, DeValue::String(text)) => {
                if let Err(e) = super::secs::parse(text) {
                    errs.push(self.err(at, path, e));
                }
                true
            }
            (Kind::Secs, DeValue::Integer(_) | DeValue::Float(_)) => {
                let written = match got {
                    DeValue::Integer(n) => n.as_str(),
                    DeValue::Float(x) => x.as_str(),
                    _ => "",
                };
                if let Ok(Err(e)) = written.parse::<f64>().map(|v| super::secs::within(v, written)) {
                    errs.push(self.err(at, path, e));
                }
                true
            }
            (Kind::Float, DeValue::Integer(_) | DeValue::Float(_))
            | (Kind::Bool, DeValue::Boolean(_))
            | (Kind::Str, DeValue::String(_))
            | (Kind::Free(_), DeValue::Table(_)) => true,
            (Kind::OneOf(allowed), DeValue::String(s)) => {
                if !allowed.contains(&s.as_ref()) {
                    let hint = nearest(s, allowed.iter().copied())
                        .map_or(String::new(), |n| format!("; did you mean \"{n}\"?"));
                    errs.push(self.err(at, path, format!("\"{s}\" is not {}{hint}", kind_name(kind))));
                }
                true
            }
            (Kind::List(inner), DeValue::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    self.value(item, inner, &format!("{path}[{i}]"), errs);
                }
                true
            }
            (Kind::Table(keys), DeValue::Table(t)) => {
                self.table(t, keys, path, errs);
                true
            }
            (Kind::Tables(keys), DeValue::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    self.value(item, &Kind::Table(keys), &format!("{path}[{i}]"), errs);
                }
                true
            }
            (Kind::Named(inner), DeValue::Table(t)) => {
                for (name, item) in t {
                    self.value(item, inner, &join(path, name.get_ref()), errs);
                }
                true
            }
            _ => false,
        };
        if !ok {
            errs.push(self.err(at, path, format!("expected {}, got {}", kind_name(kind), value_name(got))));
        }
    }
}

/// Returns `s` cut to 80 characters for a message (a hostile key may be megabytes long).
fn short(s: &str) -> String {
    if s.chars().count() <= 80 { s.to_string() } else { s.chars().take(80).collect::<String>() + "..." }
}

/// Returns `path.name`, or `name` at the top.
fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

/// Returns what a TOML value is, as errors name it.
fn value_name(v: &DeValue) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a number",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "a list",
        DeValue::Table(_) => "a table",
    }
}

/// Returns the candidate closest to `word` when it is a near miss: at most 2 edits (1 for short words; a swap of
/// neighbours is one), the start of a longer key, or the same letters with `-` for `_` or in another case.
pub(super) fn nearest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let budget = if word.chars().count() <= 4 { 1 } else { 2 };
    candidates
        .map(|c| {
            let (w, n) = (norm(word), norm(c));
            // A word that starts a longer key (`queue_wait` for `queue_wait_slo_s`) is a near miss too.
            let d = if w == n {
                0
            } else if w.len() >= 5 && n.starts_with(&w) {
                1
            } else {
                edits(&w, &n)
            };
            (d, c)
        })
        .filter(|(d, _)| *d <= budget)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Returns the edit distance between `a` and `b` where swapping two neighbours counts as one edit (optimal string
/// alignment; counted in chars; inputs are key names, so short).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j - 1] + cost).min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_get_a_suggestion_and_far_ones_none() {
        let keys = ["max_nodes", "min_nodes", "market", "name"];
        assert_eq!(nearest("max_node", keys.into_iter()), Some("max_nodes"));
        assert_eq!(nearest("max-nodes", keys.into_iter()), Some("max_nodes"));
        assert_eq!(nearest("Market", keys.into_iter()), Some("market"));
        assert_eq!(nearest("nmae", keys.into_iter()), Some("name"), "a swap is one edit");
        assert_eq!(nearest("nm", keys.into_iter()), None, "two edits in a short word");
        assert_eq!(nearest("colour", keys.into_iter()), None);
    }

    #[test]
    fn every_unknown_key_and_wrong_type_is_reported_at_once_with_line_and_column() {
        let text = "[policy]\npreemptoin = true\nscan_limit = \"many\"\n\n[[pools]]\nname = \"od\"\nmarket = \"ondemand\"\n\
                    max_node = 3\nboot_latency_s = \"5m\"\nstep_scaling = [{ above = 0.8, adjust = 1 }]\n[bogus]\n";
        let errs = check("c.toml", text);
        let shown: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(shown.len(), 6, "{shown:#?}");
        assert_eq!(shown[0], "c.toml:2:1: policy.preemptoin: unknown key here; did you mean `preemption`?");
        assert_eq!(shown[1], "c.toml:3:14: policy.scan_limit: expected integer >= 0, got a string");
        assert!(
            shown[2].starts_with("c.toml:7:10: pools[0].market: \"ondemand\" is not one of")
                && shown[2].ends_with("did you mean \"on_demand\"?"),
            "{}",
            shown[2]
        );
        assert_eq!(shown[3], "c.toml:8:1: pools[0].max_node: unknown key here; did you mean `max_nodes`?");
        assert!(shown[4].starts_with("c.toml:10:32: pools[0].step_scaling[0].adjust: unknown key"), "{}", shown[4]);
        assert_eq!(shown[5], "c.toml:11:2: bogus: unknown top-level table");
        assert!(check("c.toml", "[policy]\npreemption = true\n[tiers.p9]\npriority = 9\n").is_empty());
        // Values serde would refuse later (one at a time) are found in the same pass.
        let more = check(
            "c.toml",
            "[[pools]]\nboot_latency_s = \"4 minutes\"\nmin_nodes = 99999999999\nmax_nodes = -1\n\
                                    step_scaling = [{ below = 0.2, adjust_nodes = -2 }]\n",
        );
        let shown: Vec<String> = more.iter().map(|e| e.to_string()).collect();
        assert_eq!(shown.len(), 3, "{shown:#?}");
        assert!(shown[0].starts_with("c.toml:2:18: pools[0].boot_latency_s:"), "{shown:#?}");
        assert!(shown[1].contains("pools[0].min_nodes: 99999999999 is out of range"), "{shown:#?}");
        assert!(shown[2].contains("pools[0].max_nodes: -1 is out of range"), "{shown:#?}");
        // Thousands of mistakes: the first 50, then a count.
        let many: String = (0..2000).map(|i| format!("bogus{i} = 1\n")).collect();
        let errs = check("c.toml", &format!("[policy]\n{many}"));
        assert_eq!(errs.len(), 51);
        assert_eq!(errs[50].message, "and 1950 more errors");
    }
}
