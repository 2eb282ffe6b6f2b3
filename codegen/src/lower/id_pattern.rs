//! Lowers `ids.pattern` (`^[first][rest]{min,max}$`) to the byte ranges the
//! runtime checks an ID against, so the runtime needs no regex engine and the
//! spec cannot name a pattern the runtime would enforce differently.

use crate::model::{IdPattern, leak, leak_all};

const SHAPE: &str = "an ID pattern is `^[first][rest]{min,max}$`, each class made of \
                     ranges (`a-z`, `0-9`) and single characters (`-`, `_`, `.`), \
                     e.g. `^[a-z0-9][a-z0-9-]{0,62}$`";

/// The longest ID a pattern may allow, in bytes: it travels in a header and a
/// path segment, and an error quotes it whole.
pub const MAX_LEN: usize = 256;

/// Parses `text`, or says what is wrong with it.
pub fn parse(text: &str) -> Result<IdPattern<'static>, String> {
    let body = text
        .strip_prefix('^')
        .and_then(|t| t.strip_suffix('$'))
        .ok_or_else(|| format!("{SHAPE}: it must start with `^` and end with `$`"))?;
    let (first, body) = class(body)?;
    let (rest, body) = class(body)?;
    let (min, max) = bound(body)?;
    if first.iter().any(|&(lo, hi)| (lo..=hi).contains(&b'.')) {
        return Err(
            "the first character may not be `.`: an ID of `.` or `..` would leave its path segment"
                .to_owned(),
        );
    }
    Ok(IdPattern {
        text: leak(text),
        first: leak_all(first),
        rest: leak_all(rest),
        min_len: min + 1,
        max_len: max + 1,
    })
}

/// Characters an ID may hold: what a URL path segment carries unescaped
/// (RFC 3986 `unreserved`), so an ID is also a safe header value.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.~".contains(&b)
}

/// A character class: inclusive byte ranges.
type ByteRanges = Vec<(u8, u8)>;

/// `[...]` at the start of `s`: its ranges, and what follows.
fn class(s: &str) -> Result<(ByteRanges, &str), String> {
    let s = s
        .strip_prefix('[')
        .ok_or_else(|| format!("{SHAPE}: expected a class `[...]` at `{s}`"))?;
    let end = s
        .find(']')
        .ok_or_else(|| format!("{SHAPE}: the class `[{s}` is not closed"))?;
    let (inner, after) = (&s[..end], &s[end + 1..]);
    if inner.is_empty() {
        return Err("the class `[]` is empty: no ID could match it".to_owned());
    }
    if inner.starts_with('^') {
        return Err(format!(
            "the negated class `[{inner}]` is not supported: list what an ID may hold"
        ));
    }
    let bytes = inner.as_bytes();
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let (lo, hi, len) = match bytes.get(i + 1..i + 3) {
            Some(&[b'-', hi]) => (bytes[i], hi, 3),
            _ => (bytes[i], bytes[i], 1),
        };
        let item = String::from_utf8_lossy(&bytes[i..i + len]);
        if lo > hi {
            return Err(format!("the range `{item}` in `[{inner}]` is inverted"));
        }
        if let Some(bad) = (lo..=hi).find(|&b| !unreserved(b)) {
            let bad = if bad.is_ascii_graphic() {
                format!("`{}`", bad as char)
            } else {
                "a byte outside printable ASCII".to_owned()
            };
            return Err(format!(
                "`{item}` in `[{inner}]` takes in {bad}: a class holds only letters, digits and \
                 `-_.~` (what a path segment carries unescaped; no escapes like `\\d`)"
            ));
        }
        ranges.push((lo, hi));
        i += len;
    }
    Ok((ranges, after))
}

/// `{min,max}` or `{n}`, all of `s`: the repetitions of the rest class.
fn bound(s: &str) -> Result<(usize, usize), String> {
    let inner = s
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or_else(|| format!("{SHAPE}: expected a bound `{{min,max}}` at `{s}`"))?;
    let number = |n: &str| {
        n.parse::<usize>()
            .map_err(|_| format!("{SHAPE}: `{n}` in `{{{inner}}}` is not a number"))
    };
    let (min, max) = match inner.split_once(',') {
        Some((min, max)) => (number(min)?, number(max)?),
        None => (number(inner)?, number(inner)?),
    };
    if min > max {
        return Err(format!(
            "the bound `{{{inner}}}` is inverted: {min} > {max}"
        ));
    }
    if max >= MAX_LEN {
        return Err(format!(
            "the bound `{{{inner}}}` allows IDs of {} bytes; at most {MAX_LEN} are allowed",
            max + 1
        ));
    }
    Ok((min, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowers_classes_and_bounds() {
        let p = parse("^[a-z0-9][a-z0-9-]{0,62}$").unwrap();
        assert_eq!(p.first, [(b'a', b'z'), (b'0', b'9')]);
        assert_eq!(p.rest, [(b'a', b'z'), (b'0', b'9'), (b'-', b'-')]);
        assert_eq!((p.min_len, p.max_len), (1, 63));
        let p = parse("^[A-Z_][-a-z_.]{4}$").unwrap();
        assert_eq!(p.first, [(b'A', b'Z'), (b'_', b'_')]);
        assert_eq!(
            p.rest,
            [(b'-', b'-'), (b'a', b'z'), (b'_', b'_'), (b'.', b'.')]
        );
        assert_eq!((p.min_len, p.max_len), (5, 5));
    }

    #[test]
    fn refuses_every_other_pattern() {
        for (bad, says) in [
            ("[a-z][a-z]{0,3}$", "start with `^`"),
            ("^[a-z]+$", "expected a class"),
            ("^[a-z][a-z]*$", "expected a bound"),
            ("^[a-z][a-z]{0,3}", "end with `$`"),
            ("^[a-z][a-z]{0,3}x$", "expected a bound"),
            ("^[a-z][a-z{0,3}$", "not closed"),
            ("^[][a-z]{0,3}$", "empty"),
            ("^[a-z][]{0,3}$", "empty"),
            ("^[^/][a-z]{0,3}$", "negated"),
            ("^[z-a][a-z]{0,3}$", "inverted"),
            ("^[a-z][a-z]{5,2}$", "inverted"),
            ("^[a-z][a-z]{0,256}$", "at most 256"),
            ("^[a-z][a-z]{0,99999999999999999999999}$", "not a number"),
            ("^[a-z][a-z]{0,}$", "not a number"),
            ("^[a-z][\\d]{0,3}$", "`\\`"),
            ("^[a-z][a-z/]{0,3}$", "`/`"),
            ("^[a-z][0-z]{0,3}$", "`:`"),
            ("^[a-z][a-zä]{0,3}$", "outside printable ASCII"),
            ("^[.a-z][a-z]{0,3}$", "may not be `.`"),
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
