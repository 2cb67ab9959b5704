//! Finds NaN and infinite floats in a TOML text, with the key path and line of each. TOML allows `nan` and `inf`,
//! serde hands them to `f64` fields unchanged, and a check written as a comparison (`x > 0.0`) lets NaN through or
//! turns it into a rule that never fires; so every config and job file is refused at the first one instead.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A float in a TOML text that is NaN or infinite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonFinite {
    /// The key path: `pools[1].max_spot_price`, `tiers.p1.burst_after_s`, `pools[0].step_scaling[0].above`.
    pub key: String,
    /// The 1-based line of the value.
    pub line: usize,
    /// The value as written (`nan`, `-inf`).
    pub written: String,
}

impl NonFinite {
    /// Returns what is wrong, for an error message: `nan is not a number`, `-inf is not a finite number`.
    pub fn message(&self) -> String {
        if self.written.to_ascii_lowercase().contains("nan") {
            format!("{} is not a number", self.written)
        } else {
            format!("{} is not a finite number", self.written)
        }
    }
}

/// Returns the first NaN or infinite float of `text` (in text order), or `None` when there is none or the text
/// is not TOML (the caller's own parse reports that).
pub fn first_non_finite(text: &str) -> Option<NonFinite> {
    let doc = DeTable::parse(text).ok()?;
    let mut found: Vec<(usize, String, String)> = Vec::new();
    walk_table(doc.get_ref(), "", &mut found);
    // Tables iterate in key order, not text order: report the one that comes first in the file.
    let (offset, key, written) = found.into_iter().min_by_key(|f| f.0)?;
    let line = text.get(..offset).map_or(1, |t| t.matches('\n').count() + 1);
    Some(NonFinite { key, line, written })
}

/// Collects the non-finite floats under table `t`, whose key path is `path` (empty at the top).
fn walk_table(t: &DeTable<'_>, path: &str, found: &mut Vec<(usize, String, String)>) {
    for (k, v) in t.iter() {
        let key = if path.is_empty() { k.get_ref().to_string() } else { format!("{path}.{}", k.get_ref()) };
        walk_value(v, key, found);
    }
}

/// Collects the non-finite floats in value `v` at key path `path`.
fn walk_value(v: &Spanned<DeValue<'_>>, path: String, found: &mut Vec<(usize, String, String)>) {
    match v.get_ref() {
        // A float the parser took is a Rust float literal too; one that somehow is not counts as finite here and
        // is left to the typed parse.
        DeValue::Float(f) if f.as_str().parse::<f64>().is_ok_and(|x| !x.is_finite()) => {
            found.push((v.span().start, path, f.as_str().to_string()));
        }
        DeValue::Table(t) => walk_table(t, &path, found),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                walk_value(item, format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::first_non_finite;

    #[test]
    fn finds_the_first_non_finite_float_with_its_path_and_line() {
        let text = "a = 1.5\n[[pools]]\nx = 2.0\n[[pools]]\nz = inf\nbands = [{ above = nan }]\n";
        let hit = first_non_finite(text).map(|h| (h.key.clone(), h.line, h.message()));
        assert_eq!(hit, Some(("pools[1].z".into(), 5, "inf is not a finite number".into())));
        let hit = first_non_finite("[t.p1]\ny = 3\nw = -nan\n").map(|h| (h.key.clone(), h.line, h.message()));
        assert_eq!(hit, Some(("t.p1.w".into(), 3, "-nan is not a number".into())));
        assert_eq!(first_non_finite("a = 1e300\nb = \"nan\"\n"), None);
    }
}
