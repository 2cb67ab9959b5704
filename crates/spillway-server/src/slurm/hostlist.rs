//! Slurm hostlists (`c[1-3,7],gpu-[01-02]x,n1`): what `ResumeProgram` and `SuspendProgram` get in `argv[1]`, and
//! what `squeue` prints for a job's nodes. Expanded here so that a malformed one is refused with the position of
//! the fault, and a huge range cannot exhaust memory.

/// The most names one hostlist may expand to (Slurm's own limit on a node table is far below).
pub const MAX_NAMES: usize = 65_536;

/// Why a hostlist was refused: what, and the byte offset where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hostlist `{list}`: {why} at byte {at}")]
pub struct HostlistError {
    pub list: String,
    pub why: String,
    pub at: usize,
}

/// Expands a hostlist into names, in order, each once. Refuses an empty list or name, unbalanced or nested
/// brackets, a bad range (`[3-1]`, `[a-b]`), characters Slurm does not allow in a node name, and lists that
/// expand past [`MAX_NAMES`].
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let err = |why: &str, at: usize| HostlistError { list: shown(list), why: why.into(), at };
    let list_trim = list.trim();
    if list_trim.is_empty() {
        return Err(err("empty hostlist", 0));
    }
    let mut names = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (start, item) in split_top(list_trim).map_err(|(why, at)| err(why, at))? {
        if item.is_empty() {
            return Err(err("empty name", start));
        }
        for name in expand_item(item, start).map_err(|(why, at)| err(&why, at))? {
            if seen.insert(name.clone()) {
                names.push(name);
            }
            if names.len() > MAX_NAMES {
                return Err(err(&format!("expands to more than {MAX_NAMES} names"), start));
            }
        }
    }
    Ok(names)
}

/// Splits at the commas outside brackets; returns each item with its byte offset.
fn split_top(list: &str) -> Result<Vec<(usize, &str)>, (&'static str, usize)> {
    let (mut depth, mut start, mut items) = (0_u32, 0, Vec::new());
    for (i, ch) in list.char_indices() {
        match ch {
            '[' if depth > 0 => return Err(("nested `[`", i)),
            '[' => depth = 1,
            ']' if depth == 0 => return Err(("`]` without `[`", i)),
            ']' => depth = 0,
            ',' if depth == 0 => {
                items.push((start, &list[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(("`[` without `]`", list.len()));
    }
    items.push((start, &list[start..]));
    Ok(items)
}

/// Expands one item: a name with any number of bracketed range sets (`a[1-2]b[3,5]`), as a product.
fn expand_item(item: &str, at: usize) -> Result<Vec<String>, (String, usize)> {
    let mut out = vec![String::new()];
    let mut rest = item;
    let mut pos = at;
    while !rest.is_empty() {
        let (lit, tail) = match rest.find('[') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if let Some(bad) = lit.char_indices().find(|(_, c)| !allowed(*c)) {
            return Err((format!("character {:?} not allowed in a node name", bad.1), pos + bad.0));
        }
        for o in &mut out {
            o.push_str(lit);
        }
        pos += lit.len();
        if tail.is_empty() {
            break;
        }
        // Balanced by `split_top`: the set ends at the next `]`.
        let end = tail.find(']').ok_or_else(|| ("`[` without `]`".to_string(), pos))?;
        let suffixes = expand_set(&tail[1..end], pos + 1)?;
        let total = out.len().checked_mul(suffixes.len()).filter(|&n| n <= MAX_NAMES);
        if total.is_none() {
            return Err((format!("expands to more than {MAX_NAMES} names"), pos));
        }
        out = out.iter().flat_map(|o| suffixes.iter().map(move |s| format!("{o}{s}"))).collect();
        pos += end + 1;
        rest = &tail[end + 1..];
    }
    Ok(out)
}

/// Expands the inside of brackets: comma-separated numbers and `lo-hi` ranges, keeping zero padding (`01-10`).
fn expand_set(set: &str, at: usize) -> Result<Vec<String>, (String, usize)> {
    let mut out = Vec::new();
    let mut off = at;
    for part in set.split(',') {
        let bad = |why: &str| (format!("{why} `{part}`"), off);
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(bad("not a number or range"));
        }
        let (a, b): (u32, u32) = match (lo.parse(), hi.parse()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Err(bad("not a number or range")),
        };
        if a > b {
            return Err(bad("a range that runs backwards"));
        }
        if (b - a) as usize >= MAX_NAMES || out.len() + (b - a) as usize >= MAX_NAMES {
            return Err((format!("expands to more than {MAX_NAMES} names"), off));
        }
        let width = if lo.len() > 1 && lo.starts_with('0') { lo.len() } else { 0 };
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
        off += part.len() + 1;
    }
    Ok(out)
}

/// Returns whether `c` may appear in a node name (letters, digits, `-`, `_`, `.`).
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// Returns `s` cut to 200 bytes and escaped (a newline or an escape code in a hostile list must not forge log
/// lines), for an error message.
pub fn shown(s: &str) -> String {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < s.len() { "..." } else { "" };
    format!("{}{cut}", s[..end].escape_debug())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_lists_padding_and_products_expand_in_order() {
        assert_eq!(expand("c[1-2]").unwrap(), ["c1", "c2"]);
        assert_eq!(expand("c[1-2,5],n1").unwrap(), ["c1", "c2", "c5", "n1"]);
        assert_eq!(expand("gpu-[08-10]").unwrap(), ["gpu-08", "gpu-09", "gpu-10"]);
        assert_eq!(expand("r[1-2]n[1,3]").unwrap(), ["r1n1", "r1n3", "r2n1", "r2n3"]);
        assert_eq!(expand(" c1 ").unwrap(), ["c1"]);
        assert_eq!(expand("c1,c1").unwrap(), ["c1"]);
    }

    #[test]
    fn malformed_lists_name_the_fault_and_where() {
        for (list, why, at) in [
            ("", "empty hostlist", 0),
            ("c[1-2", "`[` without `]`", 5),
            ("c1-2]", "`]` without `[`", 4),
            ("c[1-[2]]", "nested `[`", 4),
            ("c1,,c2", "empty name", 3),
            ("c[3-1]", "a range that runs backwards `3-1`", 2),
            ("c[a-b]", "not a number or range `a-b`", 2),
            ("c[1-2];rm", "character ';' not allowed in a node name", 6),
        ] {
            let e = expand(list).unwrap_err();
            assert_eq!((e.why.as_str(), e.at), (why, at), "{list}");
        }
    }

    #[test]
    fn a_list_with_control_characters_cannot_forge_a_log_line() {
        let e = expand("c1\nFAKE c4: node 99").unwrap_err();
        assert!(!e.to_string().contains('\n') && e.to_string().contains("c1\\nFAKE"), "{e}");
    }

    #[test]
    fn a_huge_range_is_refused_without_expanding_it() {
        let e = expand("c[0-999999999]").unwrap_err();
        assert!(e.why.contains("more than"), "{e}");
        let e = expand("a[1-300]b[1-300]").unwrap_err();
        assert!(e.why.contains("more than"), "{e}");
    }
}
