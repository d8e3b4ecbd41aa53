//! MongoDB login on the replay target: the captured login of a connection (its user,
//! authentication database and mechanism, from `saslStart` or the handshake's
//! `speculativeAuthenticate`), and dbtap's own SCRAM-SHA-256 / SCRAM-SHA-1 conversation
//! (`saslStart`, `saslContinue`) or PLAIN `saslStart` (RFC 4616: LDAP users in `$external`)
//! with the password from `--credentials` or `--password`. The captured conversation itself
//! is never replayed (a SCRAM proof is for another nonce; a captured PLAIN password is not
//! used either: the password comes from the user, as for every other login).

use std::borrow::Cow;

use md5::{Digest, Md5};
use proto::mongodb::bson::build::Doc;
use proto::mongodb::bson::ty;
use proto::mongodb::wire::{HEADER_LEN, Header, op};

use super::doc;
use crate::redis::Credentials;
use crate::scram::{Mech, Scram};

/// Requests of a connection searched for its captured login (drivers log in first).
const SCAN: usize = 64;

/// MongoDB's error code for a mechanism the user has no credentials for.
const MECHANISM_UNAVAILABLE: i64 = 334;

/// MongoDB's error code for a command refused to an unauthenticated connection.
const UNAUTHORIZED: i64 = 13;

/// How a login is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// A SCRAM conversation.
    Scram(Mech),
    /// One PLAIN `saslStart` carrying the user and password (MongoDB Enterprise's LDAP
    /// users, FerretDB over PostgreSQL).
    Plain,
}

impl Way {
    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Way::Scram(m) => m.name(),
            Way::Plain => "PLAIN",
        }
    }

    /// The way a SASL mechanism name names (case-insensitive).
    pub fn from_name(name: &str) -> Option<Way> {
        if name.eq_ignore_ascii_case("PLAIN") {
            return Some(Way::Plain);
        }
        Mech::from_name(name).map(Way::Scram)
    }
}

/// What a connection's captured login named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    pub user: Option<String>,
    /// The authentication database (`$db` of saslStart, `db` of speculativeAuthenticate).
    pub db: Option<String>,
    pub mech: Option<Way>,
}

/// The login dbtap makes on a replayed connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Login {
    pub user: String,
    pub password: String,
    pub db: String,
    /// The captured mechanism (when logging in as the captured user); without one
    /// SCRAM-SHA-256. A user without credentials of the first SCRAM mechanism tried gets the
    /// other.
    pub mech: Option<Way>,
}

/// The captured login among a connection's first requests (whole messages).
pub fn captured<'a>(msgs: impl Iterator<Item = &'a [u8]>) -> Captured {
    for m in msgs.take(SCAN) {
        let Some((d, db)) = command_doc(m) else {
            continue;
        };
        let Some(first) = doc::elements(&d).and_then(|e| e.first().copied()) else {
            continue;
        };
        let name = first.key.to_ascii_lowercase();
        let found = match name.as_slice() {
            b"saslstart" => Some(from_sasl_start(&d, db)),
            b"hello" | b"ismaster" => doc::get(&d, b"speculativeAuthenticate")
                .and_then(|e| doc::sub(&d, &e))
                .filter(|s| doc::get(s, b"saslStart").is_some())
                .map(|s| {
                    let db = string(s, b"db");
                    from_sasl_start(s, db)
                }),
            b"authenticate" => Some(Captured {
                user: string(&d, b"user"),
                db,
                mech: None,
            }),
            _ => None,
        };
        if let Some(c) = found.filter(|c| c.user.is_some()) {
            return c;
        }
    }
    Captured::default()
}

fn from_sasl_start(d: &[u8], db: Option<String>) -> Captured {
    let mech = string(d, b"mechanism").and_then(|m| Way::from_name(&m));
    let payload = binary(d, b"payload");
    let user = match mech {
        Some(Way::Scram(_)) => payload.and_then(|p| scram_user(&p)),
        Some(Way::Plain) => payload.and_then(|p| plain_user(&p)),
        None => None,
    };
    Captured { user, db, mech }
}

/// The user (authentication identity) a PLAIN message names: `authzid NUL authcid NUL
/// password` (RFC 4616). The password is not kept.
pub fn plain_user(msg: &[u8]) -> Option<String> {
    let mut f = msg.splitn(3, |&b| b == 0);
    let (_, user, _) = (f.next()?, f.next()?, f.next()?);
    let user = std::str::from_utf8(user).ok()?;
    (!user.is_empty()).then(|| user.to_string())
}

/// The user a SCRAM client-first message names (`n,,n=USER,r=...`).
pub fn scram_user(client_first: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(client_first).ok()?;
    // The GS2 header (`n,,` or `y,,` or `p=...,a=...,`) is two fields.
    let mut parts = s.splitn(3, ',');
    parts.next()?;
    parts.next()?;
    let bare = parts.next()?;
    let user = bare.split(',').find_map(|f| f.strip_prefix("n="))?;
    Some(user.replace("=2C", ",").replace("=3D", "="))
}

/// A request's command document and the database it names (`$db`, or OP_QUERY's
/// `db.$cmd`), decompressing OP_COMPRESSED.
fn command_doc(msg: &[u8]) -> Option<(Cow<'_, [u8]>, Option<String>)> {
    let h = Header::parse(msg)?;
    match h.opcode {
        op::COMPRESSED => {
            let m = super::decompress(msg)?;
            (Header::parse(&m)?.opcode != op::COMPRESSED)
                .then(|| command_doc(&m).map(|(d, db)| (Cow::Owned(d.into_owned()), db)))?
        }
        op::MSG => {
            // flags, then the body section (kind 0) first: drivers send it first.
            let d = msg.get(HEADER_LEN + 4..)?;
            (d.first() == Some(&0)).then_some(())?;
            let d = d.get(1..)?;
            let d = d.get(..doc::doc_len(d)?)?;
            Some((Cow::Borrowed(d), string(d, b"$db")))
        }
        op::QUERY => {
            let rest = msg.get(HEADER_LEN + 4..)?;
            let end = rest.iter().position(|&c| c == 0)?;
            let coll = std::str::from_utf8(rest.get(..end)?).ok()?;
            let db = coll.strip_suffix(".$cmd").map(str::to_string);
            let d = rest.get(end + 9..)?;
            Some((Cow::Borrowed(d.get(..doc::doc_len(d)?)?), db))
        }
        _ => None,
    }
}

/// A string element's value.
fn string(d: &[u8], key: &[u8]) -> Option<String> {
    let e = doc::get(d, key).filter(|e| e.ty == ty::STRING)?;
    let s = d.get(e.value + 4..e.end.checked_sub(1)?)?;
    std::str::from_utf8(s).ok().map(str::to_string)
}

/// A binary element's data (or a string's bytes: some drivers send the payload so).
fn binary(d: &[u8], key: &[u8]) -> Option<Vec<u8>> {
    let e = doc::get(d, key)?;
    match e.ty {
        ty::BINARY => d.get(e.value + 5..e.end).map(<[u8]>::to_vec),
        ty::STRING => string(d, key).map(String::into_bytes),
        _ => None,
    }
}

fn boolean(d: &[u8], key: &[u8]) -> Option<bool> {
    let e = doc::get(d, key).filter(|e| e.ty == ty::BOOL)?;
    d.get(e.value).map(|&b| b != 0)
}

fn number(d: &[u8], key: &[u8]) -> Option<i64> {
    let e = doc::get(d, key)?;
    doc::int(d, &e)
}

/// The login for a connection whose captured login is `cap`: the password of its user from
/// `--credentials`, else `--user`/`--password` (the captured user when `--user` is not
/// given). `Ok(None)` without a password: the connection does not log in.
pub fn plan(cap: &Captured, creds: &Credentials) -> Result<Option<Login>, String> {
    let c = creds.for_user(cap.user.as_deref());
    let Some(password) = c.password else {
        return Ok(None);
    };
    let Some(user) = c.user.or_else(|| cap.user.clone()) else {
        return Err("--password without --user, and the capture names no user to log in as".into());
    };
    // The captured mechanism is the captured user's.
    let mech = cap.mech.filter(|_| cap.user.as_ref() == Some(&user));
    Ok(Some(Login {
        user,
        password,
        db: cap.db.clone().unwrap_or_else(|| "admin".into()),
        mech,
    }))
}

/// Sends a command document to the target and returns its reply's body document.
pub type Command<'a> = dyn FnMut(Vec<u8>) -> Result<Vec<u8>, String> + 'a;

/// dbtap's own hello on a connection: with the user whose mechanisms it asks for
/// (`saslSupportedMechs`) when it logs in.
pub fn hello(login: Option<&Login>) -> Vec<u8> {
    let d = Doc::new().i32("hello", 1);
    let d = match login {
        Some(l) => d.str("saslSupportedMechs", &format!("{}.{}", l.db, l.user)),
        None => d,
    };
    d.str("$db", "admin").bytes()
}

/// The mechanism to log in with, given the hello reply's `saslSupportedMechs`: a captured PLAIN
/// login is PLAIN (servers do not list it); else the captured SCRAM mechanism if the user has
/// it, else SCRAM-SHA-256, else SCRAM-SHA-1 (without the list, the captured one or
/// SCRAM-SHA-256).
pub fn choose(l: &Login, hello_reply: &[u8]) -> Way {
    let want = match l.mech {
        Some(Way::Plain) => return Way::Plain,
        Some(Way::Scram(m)) => m,
        None => Mech::Sha256,
    };
    let listed: Vec<Mech> = doc::get(hello_reply, b"saslSupportedMechs")
        .and_then(|e| doc::sub(hello_reply, &e))
        .and_then(|a| {
            let els = doc::elements(a)?;
            Some(
                els.iter()
                    .filter_map(|e| string(a, e.key).and_then(|m| Mech::from_name(&m)))
                    .collect(),
            )
        })
        .unwrap_or_default();
    if listed.is_empty() || listed.contains(&want) {
        return Way::Scram(want);
    }
    Way::Scram(
        [Mech::Sha256, Mech::Sha1]
            .into_iter()
            .find(|m| listed.contains(m))
            .unwrap_or(want),
    )
}

/// Logs in by `way`: a SCRAM conversation or a PLAIN `saslStart` through `cmd`. The error is
/// one line naming the user, the database, the mechanism and the server's message.
pub fn log_in(l: &Login, way: Way, cmd: &mut Command<'_>) -> Result<(), String> {
    let mech = match way {
        Way::Scram(m) => m,
        Way::Plain => return plain(l, cmd).map_err(|(_, e)| describe(l, way, &e)),
    };
    match conversation(l, mech, cmd) {
        // The user has no credentials of this mechanism: the other one.
        Err((MECHANISM_UNAVAILABLE, _)) => {
            let other = match mech {
                Mech::Sha256 => Mech::Sha1,
                Mech::Sha1 => Mech::Sha256,
            };
            conversation(l, other, cmd).map_err(|(_, e)| describe(l, Way::Scram(other), &e))
        }
        r => r.map_err(|(_, e)| describe(l, way, &e)),
    }
}

fn describe(l: &Login, way: Way, e: &str) -> String {
    format!("{}@{} ({}): {e}", l.user, l.db, way.name())
}

/// A PLAIN login: one `saslStart` with `NUL user NUL password` (no authorization identity),
/// which the server answers `done: true`.
fn plain(l: &Login, cmd: &mut Command<'_>) -> Result<(), (i64, String)> {
    let mut payload = vec![0];
    payload.extend_from_slice(l.user.as_bytes());
    payload.push(0);
    payload.extend_from_slice(l.password.as_bytes());
    let start = Doc::new()
        .i32("saslStart", 1)
        .str("mechanism", "PLAIN")
        .bin("payload", &payload)
        .i32("autoAuthorize", 1)
        .str("$db", &l.db)
        .bytes();
    let r = checked(cmd(start).map_err(|e| (0, e))?)?;
    if boolean(&r, b"done") != Some(true) {
        return Err((0, "the server did not end the PLAIN conversation".into()));
    }
    Ok(())
}

/// The password as the mechanism takes it: SCRAM-SHA-1 wants MongoDB's digest,
/// hex(MD5("user:mongo:password")).
pub fn mech_password(mech: Mech, user: &str, password: &str) -> String {
    match mech {
        Mech::Sha256 => password.to_string(),
        Mech::Sha1 => Md5::digest(format!("{user}:mongo:{password}"))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    }
}

/// One conversation; `Err((code, message))`, code 0 when the server gave none.
fn conversation(l: &Login, mech: Mech, cmd: &mut Command<'_>) -> Result<(), (i64, String)> {
    let pw = mech_password(mech, &l.user, &l.password);
    let mut s = Scram::new_mech(mech, &l.user, &pw).map_err(|e| (0, e))?;
    let start = Doc::new()
        .i32("saslStart", 1)
        .str("mechanism", mech.name())
        .bin("payload", s.client_first().as_bytes())
        .i32("autoAuthorize", 1)
        .str("$db", &l.db)
        .bytes();
    let r = checked(cmd(start).map_err(|e| (0, e))?)?;
    let id = number(&r, b"conversationId").unwrap_or(1);
    let server_first =
        binary(&r, b"payload").ok_or((0, "saslStart reply without payload".into()))?;
    let fin = s.client_final(&server_first).map_err(|e| (0, e))?;
    let mut r = checked(cmd(sasl_continue(id, fin.as_bytes(), &l.db)).map_err(|e| (0, e))?)?;
    let server_final = binary(&r, b"payload").unwrap_or_default();
    s.verify(&server_final).map_err(|e| (0, e))?;
    // MongoDB ends the conversation after one more, empty, step.
    for _ in 0..2 {
        if boolean(&r, b"done") == Some(true) {
            return Ok(());
        }
        r = checked(cmd(sasl_continue(id, b"", &l.db)).map_err(|e| (0, e))?)?;
    }
    Err((0, "the server did not end the SASL conversation".into()))
}

fn sasl_continue(id: i64, payload: &[u8], db: &str) -> Vec<u8> {
    Doc::new()
        .i32("saslContinue", 1)
        .i32("conversationId", i32::try_from(id).unwrap_or(1))
        .bin("payload", payload)
        .str("$db", db)
        .bytes()
}

/// The reply when it says `ok: 1`, else its code and message.
fn checked(r: Vec<u8>) -> Result<Vec<u8>, (i64, String)> {
    if number(&r, b"ok") == Some(1) {
        return Ok(r);
    }
    Err(failure(&r))
}

fn failure(r: &[u8]) -> (i64, String) {
    let code = number(r, b"code").unwrap_or(0);
    let msg = string(r, b"errmsg").unwrap_or_else(|| "no error message".into());
    let name = string(r, b"codeName")
        .map(|n| format!(", {n}"))
        .unwrap_or_default();
    (
        code,
        format!("{} (code {code}{name})", msg.replace('\n', " ")),
    )
}

/// The server's message when a reply (a whole OP_MSG) refuses a command for want of a
/// login (code 13, Unauthorized).
pub fn unauthorized(reply: &[u8]) -> Option<String> {
    let d = reply.get(HEADER_LEN + 4..)?;
    let d = d.strip_prefix(&[0])?;
    (Header::parse(reply)?.opcode == op::MSG
        && number(d, b"ok") == Some(0)
        && number(d, b"code") == Some(UNAUTHORIZED))
    .then(|| failure(d).1)
}

#[cfg(test)]
mod tests;
