//! Byte-exact emulation of pt-query-digest 3.2.1's `QueryRewriter::fingerprint`.
//!
//! pt applies a fixed sequence of Perl regex substitutions to the query as a byte string (no
//! `use utf8`, so `\s`, `\w`, `\b` and `lc` are ASCII-only). Each step below emulates one
//! substitution, leftmost-first and non-overlapping like `s///g`, including its backtracking
//! where that matters. Steps run on one buffer: a step reads the first `n` bytes, appends its
//! result, then drops the first `n` bytes ([`Pass`]), so nothing but the output grows.

use crate::lex::is_space as sp;

/// Perl `\w` on a byte string.
#[inline]
fn w(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Perl `\b` before position `i` where `s[i]` is known to be a word byte.
#[inline]
fn boundary_before(s: &[u8], i: usize) -> bool {
    i == 0 || !w(s[i - 1])
}

/// Perl `\b` after a word ending at `end`.
#[inline]
fn boundary_after(s: &[u8], end: usize) -> bool {
    end >= s.len() || !w(s[end])
}

#[inline]
fn starts_ci(s: &[u8], i: usize, pat: &[u8]) -> bool {
    s.len() >= i + pat.len() && s[i..i + pat.len()].eq_ignore_ascii_case(pat)
}

#[inline]
fn starts(s: &[u8], i: usize, pat: &[u8]) -> bool {
    s.len() >= i + pat.len() && &s[i..i + pat.len()] == pat
}

/// One substitution pass over `buf[..n]`, writing its result after `n`.
struct Pass<'a> {
    buf: &'a mut Vec<u8>,
    n: usize,
}

impl<'a> Pass<'a> {
    fn new(buf: &'a mut Vec<u8>) -> Self {
        let n = buf.len();
        Pass { buf, n }
    }
    #[inline]
    fn src(&self) -> &[u8] {
        &self.buf[..self.n]
    }
    #[inline]
    fn copy(&mut self, a: usize, b: usize) {
        if a < b {
            self.buf.extend_from_within(a..b);
        }
    }
    #[inline]
    fn push(&mut self, s: &[u8]) {
        self.buf.extend_from_slice(s);
    }
    fn finish(self) {
        self.buf.drain(..self.n);
    }
}

/// pt-query-digest's fingerprint of `q`, written to `out` (cleared first).
/// `bool_rule`: pt-query-digest's `true`/`false` -> `?` step, which pt-fingerprint 3.2.1 lacks.
pub(crate) fn fingerprint(q: &[u8], out: &mut Vec<u8>, bool_rule: bool) {
    out.clear();
    if q.starts_with(b"SELECT /*!40001 SQL_NO_CACHE */ * FROM `") {
        out.extend_from_slice(b"mysqldump");
        return;
    }
    if has_toolkit_comment(q) {
        out.extend_from_slice(b"percona-toolkit");
        return;
    }
    if q.starts_with(b"administrator command: ") {
        out.extend_from_slice(q);
        return;
    }
    if let Some((a, b)) = call(q) {
        out.extend(q[a..b].iter().map(u8::to_ascii_lowercase));
        return;
    }
    let end = shorten_insert(q).unwrap_or(q.len());
    out.extend_from_slice(&q[..end]);

    strip_block_comments(out);
    strip_line_comments(out);
    if use_db(out) {
        return;
    }
    drop_escaped_quotes(out);
    quoted_to_placeholder(out, b'"');
    quoted_to_placeholder(out, b'\'');
    if bool_rule {
        booleans(out);
    }
    numbers(out);
    prefix_before_placeholder(out);
    squeeze_and_lowercase(out);
    nulls(out);
    in_values_lists(out);
    union_fold(out, usize::MAX);
    limit(out);
    order_by_asc(out);
}

/// `m#/\*\w+\.\w+:[0-9]/[0-9]\*/#`
fn has_toolkit_comment(s: &[u8]) -> bool {
    let mut i = 0;
    while let Some(p) = crate::lex::find2(s, i, b'/', b'*') {
        i = p + 1;
        let mut j = p + 2;
        let run = |mut j: usize| {
            while j < s.len() && w(s[j]) {
                j += 1;
            }
            j
        };
        let e = run(j);
        if e == j || s.get(e) != Some(&b'.') {
            continue;
        }
        j = e + 1;
        let e = run(j);
        if e == j {
            continue;
        }
        let t = &s[e..];
        if t.len() >= 6
            && t[0] == b':'
            && t[1].is_ascii_digit()
            && t[2] == b'/'
            && t[3].is_ascii_digit()
            && t[4] == b'*'
            && t[5] == b'/'
        {
            return true;
        }
    }
    false
}

/// `m/\A\s*(call\s+\S+)\(/i`: the range of `$1`.
fn call(s: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < s.len() && sp(s[i]) {
        i += 1;
    }
    if !starts_ci(s, i, b"call") {
        return None;
    }
    let mut j = i + 4;
    let ws = j;
    while j < s.len() && sp(s[j]) {
        j += 1;
    }
    if j == ws {
        return None;
    }
    let run = j;
    while j < s.len() && !sp(s[j]) {
        j += 1;
    }
    // Greedy \S+ backs off to the last '(' that leaves at least one byte for \S+.
    let p = (run + 1..j).rev().find(|&k| s[k] == b'(')?;
    Some((i, p))
}

/// `m/\A((?:INSERT|REPLACE)(?: IGNORE)?\s+INTO.+?VALUES\s*\(.*?\))\s*,\s*\(/is`: end of `$1`.
fn shorten_insert(s: &[u8]) -> Option<usize> {
    let k = if starts_ci(s, 0, b"INSERT") {
        6
    } else if starts_ci(s, 0, b"REPLACE") {
        7
    } else {
        return None;
    };
    let into_end = [k + 7, k]
        .into_iter()
        .filter(|&k2| k2 == k || starts_ci(s, k, b" IGNORE"))
        .find_map(|k2| {
            let mut j = k2;
            while j < s.len() && sp(s[j]) {
                j += 1;
            }
            (j > k2 && starts_ci(s, j, b"INTO")).then_some(j + 4)
        })?;
    let mut v = into_end + 1;
    while v + 6 <= s.len() {
        if starts_ci(s, v, b"VALUES") {
            let mut p = v + 6;
            while p < s.len() && sp(s[p]) {
                p += 1;
            }
            if s.get(p) == Some(&b'(') {
                for q in p + 1..s.len() {
                    if s[q] != b')' {
                        continue;
                    }
                    let mut r = q + 1;
                    while r < s.len() && sp(s[r]) {
                        r += 1;
                    }
                    if s.get(r) != Some(&b',') {
                        continue;
                    }
                    r += 1;
                    while r < s.len() && sp(s[r]) {
                        r += 1;
                    }
                    if s.get(r) == Some(&b'(') {
                        return Some(q + 1);
                    }
                }
            }
        }
        v += 1;
    }
    None
}

/// `s#/\*[^!].*?\*/##sg`
fn strip_block_comments(buf: &mut Vec<u8>) {
    if crate::lex::find2(buf, 0, b'/', b'*').is_none() {
        return;
    }
    let mut p = Pass::new(buf);
    let n = p.n;
    let mut i = 0;
    let mut copied = 0;
    while i + 2 < n {
        let s = p.src();
        if s[i] == b'/' && s[i + 1] == b'*' && s[i + 2] != b'!' {
            let Some(e) = crate::lex::find2(s, i + 3, b'*', b'/') else {
                // No `*/` after here: no later `/*` can close either.
                break;
            };
            p.copy(copied, i);
            i = e + 2;
            copied = i;
            continue;
        }
        i += 1;
    }
    p.copy(copied, n);
    p.finish();
}

/// `s/(?:--|#)[^'"\r\n]*(?=[\r\n]|\Z)//g`
fn strip_line_comments(buf: &mut Vec<u8>) {
    if !buf.iter().any(|&b| b == b'#' || b == b'-') {
        return;
    }
    let mut p = Pass::new(buf);
    let n = p.n;
    let mut i = 0;
    let mut copied = 0;
    while i < n {
        let s = p.src();
        let len = if s[i] == b'#' {
            1
        } else if s[i] == b'-' && i + 1 < n && s[i + 1] == b'-' {
            2
        } else {
            i += 1;
            continue;
        };
        let mut j = i + len;
        while j < n && !matches!(s[j], b'\'' | b'"' | b'\r' | b'\n') {
            j += 1;
        }
        if j == n || s[j] == b'\r' || s[j] == b'\n' {
            p.copy(copied, i);
            i = j;
            copied = j;
        } else {
            i += 1;
        }
    }
    p.copy(copied, n);
    p.finish();
}

/// `s/\Ause \S+\Z/use ?/i && return`
fn use_db(buf: &mut Vec<u8>) -> bool {
    let s = &buf[..];
    if !starts_ci(s, 0, b"use ") {
        return false;
    }
    let mut e = 4;
    while e < s.len() && !sp(s[e]) {
        e += 1;
    }
    let n = s.len();
    if e == 4 || !(e == n || (e == n - 1 && s[n - 1] == b'\n')) {
        return false;
    }
    let nl = e < n;
    buf.clear();
    buf.extend_from_slice(b"use ?");
    if nl {
        buf.push(b'\n');
    }
    true
}

/// One left-to-right pass over `buf` in place, as a Perl `s///g` does it: where `at(buf, r)`
/// gives `Some((len, put))` (`len` >= 1), the `len` bytes from `r` become `put` (one byte or
/// none) and the scan goes on after them; every other byte stays. The output never outgrows
/// what was read, so it is written behind the read position.
fn rewrite(buf: &mut Vec<u8>, mut at: impl FnMut(&[u8], usize) -> Option<(usize, Option<u8>)>) {
    let (mut r, mut wr, n) = (0, 0, buf.len());
    while r < n {
        if let Some((len, put)) = at(buf, r) {
            debug_assert!(len >= 1);
            if let Some(b) = put {
                buf[wr] = b;
                wr += 1;
            }
            r += len.max(1);
            continue;
        }
        buf[wr] = buf[r];
        wr += 1;
        r += 1;
    }
    buf.truncate(wr);
}

/// `s/\\["']//g`
fn drop_escaped_quotes(buf: &mut Vec<u8>) {
    rewrite(buf, |b, r| {
        (b[r] == b'\\' && matches!(b.get(r + 1), Some(b'"' | b'\''))).then_some((2, None))
    });
}

/// `s/".*?"/?/sg` (or with `'`)
fn quoted_to_placeholder(buf: &mut Vec<u8>, q: u8) {
    rewrite(buf, |b, r| {
        if b[r] != q {
            return None;
        }
        let e = b[r + 1..].iter().position(|&c| c == q)?;
        Some((e + 2, Some(b'?')))
    });
}

/// `s/\bfalse\b|\btrue\b/?/isg`
fn booleans(buf: &mut Vec<u8>) {
    rewrite(buf, |b, r| {
        let c = b[r] | 0x20;
        if !(c == b'f' || c == b't') || !boundary_before(b, r) {
            return None;
        }
        let len = if starts_ci(b, r, b"false") {
            5
        } else if starts_ci(b, r, b"true") {
            4
        } else {
            return None;
        };
        boundary_after(b, r + len).then_some((len, Some(b'?')))
    });
}

/// `s/[0-9+-][0-9a-f.xb+-]*/?/g`
fn numbers(buf: &mut Vec<u8>) {
    rewrite(buf, |b, r| {
        if !(b[r].is_ascii_digit() || b[r] == b'+' || b[r] == b'-') {
            return None;
        }
        let more = b[r + 1..]
            .iter()
            .take_while(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f' | b'.' | b'x' | b'+' | b'-'))
            .count();
        Some((1 + more, Some(b'?')))
    });
}

/// `s/[xb.+-]\?/?/g`
fn prefix_before_placeholder(buf: &mut Vec<u8>) {
    rewrite(buf, |b, r| {
        (matches!(b[r], b'x' | b'b' | b'.' | b'+' | b'-') && b.get(r + 1) == Some(&b'?'))
            .then_some((2, Some(b'?')))
    });
}

/// `s/\A\s+//; chomp; tr[ \n\t\r\f][ ]s; lc`
fn squeeze_and_lowercase(buf: &mut Vec<u8>) {
    let mut r = 0;
    let n0 = buf.len();
    while r < n0 && sp(buf[r]) {
        r += 1;
    }
    let mut n = n0;
    if n > r && buf[n - 1] == b'\n' {
        n -= 1;
    }
    let mut wr = 0;
    let mut squeezing = false;
    while r < n {
        let c = buf[r];
        r += 1;
        if matches!(c, b' ' | b'\n' | b'\t' | b'\r' | 0x0c) {
            if !squeezing {
                buf[wr] = b' ';
                wr += 1;
                squeezing = true;
            }
            continue;
        }
        squeezing = false;
        buf[wr] = c.to_ascii_lowercase();
        wr += 1;
    }
    buf.truncate(wr);
}

/// `s/\bnull\b/?/g`
fn nulls(buf: &mut Vec<u8>) {
    rewrite(buf, |b, r| {
        (b[r] == b'n' && starts(b, r, b"null") && boundary_before(b, r) && boundary_after(b, r + 4))
            .then_some((4, Some(b'?')))
    });
}

/// End of `(?:[\s,]*\([\s?,]*\))+` at `k`, if at least one group matches.
fn list_groups(s: &[u8], mut k: usize) -> Option<usize> {
    let mut count = 0;
    loop {
        let mut p = k;
        while p < s.len() && (sp(s[p]) || s[p] == b',') {
            p += 1;
        }
        if s.get(p) != Some(&b'(') {
            break;
        }
        p += 1;
        while p < s.len() && (sp(s[p]) || s[p] == b'?' || s[p] == b',') {
            p += 1;
        }
        if s.get(p) != Some(&b')') {
            break;
        }
        k = p + 1;
        count += 1;
    }
    (count > 0).then_some(k)
}

/// `s/\b(in|values?)(?:[\s,]*\([\s?,]*\))+/$1(?+)/gx`
pub(crate) fn in_values_lists(buf: &mut Vec<u8>) {
    if !buf.contains(&b'(') {
        return;
    }
    let mut p = Pass::new(buf);
    let n = p.n;
    let mut i = 0;
    let mut copied = 0;
    while i < n {
        let s = p.src();
        let c = s[i];
        if (c == b'i' || c == b'v') && boundary_before(s, i) {
            let kw_end = if starts(s, i, b"in") {
                Some(i + 2)
            } else if starts(s, i, b"values") {
                Some(i + 6)
            } else if starts(s, i, b"value") {
                Some(i + 5)
            } else {
                None
            };
            if let Some(k) = kw_end
                && let Some(e) = list_groups(s, k)
            {
                p.copy(copied, k);
                p.push(b"(?+)");
                i = e;
                copied = e;
                continue;
            }
        }
        i += 1;
    }
    p.copy(copied, n);
    p.finish();
}

/// `s/\b(select\s.*?)(?:(\sunion(?:\sall)?)\s\1)+/$1 \/*repeat$2*\//xg`
///
/// Shared with the default mode, which folds repeated UNIONs the same way. `$1` can only end
/// right before a whitespace byte followed by `union`, so only those ends are tried, at most
/// `max_tries` per `select` (`usize::MAX` for pt's exact behaviour; the default mode bounds the
/// work on long chains of distinct UNIONs, where pt itself goes quadratic).
pub(crate) fn union_fold(buf: &mut Vec<u8>, max_tries: usize) {
    let finder = memchr::memmem::Finder::new(b"union");
    if finder.find(buf).is_none() {
        return;
    }
    let mut p = Pass::new(buf);
    let n = p.n;
    let mut i = 0;
    let mut copied = 0;
    // (searched from, first `union` found there), (searched from, first newline or the end)
    let mut cache: Option<(usize, Option<usize>)> = None;
    let mut nl_cache: Option<(usize, usize)> = None;
    while i < n {
        let s = p.src();
        if s[i] == b's'
            && starts(s, i, b"select")
            && boundary_before(s, i)
            && i + 6 < n
            && sp(s[i + 6])
        {
            let base = i + 7;
            // `.*?` does not cross a newline (cached: `base` only grows).
            if nl_cache.is_none_or(|(from, hit)| from > base || hit < base) {
                nl_cache = Some((
                    base,
                    memchr::memchr(b'\n', &s[base..]).map_or(n, |k| base + k),
                ));
            }
            let last = nl_cache.map_or(n, |(_, hit)| hit);
            let mut found = None;
            let mut search = base + 1;
            let mut tries = 0;
            while search < n {
                // The first `union` at or after `search`; the first lookup per `select` reuses
                // the previous one while it is still ahead (keeps `select select ...` linear).
                let k = match cache {
                    Some((from, hit)) if from <= search && hit.is_none_or(|u| u >= search) => {
                        hit.map(|u| u - search)
                    }
                    _ => {
                        let hit = finder.find(&s[search..]).map(|k| search + k);
                        if tries == 0 {
                            cache = Some((search, hit));
                        }
                        hit.map(|u| u - search)
                    }
                };
                let Some(k) = k else {
                    break;
                };
                let end1 = search + k - 1;
                if end1 > last {
                    break;
                }
                if sp(s[end1]) {
                    if let Some(m) = union_reps(s, i, end1) {
                        found = Some((end1, m));
                        break;
                    }
                    tries += 1;
                    if tries >= max_tries {
                        break;
                    }
                }
                search = search + k + 1;
            }
            if let Some((end1, (end, u_start, u_end))) = found {
                p.copy(copied, end1);
                p.push(b" /*repeat");
                p.copy(u_start, u_end);
                p.push(b"*/");
                i = end;
                copied = end;
                continue;
            }
        }
        i += 1;
    }
    p.copy(copied, n);
    p.finish();
}

/// With `$1 = s[start..end1]`, match `(?:(\sunion(?:\sall)?)\s\1)+` at `end1`: the match end and
/// the last `$2` range.
fn union_reps(s: &[u8], start: usize, end1: usize) -> Option<(usize, usize, usize)> {
    let d1 = &s[start..end1];
    let mut pos = end1;
    let mut last = None;
    loop {
        if !(pos < s.len() && sp(s[pos]) && starts(s, pos + 1, b"union")) {
            break;
        }
        let q = pos + 6;
        let rep = |u_end: usize| -> Option<usize> {
            (u_end < s.len() && sp(s[u_end]) && starts(s, u_end + 1, d1))
                .then_some(u_end + 1 + d1.len())
        };
        let with_all = if q < s.len() && sp(s[q]) && starts(s, q + 1, b"all") {
            rep(q + 4).map(|e| (e, q + 4))
        } else {
            None
        };
        match with_all.or_else(|| rep(q).map(|e| (e, q))) {
            Some((e, u_end)) => {
                last = Some((e, pos, u_end));
                pos = e;
            }
            None => break,
        }
    }
    last
}

/// `s/\blimit \?(?:, ?\?| offset \?)?/limit ?/` (first occurrence only)
fn limit(buf: &mut Vec<u8>) {
    let s = &buf[..];
    let Some(i) =
        (0..s.len()).find(|&i| s[i] == b'l' && starts(s, i, b"limit ?") && boundary_before(s, i))
    else {
        return;
    };
    let j = i + 7;
    let end = if starts(s, j, b", ?") {
        j + 3
    } else if starts(s, j, b",?") {
        j + 2
    } else if starts(s, j, b" offset ?") {
        j + 9
    } else {
        j
    };
    // The replacement equals the first 7 bytes: just remove the rest.
    buf.drain(j..end);
}

/// `if (m/\bORDER BY /gi) { 1 while s/\G(.+?)\s+ASC/$1/gi && pos }`: the loop body runs once
/// (the substitution resets `pos`), as one `s///g` anchored at the end of the first `order by `.
fn order_by_asc(buf: &mut Vec<u8>) {
    let s = &buf[..];
    let Some(ob) = (0..s.len())
        .find(|&i| (s[i] | 0x20) == b'o' && starts_ci(s, i, b"order by ") && boundary_before(s, i))
    else {
        return;
    };
    let mut p = Pass::new(buf);
    let n = p.n;
    let mut g = ob + 9;
    p.copy(0, g);
    'outer: while g < n {
        let s = p.src();
        // (.+?): at least one byte, none of them '\n'.
        let mut e = g + 1;
        loop {
            if s[e - 1] == b'\n' {
                break 'outer;
            }
            let mut k = e;
            while k < n && sp(s[k]) {
                k += 1;
            }
            if k > e && starts_ci(s, k, b"asc") {
                p.copy(g, e);
                g = k + 3;
                continue 'outer;
            }
            if e >= n {
                break 'outer;
            }
            e += 1;
        }
    }
    p.copy(g, n);
    p.finish();
}

#[cfg(test)]
mod tests {
    fn fp(q: &str) -> String {
        let mut v = Vec::new();
        super::fingerprint(q.as_bytes(), &mut v, true);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn basics() {
        assert_eq!(
            fp("SELECT * from foo where a = 5"),
            "select * from foo where a = ?"
        );
        assert_eq!(
            fp("select * from t where i=1 order by a, b ASC, d DESC, e asc"),
            "select * from t where i=? order by a, b, d desc, e"
        );
        assert_eq!(
            fp("select 1 union select 2 union select 4"),
            "select ? /*repeat union*/"
        );
        assert_eq!(
            fp("select * from foo limit 5 offset 10"),
            "select * from foo limit ?"
        );
        assert_eq!(fp("use `foo`"), "use ?");
        assert_eq!(fp("CALL foo(1, 2, 3)"), "call foo");
        assert_eq!(
            fp("insert into foo(a, b, c) values(2, 4, 5) , (2,4,5)"),
            "insert into foo(a, b, c) values(?+)"
        );
    }
}
