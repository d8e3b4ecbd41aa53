//! Statement text helpers: the text kept for an event (bounded, cut at a character, a long
//! statement's head joined to its tail), and the schema a `USE` statement names.

use std::sync::Arc;

use super::super::wire::Message;
use crate::kit::cut_text;

/// Total SQL bytes on the wire for a message whose head ends with `sql`.
pub(super) fn sql_total(m: &Message<'_>, sql: &[u8]) -> u64 {
    let offset = m.head.len().saturating_sub(sql.len());
    m.len.saturating_sub(offset as u64)
}

/// Statement text kept for an event: at most `max` bytes, cut at a char boundary. When the
/// middle of a longer statement was dropped on the way (`tail` holds its last bytes), the text is
/// its beginning joined to its end: a statement is huge because of one long literal or VALUES
/// list, so the join lands inside it and the fingerprint still sees the whole statement's shape
/// (`SELECT LENGTH('…') AS x` stays `select length(?) as x`).
pub(super) fn make_text(sql: &[u8], tail: &[u8], total: u64, max: usize) -> (Arc<str>, bool) {
    if !tail.is_empty() && total > sql.len() as u64 && max > tail.len() {
        let head = &sql[..sql.len().min(max - tail.len())];
        let head = match std::str::from_utf8(head) {
            Err(e) if e.error_len().is_none() => &head[..e.valid_up_to()],
            _ => head,
        };
        // The tail may start inside a character: skip its continuation bytes.
        let skip = tail
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        let mut text = String::from_utf8_lossy(head).into_owned();
        text.push_str(&String::from_utf8_lossy(&tail[skip..]));
        return (Arc::from(text), true);
    }
    let (text, truncated) = cut_text(sql, total > sql.len() as u64, max);
    (Arc::from(text.as_ref()), truncated)
}

/// The schema named by a `USE db` statement.
pub(super) fn use_statement(sql: &str) -> Option<String> {
    let s = skip_space_and_comments(sql);
    let kw = s.get(..3)?;
    if !kw.eq_ignore_ascii_case("use") {
        return None;
    }
    let rest = &s[3..];
    let after = skip_space_and_comments(rest);
    if after.len() == rest.len() && !after.starts_with('`') {
        return None;
    }
    if let Some(q) = after.strip_prefix('`') {
        let mut name = String::new();
        let mut chars = q.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '`' {
                if chars.peek() == Some(&'`') {
                    chars.next();
                    name.push('`');
                } else {
                    return (!name.is_empty()).then_some(name);
                }
            } else {
                name.push(c);
            }
        }
        return None;
    }
    let name: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
        .collect();
    let tail = skip_space_and_comments(&after[name.len()..]);
    if name.is_empty() || !(tail.is_empty() || tail.starts_with(';')) {
        return None;
    }
    Some(name)
}

fn skip_space_and_comments(mut s: &str) -> &str {
    loop {
        let t = s.trim_start();
        if let Some(r) = t.strip_prefix("/*") {
            s = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else if t.starts_with("-- ") || t.starts_with('#') {
            s = t.find('\n').map_or("", |i| &t[i + 1..]);
        } else {
            return t;
        }
    }
}
