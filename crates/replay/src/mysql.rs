//! MySQL/MariaDB specifics of a replay: the captured client bytes framed into commands (the
//! captured login skipped), dbtap's own login (`mysql_native_password`, its SHA-1 scramble
//! from the RustCrypto `sha1` crate), and prepared statement ids remapped to the target's.

use std::collections::{BTreeMap, HashMap};

use proto::mysql::message::cmd;
use proto::mysql::wire::PacketHeader;
use sha1::{Digest, Sha1};

use crate::capture::{Batch, ChunkView, Request};

/// A packet's largest payload: a longer command is split over several packets.
const MAX_PAYLOAD: u32 = 0xFF_FFFF;

fn count(m: &mut BTreeMap<String, u64>, why: &str, n: u64) {
    *m.entry(why.into()).or_default() += n;
}

/// Frames one connection's chunks into commands, one per batch (a MySQL client waits for
/// each reply). The captured login is skipped; a connection begun before the capture starts
/// at its first whole command packet; a command split over 16 MiB packets is skipped.
pub(crate) fn frame_conn<'a>(
    saw_open: &bool,
    chunks: impl Iterator<Item = ChunkView<'a>>,
    skipped_bytes: &mut BTreeMap<String, u64>,
    skipped: &mut BTreeMap<String, u64>,
) -> Vec<Batch> {
    let mut f = Framer {
        saw_open: *saw_open,
        ..Framer::default()
    };
    for c in chunks {
        match c {
            ChunkView::Client(ts, data) => f.client(ts, data, skipped_bytes, skipped),
            ChunkView::Reply(head) => f.reply(head),
            ChunkView::Gap => {
                f.pend.clear();
                f.synced = false;
                f.in_split = false;
            }
        }
    }
    if !f.pend.is_empty() {
        count(skipped_bytes, "incomplete_at_end", f.pend.len() as u64);
    }
    f.batches
}

#[derive(Default)]
struct Framer {
    saw_open: bool,
    pend: Vec<u8>,
    pend_ts: u64,
    synced: bool,
    in_split: bool,
    /// The captured login asked for the compressed protocol: nothing is framed.
    compressed: bool,
    awaiting_prepare: bool,
    batches: Vec<Batch>,
}

impl Framer {
    fn reply(&mut self, head: &[u8]) {
        if std::mem::take(&mut self.awaiting_prepare)
            && head.get(4) == Some(&0)
            && let Some(&[a, b, c, d]) = head.get(5..9)
            && let Some(r) = self.batches.last_mut().and_then(|b| b.requests.last_mut())
        {
            r.prepared_id = Some(u32::from_le_bytes([a, b, c, d]));
        }
    }

    fn client(
        &mut self,
        ts: u64,
        data: &[u8],
        skipped_bytes: &mut BTreeMap<String, u64>,
        skipped: &mut BTreeMap<String, u64>,
    ) {
        if self.pend.is_empty() {
            self.pend_ts = ts;
        }
        self.pend.extend_from_slice(data);
        while let Some(h) = PacketHeader::parse(&self.pend) {
            let total = h.len as usize + 4;
            if self.pend.len() < total {
                if !self.synced && !self.saw_open && h.len > (1 << 16) {
                    // Not a plausible command start of a connection picked up mid-stream.
                    count(skipped_bytes, "midstream_prefix", self.pend.len() as u64);
                    self.pend.clear();
                }
                return;
            }
            let packet: Vec<u8> = self.pend.drain(..total).collect();
            self.packet(h, packet, skipped_bytes, skipped);
            self.pend_ts = ts;
        }
    }

    fn packet(
        &mut self,
        h: PacketHeader,
        packet: Vec<u8>,
        skipped_bytes: &mut BTreeMap<String, u64>,
        skipped: &mut BTreeMap<String, u64>,
    ) {
        if self.compressed {
            count(skipped_bytes, "compressed_protocol", packet.len() as u64);
            return;
        }
        if !self.synced && self.saw_open && h.seq == 1 {
            // The login response: its capabilities tell whether the compressed protocol follows.
            const COMPRESS: u8 = 0x20;
            if packet.get(4).is_some_and(|c| c & COMPRESS != 0) {
                self.compressed = true;
                count(skipped, "compressed_protocol", 1);
            }
        }
        if !self.synced {
            let ok = if self.saw_open {
                h.seq == 0
            } else {
                proto::mysql::looks_like_client_command(&packet)
            };
            if !ok {
                let why = if self.saw_open {
                    "login"
                } else {
                    "midstream_prefix"
                };
                count(skipped_bytes, why, packet.len() as u64);
                return;
            }
            self.synced = true;
        }
        if self.in_split {
            self.in_split = h.len == MAX_PAYLOAD;
            count(skipped_bytes, "split_packet", packet.len() as u64);
            return;
        }
        if h.seq != 0 {
            count(skipped_bytes, "not_a_command", packet.len() as u64);
            return;
        }
        if h.len == MAX_PAYLOAD {
            self.in_split = true;
            count(skipped, "split_packet", 1);
            count(skipped_bytes, "split_packet", packet.len() as u64);
            return;
        }
        self.awaiting_prepare = packet.get(4) == Some(&cmd::STMT_PREPARE);
        self.batches.push(Batch {
            ts_ns: self.pend_ts,
            requests: vec![Request {
                ts_ns: self.pend_ts,
                bytes: packet,
                args: Vec::new(),
                prepared_id: None,
            }],
        });
    }
}

/// What to do with a captured command on the target.
#[derive(Debug, PartialEq, Eq)]
pub enum Send {
    /// Send these bytes; `reply`: the server answers.
    Bytes { bytes: Vec<u8>, reply: bool },
    /// A COM_CHANGE_USER: a new login on the connection, made with the target's salt and
    /// the named user's password (the captured scramble answers another salt).
    ChangeUser,
    /// Not sent, for this reason.
    Skip(&'static str),
}

/// Statement ids: the captured server's mapped to the target's.
#[derive(Default, Debug)]
pub struct Statements {
    ids: HashMap<u32, u32>,
}

impl Statements {
    /// A captured PREPARE (`captured` id, if known) answered by the target with `target`.
    pub fn prepared(&mut self, captured: Option<u32>, target: u32) {
        if let Some(c) = captured {
            self.ids.insert(c, target);
        }
    }

    /// The command sent for a captured one: statement ids replaced, a statement prepared
    /// before the capture skipped.
    pub fn rewrite(&mut self, r: &Request) -> Send {
        let Some(&code) = r.bytes.get(4) else {
            return Send::Skip("empty_packet");
        };
        match code {
            cmd::STMT_EXECUTE
            | cmd::STMT_CLOSE
            | cmd::STMT_RESET
            | cmd::STMT_SEND_LONG_DATA
            | cmd::STMT_FETCH
            | cmd::STMT_BULK_EXECUTE => {
                let Some(&[a, b, c, d]) = r.bytes.get(5..9) else {
                    return Send::Skip("short_packet");
                };
                let id = u32::from_le_bytes([a, b, c, d]);
                let Some(&t) = self.ids.get(&id) else {
                    return Send::Skip("statement_prepared_before_capture");
                };
                if code == cmd::STMT_CLOSE {
                    self.ids.remove(&id);
                }
                let mut bytes = r.bytes.clone();
                if let Some(s) = bytes.get_mut(5..9) {
                    s.copy_from_slice(&t.to_le_bytes());
                }
                let reply = !matches!(code, cmd::STMT_CLOSE | cmd::STMT_SEND_LONG_DATA);
                Send::Bytes { bytes, reply }
            }
            cmd::CHANGE_USER => {
                // The session's statements are gone with the old login.
                self.ids.clear();
                Send::ChangeUser
            }
            cmd::QUIT => Send::Bytes {
                bytes: r.bytes.clone(),
                reply: false,
            },
            _ => Send::Bytes {
                bytes: r.bytes.clone(),
                reply: true,
            },
        }
    }
}

/// The `mysql_native_password` scramble: SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw))).
pub fn native_scramble(password: &[u8], salt: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = Sha1::digest(password);
    let h2 = Sha1::digest(h1);
    let mut m = Sha1::new();
    m.update(salt);
    m.update(h2);
    let h3 = m.finalize();
    h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect()
}

/// MySQL 8's default authentication plugin.
pub const CACHING_SHA2: &str = "caching_sha2_password";

/// The `caching_sha2_password` scramble (its fast path): SHA256(password) XOR
/// SHA256(SHA256(SHA256(password)) . nonce); empty for an empty password.
pub fn caching_sha2_scramble(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    use sha2::Sha256;
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = Sha256::digest(password);
    let h2 = Sha256::digest(h1);
    let mut m = Sha256::new();
    m.update(h2);
    m.update(nonce);
    let h3 = m.finalize();
    h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect()
}

/// The parts of a server greeting a login needs.
#[derive(Debug, Default)]
pub struct Greeting {
    pub caps: u32,
    pub charset: u8,
    pub salt: Vec<u8>,
    pub plugin: String,
}

fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == 0) {
        Some(i) => (
            b.get(..i).unwrap_or_default(),
            b.get(i + 1..).unwrap_or_default(),
        ),
        None => (b, &[]),
    }
}

/// Parses a protocol-10 greeting payload.
pub fn parse_greeting(p: &[u8]) -> Option<Greeting> {
    if *p.first()? != 10 {
        return None;
    }
    let (_version, rest) = cstr(p.get(1..)?);
    let salt1 = rest.get(4..12)?;
    let lo = u16::from_le_bytes([*rest.get(13)?, *rest.get(14)?]);
    let charset = *rest.get(15)?;
    let hi = u16::from_le_bytes([*rest.get(18)?, *rest.get(19)?]);
    let mut salt = salt1.to_vec();
    let rest = rest.get(31..).unwrap_or_default();
    let (salt2, rest) = cstr(rest);
    salt.extend_from_slice(salt2.get(..12).unwrap_or(salt2));
    let (plugin, _) = cstr(rest);
    Some(Greeting {
        caps: u32::from(lo) | (u32::from(hi) << 16),
        charset,
        salt,
        plugin: String::from_utf8_lossy(plugin).into_owned(),
    })
}

pub const NATIVE: &str = "mysql_native_password";
const LONG_PASSWORD: u32 = 1;
const CONNECT_WITH_DB: u32 = 8;
const PROTOCOL_41: u32 = 0x200;
const TRANSACTIONS: u32 = 0x2000;
const SECURE_CONNECTION: u32 = 0x8000;
const MULTI_STATEMENTS: u32 = 0x1_0000;
const MULTI_RESULTS: u32 = 0x2_0000;
const PS_MULTI_RESULTS: u32 = 0x4_0000;
const PLUGIN_AUTH: u32 = 0x8_0000;
const DEPRECATE_EOF: u32 = 0x100_0000;

/// The user (NUL-terminated) and the length-prefixed native scramble of `password` for
/// `salt`, as a login and a COM_CHANGE_USER carry them.
fn push_user_auth(p: &mut Vec<u8>, user: &str, password: &str, salt: &[u8]) {
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    let auth = native_scramble(password.as_bytes(), salt);
    p.push(auth.len() as u8);
    p.extend_from_slice(&auth);
}

/// The HandshakeResponse41 payload: `user`, the native scramble of `password`, `db`.
pub fn login_response(g: &Greeting, user: &str, password: &str, db: Option<&[u8]>) -> Vec<u8> {
    let want = LONG_PASSWORD
        | PROTOCOL_41
        | TRANSACTIONS
        | SECURE_CONNECTION
        | MULTI_STATEMENTS
        | MULTI_RESULTS
        | PS_MULTI_RESULTS
        | PLUGIN_AUTH
        | DEPRECATE_EOF
        | if db.is_some() { CONNECT_WITH_DB } else { 0 };
    let caps = want & (g.caps | CONNECT_WITH_DB);
    let mut p = Vec::new();
    p.extend_from_slice(&caps.to_le_bytes());
    p.extend_from_slice(&(1u32 << 24).to_le_bytes());
    p.push(g.charset);
    p.extend_from_slice(&[0; 23]);
    push_user_auth(&mut p, user, password, &g.salt);
    if let Some(d) = db {
        p.extend_from_slice(d);
        p.push(0);
    }
    p.extend_from_slice(NATIVE.as_bytes());
    p.push(0);
    p
}

/// What a captured COM_CHANGE_USER asks for (its captured scramble is of no use on the
/// target: it answers another salt).
#[derive(Debug, PartialEq, Eq)]
pub struct ChangeUser {
    pub user: String,
    pub db: Option<Vec<u8>>,
    /// The character set (two bytes, little-endian), when the client sent one.
    pub charset: Option<[u8; 2]>,
}

/// Reads a COM_CHANGE_USER payload (command byte first): user, a length-prefixed auth
/// response (CLIENT_SECURE_CONNECTION, what every client of the last twenty years sends),
/// database, then optionally the character set (and a plugin name and attributes, not kept).
pub fn parse_change_user(payload: &[u8]) -> Option<ChangeUser> {
    let rest = payload.strip_prefix(&[0x11])?;
    let (user, rest) = cstr(rest);
    let n = usize::from(*rest.first()?);
    let rest = rest.get(1 + n..)?;
    let (db, rest) = cstr(rest);
    Some(ChangeUser {
        user: String::from_utf8_lossy(user).into_owned(),
        db: (!db.is_empty()).then(|| db.to_vec()),
        charset: rest.get(..2).map(|c| [c[0], c[1]]),
    })
}

/// The COM_CHANGE_USER payload dbtap sends: `user`, the native scramble of `password` with the
/// connection's `salt`, the database, the character set (else `charset`) and the plugin name.
pub fn change_user_payload(c: &ChangeUser, password: &str, salt: &[u8], charset: u8) -> Vec<u8> {
    let mut p = vec![0x11];
    push_user_auth(&mut p, &c.user, password, salt);
    p.extend_from_slice(c.db.as_deref().unwrap_or_default());
    p.push(0);
    p.extend_from_slice(&c.charset.unwrap_or([charset, 0]));
    p.extend_from_slice(NATIVE.as_bytes());
    p.push(0);
    p
}

/// `login` (a [`login_response`]) asking for TLS (CLIENT_SSL): its first 32 bytes are the
/// SSL request.
pub fn with_ssl(mut login: Vec<u8>) -> Vec<u8> {
    const CLIENT_SSL: u8 = 0x08; // 0x800, in the second byte
    if let Some(b) = login.get_mut(1) {
        *b |= CLIENT_SSL;
    }
    login
}

/// MariaDB's ed25519 authentication plugin, as the client side names it.
pub const ED25519: &str = "client_ed25519";

/// The answer to MariaDB's `client_ed25519` challenge: the Ed25519 signature of the 32-byte
/// `nonce` by the key whose expanded secret is SHA-512(password) (MariaDB's `crypto_sign`
/// with the password in place of a seed), by RustCrypto/dalek's `ed25519-dalek` hazmat API.
pub fn ed25519_signature(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    use ed25519_dalek::hazmat::{ExpandedSecretKey, raw_sign};
    use sha2::{Digest, Sha512};
    let az: [u8; 64] = Sha512::digest(password).into();
    let esk = ExpandedSecretKey::from_bytes(&az);
    let vk = ed25519_dalek::VerifyingKey::from(&esk);
    raw_sign::<Sha512>(&esk, nonce, &vk).to_bytes().to_vec()
}

/// What the server said after the login response.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthReply {
    Ok,
    Err(String),
    /// Switch to this plugin with this salt.
    Switch(String, Vec<u8>),
    /// Anything else (more data of a plugin not supported).
    Other(u8),
}

/// Reads an auth reply payload.
pub fn auth_reply(p: &[u8]) -> AuthReply {
    match p.first() {
        Some(0) => AuthReply::Ok,
        Some(0xFF) => {
            let msg = p.get(3..).unwrap_or_default();
            let msg = msg
                .strip_prefix(b"#")
                .map_or(msg, |m| m.get(5..).unwrap_or(m));
            AuthReply::Err(String::from_utf8_lossy(msg).into_owned())
        }
        Some(0xFE) => {
            let (name, rest) = cstr(p.get(1..).unwrap_or_default());
            let salt = rest.strip_suffix(&[0]).unwrap_or(rest);
            AuthReply::Switch(String::from_utf8_lossy(name).into_owned(), salt.to_vec())
        }
        Some(&b) => AuthReply::Other(b),
        None => AuthReply::Other(0),
    }
}

/// One packet: header with `seq`, then `payload`.
pub fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 4);
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes()[..3]);
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

#[cfg(test)]
mod tests;
