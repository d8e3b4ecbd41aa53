//! Redis command fingerprints: the command with its subcommand, optionally the key pattern.
//!
//! The input is the text of a Redis query event: the upper-case command name, the subcommand
//! of a container command, then the first key (`SET user:1234:profile`, `CONFIG GET`,
//! `XINFO STREAM orders`, `FT.SEARCH`). [`fingerprint`] writes into `out` (cleared first):
//!
//! * the command words: the first word, and for the container commands ([`CONTAINERS`]:
//!   `ACL`, `CLIENT`, `CLUSTER`, `COMMAND`, `CONFIG`, `FUNCTION`, `LATENCY`, `MEMORY`,
//!   `MODULE`, `OBJECT`, `PUBSUB`, `SCRIPT`, `SLOWLOG`, `XGROUP`, `XINFO`) the second word too,
//!   upper-cased (`SET`, `CONFIG GET`, `XINFO STREAM`);
//! * with `key_patterns`, a space and the shape of the key (everything after the command
//!   words), where variable parts become `?`:
//!   - the key is cut into segments at the separators `:` `.` `/` `-` `_` `{` `}` `[` `]` `|`
//!     `#` `=` `,` `;` `@` and whitespace, which are kept;
//!   - a UUID (8-4-4-4-12 hex digits) becomes one `?` (`session:9f8e7d6c-...` ->
//!     `session:?`);
//!   - in every segment each run of digits becomes `?` (`user:1234:profile` ->
//!     `user:?:profile`, `cache:{42}:x` -> `cache:{?}:x`, `shard12` -> `shard?`);
//!   - a segment then made only of `?` and the letters `a`-`f`/`A`-`F`, with two or more `?`
//!     (or one `?` and six or more letters), is a hex string and becomes `?`
//!     (`9f8e7d6c` -> `?`, `da39a3ee5e6b...` -> `?`); so does a segment with three or more `?`
//!     among letters (a random token such as `Zx9Kq2LmPw8Rt5Vn`), and a segment of 32 or more
//!     characters (counting each `?` as one);
//!   - `?` segments joined by `-` or `.` merge into one `?` (dates `2024-01-15`, addresses
//!     `10.0.0.1`, versions `1.2.3`).
//!
//!   Keys that differ only in their digits therefore always share a pattern. Case is kept
//!   (Redis keys are case-sensitive).
//!
//! Nothing is allocated beyond the growth of `out`, so reuse it across calls.

/// Redis commands that take a subcommand.
pub const CONTAINERS: [&str; 15] = [
    "ACL", "CLIENT", "CLUSTER", "COMMAND", "CONFIG", "FUNCTION", "LATENCY", "MEMORY", "MODULE",
    "OBJECT", "PUBSUB", "SCRIPT", "SLOWLOG", "XGROUP", "XINFO",
];

/// Writes the fingerprint of a Redis event text into `out` (cleared first).
pub fn fingerprint(text: &str, key_patterns: bool, out: &mut String) {
    out.clear();
    let (name, rest) = split_word(trimmed(text));
    push_upper(out, name);
    let rest = if is_container(name) && !rest.is_empty() {
        let (sub, after) = split_word(rest);
        out.push(' ');
        push_upper(out, sub);
        after
    } else {
        rest
    };
    if key_patterns && !rest.is_empty() {
        out.push(' ');
        key_pattern(rest, out);
    }
}

/// The command name of a Redis event text: its first word. Unless [`is_container`], the
/// fingerprint without key patterns is this name alone, upper-cased: keys differ from one
/// request to the next while names repeat, so a caller may remember a name's fingerprint (and
/// its hash) instead of computing it per request.
pub fn command_name(text: &str) -> &str {
    split_word(trimmed(text)).0
}

/// Whether a text starting with `b` needs no trimming: neither whitespace nor part of a
/// multi-byte character (always so for the session's texts).
fn plain_start(b: u8) -> bool {
    b > b' ' && b.is_ascii()
}

/// `text` without leading whitespace; per request on the hot path, so a plain first byte is
/// checked before `trim_start`'s Unicode walk.
fn trimmed(text: &str) -> &str {
    match text.as_bytes().first() {
        Some(&b) if plain_start(b) => text,
        _ => text.trim_start(),
    }
}

/// Whether [`command_name`] of `text` is `name` (a name [`command_name`] gave): checked in
/// place, without looking for the end of the text's first word.
pub fn named(text: &str, name: &str) -> bool {
    let t = text.as_bytes();
    let n = name.len();
    t.first().is_some_and(|&b| plain_start(b))
        && t.get(n).map_or(t.len() == n, |&b| b == b' ')
        // Names are short: a loop, not a call to `memcmp`.
        && t.get(..n)
            .is_some_and(|p| p.iter().zip(name.as_bytes()).all(|(a, b)| a == b))
}

/// Whether `name` is a container command, whose fingerprint takes the subcommand too.
pub fn is_container(name: &str) -> bool {
    CONTAINERS.iter().any(|c| c.eq_ignore_ascii_case(name))
}

/// The first word and what follows the single space after it.
fn split_word(s: &str) -> (&str, &str) {
    match s.find(' ') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, ""),
    }
}

fn push_upper(out: &mut String, s: &str) {
    for c in s.chars() {
        out.push(c.to_ascii_uppercase());
    }
}

/// The ASCII separators (see the module documentation: the punctuation, and the ASCII
/// characters `char::is_whitespace` takes), one bit per character.
const ASCII_SEPARATORS: u128 = {
    let mut mask = 0u128;
    let seps = b":./-_{}[]|#=,;@ \t\n\x0b\x0c\r";
    let mut i = 0;
    while i < seps.len() {
        mask |= 1 << seps[i];
        i += 1;
    }
    mask
};

fn is_separator(c: char) -> bool {
    // Per character of every key: one bit for ASCII.
    match u8::try_from(c) {
        Ok(b) if b.is_ascii() => ASCII_SEPARATORS >> b & 1 == 1,
        _ => c.is_whitespace(),
    }
}

/// Length of a UUID at the start of `b`, if one is there (and does not run on into more hex).
fn uuid_at(b: &[u8]) -> Option<usize> {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let mut i = 0;
    for (g, len) in GROUPS.iter().enumerate() {
        if g > 0 {
            if b.get(i) != Some(&b'-') {
                return None;
            }
            i += 1;
        }
        let part = b.get(i..i + len)?;
        if !part.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        i += len;
    }
    if b.get(i).is_some_and(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    Some(i)
}

/// Appends the shape of one segment (no separators in it).
fn push_segment(seg: &str, out: &mut String) {
    // The segment with each digit run folded to `?`, and its shape.
    let mut runs = 0usize;
    let mut letters = 0usize;
    let mut hex_only = true;
    let mut folded_len = 0usize;
    let mut in_digits = false;
    for c in seg.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                runs += 1;
                folded_len += 1;
            }
            in_digits = true;
            continue;
        }
        in_digits = false;
        folded_len += 1;
        if c.is_alphabetic() {
            letters += 1;
        }
        if !c.is_ascii_hexdigit() {
            hex_only = false;
        }
    }
    let hex = hex_only && runs > 0 && (runs >= 2 || letters >= 6);
    let token = runs >= 3 && letters > 0;
    if hex || token || folded_len >= 32 || (runs == 1 && folded_len == 1) {
        out.push('?');
        return;
    }
    if runs == 0 {
        out.push_str(seg);
        return;
    }
    let mut in_digits = false;
    for c in seg.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('?');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(c);
        }
    }
}

/// Appends the shape of a key (see the module documentation).
pub fn key_pattern(key: &str, out: &mut String) {
    let start = out.len();
    let b = key.as_bytes();
    let mut i = 0usize;
    let mut seg_start = 0usize;
    while i < key.len() {
        // A UUID at a segment start is one `?`.
        if i == seg_start
            && let Some(n) = uuid_at(b.get(i..).unwrap_or(&[]))
        {
            out.push('?');
            i += n;
            seg_start = i;
            continue;
        }
        let c = match b.get(i) {
            Some(&x) if x.is_ascii() => char::from(x),
            _ => match key.get(i..).and_then(|r| r.chars().next()) {
                Some(c) => c,
                None => break,
            },
        };
        if is_separator(c) {
            push_segment(&key[seg_start..i], out);
            out.push(c);
            i += c.len_utf8();
            seg_start = i;
        } else {
            i += c.len_utf8();
        }
    }
    push_segment(&key[seg_start..], out);
    merge_placeholders(out, start);
}

/// Merges `?` segments joined by `-` or `.` (`?-?-?` -> `?`), from byte `start` of `out` on.
fn merge_placeholders(out: &mut String, start: usize) {
    // Only a `?`, a `-` or `.` and a `?` in a row can merge: without them the tail stays as it
    // is (most keys), and is not copied out and back.
    let joined = |w: &[u8]| w[0] == b'?' && matches!(w[1], b'-' | b'.') && w[2] == b'?';
    if out
        .as_bytes()
        .get(start..)
        .is_some_and(|t| t.windows(3).any(joined))
    {
        merge_joined(out, start);
    }
}

/// [`merge_placeholders`] once joined `?` segments may be there.
fn merge_joined(out: &mut String, start: usize) {
    let tail = out.split_off(start);
    // `out` ends with a whole `?` segment; a `-` or `.` written after it is held back until
    // we know whether another whole `?` follows.
    let mut after_q = false;
    let mut held: Option<char> = None;
    let mut seg_start = 0usize;
    let segment = |seg: &str, out: &mut String, after_q: &mut bool, held: &mut Option<char>| {
        if seg == "?" && held.is_some() {
            *held = None;
        } else {
            if let Some(j) = held.take() {
                out.push(j);
            }
            out.push_str(seg);
            *after_q = seg == "?";
        }
    };
    for (i, c) in tail.char_indices() {
        if !is_separator(c) {
            continue;
        }
        segment(&tail[seg_start..i], out, &mut after_q, &mut held);
        if after_q && held.is_none() && matches!(c, '-' | '.') && i > seg_start {
            held = Some(c);
        } else {
            if let Some(j) = held.take() {
                out.push(j);
            }
            out.push(c);
            after_q = false;
        }
        seg_start = i + c.len_utf8();
    }
    segment(&tail[seg_start..], out, &mut after_q, &mut held);
    if let Some(j) = held {
        out.push(j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fp(text: &str, keys: bool) -> String {
        let mut s = String::new();
        fingerprint(text, keys, &mut s);
        s
    }

    fn pat(key: &str) -> String {
        let mut s = String::new();
        key_pattern(key, &mut s);
        s
    }

    #[test]
    fn commands() {
        assert_eq!(fp("SET user:1234:profile", false), "SET");
        assert_eq!(fp("SET user:1234:profile", true), "SET user:?:profile");
        assert_eq!(fp("CONFIG GET", false), "CONFIG GET");
        assert_eq!(fp("CONFIG GET", true), "CONFIG GET");
        assert_eq!(
            fp("XINFO STREAM orders:2024", true),
            "XINFO STREAM orders:?"
        );
        assert_eq!(fp("XINFO STREAM orders:2024", false), "XINFO STREAM");
        assert_eq!(fp("OBJECT ENCODING k1", true), "OBJECT ENCODING k?");
        assert_eq!(fp("MGET a", true), "MGET a");
        assert_eq!(fp("PING", true), "PING");
        assert_eq!(fp("FT.SEARCH", true), "FT.SEARCH");
        assert_eq!(fp("get foo", true), "GET foo");
        assert_eq!(fp("config", true), "CONFIG");
        assert_eq!(fp("", true), "");
    }

    /// Every character is a separator exactly as the documented rule says.
    #[test]
    fn separators() {
        let rule = |c: char| ":./-_{}[]|#=,;@".contains(c) || c.is_whitespace();
        for c in (0..0x3100).filter_map(char::from_u32) {
            assert_eq!(is_separator(c), rule(c), "{c:?}");
        }
    }

    #[test]
    fn command_names() {
        assert_eq!(command_name("GET user:1"), "GET");
        assert_eq!(command_name("  set k"), "set");
        assert_eq!(command_name("PING"), "PING");
        assert_eq!(command_name(""), "");
        assert_eq!(command_name("\u{b}\u{85}GET k"), "GET");
        assert_eq!(command_name("CONFIG GET"), "CONFIG");
        assert!(named("GET k", "GET") && named("GET", "GET") && named("get k", "get"));
        assert!(!named("GETX k", "GET") && !named("GE", "GET") && !named(" GET k", "GET"));
        assert!(!named("get k", "GET") && !named("", "") && !named(" ", ""));
        assert!(is_container("config") && is_container("XInfo"));
        assert!(!is_container("GET") && !is_container("") && !is_container("CONFIGX"));
    }

    /// Vectors from shared/reference/fingerprint-vectors.md §6.5.
    #[test]
    fn reference_vectors() {
        // hget session:abc f1 -> group HGET (Packetbeat's resource: session:abc).
        assert_eq!(fp("HGET session:abc", false), "HGET");
        assert_eq!(fp("HGET session:abc", true), "HGET session:abc");
        // CONFIG GET maxmemory -> CONFIG GET.
        assert_eq!(fp("CONFIG GET", true), "CONFIG GET");
        // SET user:1234:profile v -> SET, key pattern user:?:profile.
        assert_eq!(fp("SET user:1234:profile", true), "SET user:?:profile");
        // XADD s * f v -> recognised (Packetbeat does not).
        assert_eq!(fp("XADD s", true), "XADD s");
    }

    #[test]
    fn key_patterns() {
        for (key, want) in [
            ("user:1234:profile", "user:?:profile"),
            ("session:9f8e7d6c-1a2b-4c3d-8e9f-0a1b2c3d4e5f", "session:?"),
            (
                "session:9F8E7D6C-1A2B-4C3D-8E9F-0A1B2C3D4E5F:data",
                "session:?:data",
            ),
            ("cache:{42}:x", "cache:{?}:x"),
            ("shard12", "shard?"),
            ("9f8e7d6c", "?"),
            ("obj:da39a3ee5e6b4b0d3255bfef95601890afd80709", "obj:?"),
            ("tok:Zx9Kq2LmPw8Rt5Vn", "tok:?"),
            ("log:2024-01-15", "log:?"),
            ("peer:10.0.0.1:6379", "peer:?:?"),
            ("v1.2.3", "v?.?"),
            ("rate/limit/42/min", "rate/limit/?/min"),
            ("user_12_name", "user_?_name"),
            ("cafe", "cafe"),
            ("cafe1", "cafe?"),
            ("deadbeef1234", "?"),
            ("a", "a"),
            ("", ""),
            ("-5", "-?"),
            ("key with spaces 12", "key with spaces ?"),
            ("café:12", "café:?"),
            ("{user1000}.following", "{user?}.following"),
            ("queue:jobs", "queue:jobs"),
            ("x".repeat(40).as_str(), "?"),
        ] {
            assert_eq!(pat(key), want, "{key}");
        }
    }

    fn digits_replaced(key: &str, seed: u64) -> String {
        let mut s = seed;
        let mut out = String::new();
        let mut prev_digit = false;
        for c in key.chars() {
            if c.is_ascii_digit() {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if !prev_digit {
                    // A digit run of another length.
                    for _ in 0..(s >> 60) % 3 {
                        out.push(char::from(b'0' + ((s >> 33) % 10) as u8));
                    }
                }
                out.push(char::from(b'0' + ((s >> 40) % 10) as u8));
                prev_digit = true;
            } else {
                out.push(c);
                prev_digit = false;
            }
        }
        out
    }

    proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,80}", keys in any::<bool>()) {
            let mut s = String::new();
            fingerprint(&text, keys, &mut s);
        }

        #[test]
        fn never_panics_on_key_like_text(
            key in "[a-fA-F0-9:._{}/ -]{0,60}",
            name in prop::sample::select(vec!["SET", "CONFIG GET", "XINFO STREAM", "GET", "X"]),
        ) {
            let mut s = String::new();
            fingerprint(&format!("{name} {key}"), true, &mut s);
            prop_assert!(s.starts_with(name.split(' ').next().unwrap()));
        }

        /// A caller that remembers a plain name's fingerprint gets the text's own.
        #[test]
        fn a_plain_name_has_the_text_fingerprint(
            text in "[ \t\x0b\x0c\u{85}\u{a0}\u{2003}]{0,2}(\\PC{0,8}|(?i)(config|client|get|xinfo|set)) {0,2}\\PC{0,30}",
        ) {
            let name = command_name(&text);
            prop_assert_eq!(name, text.trim_start().split(' ').next().unwrap_or(""));
            // `named` may say no to the text's own name (the caller then looks for it), but
            // only when the text starts with what needs trimming; it never says yes to another.
            let plain = text.as_bytes().first().is_some_and(|&b| b > b' ' && b.is_ascii());
            prop_assert_eq!(named(&text, name), plain);
            for other in ["GET", "get", "CONFIG", "", "G", "GETX"] {
                prop_assert!(!named(&text, other) || other == name, "{:?} {:?}", text, other);
            }
            if !is_container(name) {
                prop_assert_eq!(fp(name, false), fp(&text, false));
            }
        }

        /// What `merge_placeholders` skips the merge would not change.
        #[test]
        fn only_joined_placeholders_merge(tail in "[?a1:.-]{0,12}", head in "[a:]{0,3}") {
            let mut out = format!("{head}{tail}");
            merge_joined(&mut out, head.len());
            let joined = ["?-?", "?.?"].iter().any(|j| tail.contains(j));
            prop_assert!(joined || out == format!("{head}{tail}"), "{:?} -> {:?}", tail, out);
        }

        #[test]
        fn keys_differing_only_in_digits_share_a_pattern(
            key in "[a-zA-Z0-9:._{}/\\-]{0,48}",
            seed in any::<u64>(),
        ) {
            let other = digits_replaced(&key, seed);
            prop_assert_eq!(pat(&key), pat(&other), "{} / {}", key, other);
        }
    }
}
