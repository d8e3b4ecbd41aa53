//! Statements the default MySQL normalizer replaces whole: `CALL p(...)`, `USE db`, and the
//! comment Percona Toolkit puts in its own queries.

use crate::lex::{Kind, Lexer, Token};

/// `/*db.tbl:1/2*/`, the comment pt-table-checksum and friends put in their queries.
pub(super) fn toolkit_comment(c: &[u8]) -> bool {
    let Some(body) = c.strip_prefix(b"/*").and_then(|b| b.strip_suffix(b"*/")) else {
        return false;
    };
    let w = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let Some(colon) = body.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, tail) = body.split_at(colon);
    let Some(dot) = name.iter().position(|&b| b == b'.') else {
        return false;
    };
    let (a, b) = (&name[..dot], &name[dot + 1..]);
    !a.is_empty()
        && !b.is_empty()
        && a.iter().all(w)
        && b.iter().all(w)
        && tail.len() == 4
        && tail[1].is_ascii_digit()
        && tail[2] == b'/'
        && tail[3].is_ascii_digit()
}

/// Next non-comment token.
fn next_code(lx: &mut Lexer) -> Token {
    loop {
        let t = lx.next_token();
        if t.kind != Kind::Comment {
            return t;
        }
    }
}

/// Next non-comment token, and whether whitespace or a comment came before it.
fn next_code_sep(lx: &mut Lexer) -> (Token, bool, bool) {
    let (mut ws, mut comment) = (false, false);
    loop {
        let t = lx.next_token();
        ws |= t.ws_before;
        if t.kind != Kind::Comment {
            return (t, ws, comment);
        }
        comment = true;
    }
}

/// `CALL name(` or `CALL name` alone: writes `call name` (lowercased, possibly qualified) and
/// returns true; otherwise leaves `buf` as it was. Comments are read the way the general path
/// reads them, so that its output for the statements refused here is refused here too, and the
/// output is idempotent.
fn call_target(mut lx: Lexer, s: &[u8], buf: &mut Vec<u8>) -> bool {
    let (t, ws, comment) = next_code_sep(&mut lx);
    if !(ws || comment) || !matches!(t.kind, Kind::Word | Kind::QuotedIdent) {
        return false;
    }
    let mark = buf.len();
    buf.extend_from_slice(b"call ");
    buf.extend(s[t.start..t.end].iter().map(u8::to_ascii_lowercase));
    loop {
        let (t, ws, _) = next_code_sep(&mut lx);
        // `CALL p` alone (our own output for `CALL p(1)`) stays `call p`, for idempotence.
        if t.kind == Kind::End {
            return true;
        }
        if ws || t.kind != Kind::Punct {
            break;
        }
        match s[t.start] {
            b'(' => return true,
            b'.' => {
                let (t, ws, _) = next_code_sep(&mut lx);
                if ws || !matches!(t.kind, Kind::Word | Kind::QuotedIdent) {
                    break;
                }
                buf.push(b'.');
                buf.extend(s[t.start..t.end].iter().map(u8::to_ascii_lowercase));
            }
            _ => break,
        }
    }
    buf.truncate(mark);
    false
}

/// `USE db` (optionally `;`) and nothing else.
fn use_stmt(mut lx: Lexer, s: &[u8]) -> bool {
    let t = next_code(&mut lx);
    if !matches!(t.kind, Kind::Word | Kind::QuotedIdent) {
        return false;
    }
    let mut t = next_code(&mut lx);
    if t.kind == Kind::Punct && s[t.start] == b';' {
        t = next_code(&mut lx);
    }
    t.kind == Kind::End
}

/// `CALL p(...)` -> `call p`, `USE db` -> `use ?`: writes the replacement and returns true for
/// those statements; otherwise leaves `buf` as it was. `lx` is at the start of `s`.
pub(super) fn call_or_use(s: &[u8], lx: Lexer, buf: &mut Vec<u8>) -> bool {
    let lead = s
        .iter()
        .copied()
        .find(|&b| !crate::lex::is_space(b))
        .unwrap_or(0);
    let mut after = lx;
    let first = if matches!(lead | 0x20, b'c' | b'u' | b'/' | b'-' | b'#') {
        next_code(&mut after)
    } else {
        Token {
            kind: Kind::End,
            start: 0,
            end: 0,
            ws_before: false,
        }
    };
    if first.kind == Kind::Word {
        let w = &s[first.start..first.end];
        if w.eq_ignore_ascii_case(b"call") {
            if call_target(after, s, buf) {
                return true;
            }
        } else if w.eq_ignore_ascii_case(b"use") && use_stmt(after, s) {
            buf.extend_from_slice(b"use ?");
            return true;
        }
    }
    false
}
