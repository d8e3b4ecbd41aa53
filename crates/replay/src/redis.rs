//! Redis specifics of a replay: credentials in place of the captured AUTH, how many replies
//! a request gets, which commands block.

use crate::capture::Request;
use crate::resp;
use proto::redis::message::{ReplyMode, ReplyState, Special};

/// The credentials the replay logs in with.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub user: Option<String>,
    pub password: Option<String>,
    /// `--credentials FILE`: each captured user's password (see [`crate::creds`]).
    pub users: std::sync::Arc<std::collections::BTreeMap<String, String>>,
}

/// A request as it is sent to the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Send {
    /// These bytes, answered by this many replies.
    Bytes(Vec<u8>, usize),
    /// Not sent (a captured AUTH without credentials to replace it).
    Dropped(&'static str),
}

fn upper(b: &[u8]) -> Vec<u8> {
    b.to_ascii_uppercase()
}

/// The command sent for a captured request.
pub fn rewrite(r: &Request, creds: &Credentials) -> Send {
    let args: Vec<&[u8]> = r.args().collect();
    let Some(name) = args.first().map(|n| upper(n)) else {
        return Send::Bytes(r.bytes.clone(), 0);
    };
    match name.as_slice() {
        b"AUTH" => match auth_args(creds) {
            Some(a) => {
                let mut all: Vec<&[u8]> = vec![b"AUTH"];
                all.extend(a.iter().map(|s| s.as_bytes()));
                Send::Bytes(resp::encode(&all), 1)
            }
            None => Send::Dropped("auth_dropped"),
        },
        b"HELLO" => Send::Bytes(hello(&args, creds), 1),
        b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE"
        | b"SUNSUBSCRIBE" => Send::Bytes(r.bytes.clone(), args.len().saturating_sub(1).max(1)),
        _ => Send::Bytes(r.bytes.clone(), 1),
    }
}

/// Appends what is sent for `r` to `out` (its captured bytes, but for AUTH, HELLO and the
/// subscriptions: see [`rewrite`]); the replies it gets, or why it is not sent. No allocation
/// for the common command.
pub fn append(r: &Request, creds: &Credentials, out: &mut Vec<u8>) -> Result<usize, &'static str> {
    let Some(name) = r.args().next() else {
        out.extend_from_slice(&r.bytes);
        return Ok(0);
    };
    let special = matches!(
        name.first(),
        Some(b'a' | b'A' | b'h' | b'H' | b'p' | b'P' | b's' | b'S' | b'u' | b'U')
    );
    if !special {
        out.extend_from_slice(&r.bytes);
        return Ok(1);
    }
    match rewrite(r, creds) {
        Send::Bytes(b, n) => {
            out.extend_from_slice(&b);
            Ok(n)
        }
        Send::Dropped(why) => Err(why),
    }
}

/// `[user] password` for AUTH, if a password is given.
pub fn auth_args(creds: &Credentials) -> Option<Vec<String>> {
    let p = creds.password.clone()?;
    Some(match &creds.user {
        Some(u) => vec![u.clone(), p],
        None => vec![p],
    })
}

/// HELLO with its captured `AUTH user pass` taken out and the given credentials put in.
fn hello(args: &[&[u8]], creds: &Credentials) -> Vec<u8> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if i > 0 && upper(a) == b"AUTH" {
            i += 3;
            continue;
        }
        out.push(a.to_vec());
        i += 1;
    }
    if let Some(p) = &creds.password {
        // HELLO AUTH needs a protocol version first.
        if out.len() == 1 {
            out.push(b"2".to_vec());
        }
        let user = creds.user.clone().unwrap_or_else(|| "default".into());
        out.insert(2.min(out.len()), p.clone().into_bytes());
        out.insert(2.min(out.len()), user.into_bytes());
        out.insert(2.min(out.len()), b"AUTH".to_vec());
    }
    let refs: Vec<&[u8]> = out.iter().map(|v| v.as_slice()).collect();
    resp::encode(&refs)
}

/// True when the request may block the connection (BLPOP and the like, XREAD ... BLOCK,
/// WAIT): its reply is waited for at most the block wait.
pub fn blocks(r: &Request) -> bool {
    let mut args = r.args();
    let Some(name) = args.next() else {
        return false;
    };
    if !matches!(name.first(), Some(b'b' | b'B' | b'w' | b'W' | b'x' | b'X')) {
        return false;
    }
    match upper(name).as_slice() {
        b"BLPOP" | b"BRPOP" | b"BRPOPLPUSH" | b"BLMOVE" | b"BLMPOP" | b"BZPOPMIN" | b"BZPOPMAX"
        | b"BZMPOP" | b"WAIT" | b"WAITAOF" => true,
        b"XREAD" | b"XREADGROUP" => args.any(|a| upper(a) == b"BLOCK"),
        _ => false,
    }
}

/// What a request does to its connection's replies, as the Redis session names it
/// (`CLIENT REPLY`, `RESET`, `MULTI`/`EXEC`/`DISCARD`): the input of
/// [`ReplyState::answered`], the rule the session follows too.
pub fn special(r: &Request) -> Special {
    let mut args = r.args();
    let Some(name) = args.next() else {
        return Special::None;
    };
    if !matches!(
        name.first(),
        Some(b'c' | b'C' | b'r' | b'R' | b'm' | b'M' | b'e' | b'E' | b'd' | b'D')
    ) {
        return Special::None;
    }
    match upper(name).as_slice() {
        b"RESET" => Special::Reset,
        b"MULTI" => Special::Multi,
        b"EXEC" => Special::Exec,
        b"DISCARD" => Special::Discard,
        b"CLIENT"
            if r.args().count() == 3
                && args
                    .next()
                    .is_some_and(|a| a.eq_ignore_ascii_case(b"REPLY")) =>
        {
            match args.next().map(upper).as_deref() {
                Some(b"ON") => Special::ClientReply(ReplyMode::On),
                Some(b"OFF") => Special::ClientReply(ReplyMode::Off),
                Some(b"SKIP") => Special::ClientReply(ReplyMode::Skip),
                _ => Special::None,
            }
        }
        _ => Special::None,
    }
}

/// A connection's reply rules on the replay's side: [`ReplyState`] and whether a MULTI is open.
#[derive(Clone, Copy, Debug, Default)]
pub struct Replies {
    state: ReplyState,
    in_multi: bool,
}

impl Replies {
    /// The replies `r` gets, given the `n` it would get with replies on.
    pub fn of(&mut self, r: &Request, n: usize) -> usize {
        let sp = special(r);
        let answered = self.state.answered(&sp, self.in_multi);
        match sp {
            Special::Multi => self.in_multi = true,
            Special::Exec | Special::Discard | Special::Reset => self.in_multi = false,
            _ => {}
        }
        if answered { n } else { 0 }
    }
}

/// The database a request selects, if it is a SELECT.
pub fn selects(r: &Request) -> Option<Vec<u8>> {
    let mut args = r.args();
    let name = args.next()?;
    name.eq_ignore_ascii_case(b"SELECT")
        .then(|| args.next().map(<[u8]>::to_vec))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::Frame;

    fn req(args: &[&[u8]]) -> Request {
        let bytes = resp::encode(args);
        let Frame::Whole(_, a) = resp::request(&bytes) else {
            panic!("encoded");
        };
        Request {
            ts_ns: 0,
            bytes,
            args: a,
            prepared_id: None,
        }
    }

    #[test]
    fn auth_is_replaced_or_dropped() {
        let r = req(&[b"AUTH", b"secret"]);
        assert_eq!(
            rewrite(&r, &Credentials::default()),
            Send::Dropped("auth_dropped")
        );
        let c = Credentials {
            user: None,
            password: Some("pw".into()),
            ..Credentials::default()
        };
        assert_eq!(
            rewrite(&r, &c),
            Send::Bytes(resp::encode(&[b"AUTH", b"pw"]), 1)
        );
        let h = req(&[b"HELLO", b"3", b"AUTH", b"u", b"old", b"SETNAME", b"n"]);
        assert_eq!(
            rewrite(&h, &Credentials::default()),
            Send::Bytes(resp::encode(&[b"HELLO", b"3", b"SETNAME", b"n"]), 1)
        );
        assert_eq!(
            rewrite(&h, &c),
            Send::Bytes(
                resp::encode(&[b"HELLO", b"3", b"AUTH", b"default", b"pw", b"SETNAME", b"n"]),
                1
            )
        );
    }

    #[test]
    fn replies_and_blocking() {
        let s = req(&[b"subscribe", b"a", b"b"]);
        assert!(matches!(
            rewrite(&s, &Credentials::default()),
            Send::Bytes(_, 2)
        ));
        assert!(blocks(&req(&[b"blpop", b"k", b"0"])));
        assert!(blocks(&req(&[
            b"XREAD", b"block", b"0", b"STREAMS", b"s", b"$"
        ])));
        assert!(!blocks(&req(&[b"XREAD", b"STREAMS", b"s", b"0"])));
        assert_eq!(selects(&req(&[b"select", b"3"])), Some(b"3".to_vec()));
    }

    /// Redis's own rules (networking.c, clientCommand and the SKIP flags in call()).
    #[test]
    fn client_reply_modes() {
        let mut m = Replies::default();
        let mut got = |args: &[&[u8]]| m.of(&req(args), 1);
        assert_eq!(got(&[b"SET", b"a", b"1"]), 1);
        assert_eq!(got(&[b"client", b"reply", b"skip"]), 0);
        assert_eq!(got(&[b"SET", b"a", b"2"]), 0);
        assert_eq!(got(&[b"GET", b"a"]), 1);
        assert_eq!(got(&[b"CLIENT", b"REPLY", b"OFF"]), 0);
        assert_eq!(got(&[b"GET", b"a"]), 0);
        assert_eq!(got(&[b"CLIENT", b"REPLY", b"SKIP"]), 0);
        assert_eq!(got(&[b"GET", b"a"]), 0);
        assert_eq!(got(&[b"CLIENT", b"REPLY", b"ON"]), 1);
        assert_eq!(got(&[b"GET", b"a"]), 1);
        assert_eq!(got(&[b"CLIENT", b"REPLY", b"OFF"]), 0);
        assert_eq!(got(&[b"RESET"]), 1);
        assert_eq!(got(&[b"GET", b"a"]), 1);
        assert_eq!(got(&[b"CLIENT", b"LIST"]), 1);
        assert_eq!(got(&[b"CLIENT", b"REPLY"]), 1); // an error reply
    }
}
