//! SCRAM-SHA-256 (RFC 5802, RFC 7677), the client side, as PostgreSQL's SASL login uses it
//! (no channel binding: `n,,`), and SCRAM-SHA-1 for MongoDB's older users ([`Mech`]). Built on
//! RustCrypto's `sha2`, `sha1`, `hmac` and `pbkdf2`. A SCRAM-SHA-256 password is prepared by
//! SASLprep (RFC 4013, the `stringprep` crate), as PostgreSQL and MongoDB servers prepare it
//! when they store the user's keys, so a non-ASCII password logs in as the database's own
//! clients do.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;
type HmacSha1 = Hmac<Sha1>;

/// Most PBKDF2 iterations accepted from a server (PostgreSQL's default is 4096).
const MAX_ITERATIONS: u32 = 10_000_000;

/// The mechanism name.
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// The hash a SCRAM exchange is built on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mech {
    Sha1,
    Sha256,
}

impl Mech {
    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Mech::Sha1 => "SCRAM-SHA-1",
            Mech::Sha256 => MECHANISM,
        }
    }

    /// The mechanism a SASL name names (case-insensitive).
    pub fn from_name(name: &str) -> Option<Mech> {
        [Mech::Sha1, Mech::Sha256]
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }

    fn hmac(self, key: &[u8], msg: &[u8]) -> Vec<u8> {
        match self {
            Mech::Sha256 => hmac(key, msg),
            Mech::Sha1 => {
                // HMAC takes a key of any length.
                let mut m = HmacSha1::new_from_slice(key).unwrap_or_else(|_| {
                    HmacSha1::new_from_slice(&[]).unwrap_or_else(|_| unreachable!("any key"))
                });
                m.update(msg);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mech::Sha256 => Sha256::digest(data).to_vec(),
            Mech::Sha1 => Sha1::digest(data).to_vec(),
        }
    }

    fn salted(self, password: &[u8], salt: &[u8], iters: u32) -> Vec<u8> {
        match self {
            Mech::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iters, &mut out);
                out.to_vec()
            }
            Mech::Sha1 => {
                let mut out = [0u8; 20];
                pbkdf2::pbkdf2_hmac::<Sha1>(password, salt, iters, &mut out);
                out.to_vec()
            }
        }
    }
}

/// Salted passwords kept at most (the oldest goes first).
const CACHE: usize = 64;

/// (mechanism, password, salt, iterations) → the salted password.
type CacheEntry = ((Mech, Vec<u8>, Vec<u8>, u32), Vec<u8>);

/// The salted password (PBKDF2, the costly step), computed once per password, salt and
/// iteration count of a replay, as MongoDB's drivers cache it: a replay logs in on every
/// connection of every session copy. The lock is held while computing, so concurrent logins
/// of one user compute it once.
fn salted_cached(m: Mech, password: &[u8], salt: &[u8], iters: u32) -> Vec<u8> {
    static SALTED: std::sync::Mutex<Vec<CacheEntry>> = std::sync::Mutex::new(Vec::new());
    let mut c = SALTED.lock().unwrap_or_else(|e| e.into_inner());
    let hit = c.iter().find(|((cm, p, s, i), _)| {
        *cm == m && p.as_slice() == password && s.as_slice() == salt && *i == iters
    });
    if let Some((_, v)) = hit {
        return v.clone();
    }
    let v = m.salted(password, salt, iters);
    if c.len() >= CACHE {
        c.remove(0);
    }
    c.push(((m, password.to_vec(), salt.to_vec(), iters), v.clone()));
    v
}

/// The password as mechanism `mech` hashes it. SCRAM-SHA-256: SASLprep'd, or as given when
/// SASLprep refuses it (prohibited or unassigned characters), as libpq and PostgreSQL's
/// verifier do. SCRAM-SHA-1 (MongoDB's) gets a hex digest, which is ASCII.
fn prepared(mech: Mech, password: &str) -> Vec<u8> {
    match mech {
        Mech::Sha256 => stringprep::saslprep(password)
            .map_or_else(|_| password.as_bytes().to_vec(), |p| p.as_bytes().to_vec()),
        Mech::Sha1 => password.as_bytes().to_vec(),
    }
}

/// One SCRAM exchange.
pub struct Scram {
    mech: Mech,
    password: Vec<u8>,
    client_first_bare: String,
    nonce: String,
    /// After the server's first message: the server signature expected in its final one.
    expected: Option<Vec<u8>>,
}

fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut m = HmacSha256::new_from_slice(key).unwrap_or_else(|_| {
        HmacSha256::new_from_slice(&[]).unwrap_or_else(|_| unreachable!("HMAC key of any size"))
    });
    m.update(msg);
    m.finalize().into_bytes().to_vec()
}

impl Scram {
    /// An exchange for `user` (PostgreSQL ignores it: empty) with a random client nonce.
    pub fn new(user: &str, password: &str) -> Result<Scram, String> {
        Scram::new_mech(Mech::Sha256, user, password)
    }

    /// An exchange of mechanism `mech` with a random client nonce (`password` as the
    /// mechanism takes it: MongoDB's SCRAM-SHA-1 wants its digest of the password).
    pub fn new_mech(mech: Mech, user: &str, password: &str) -> Result<Scram, String> {
        let mut raw = [0u8; 18];
        getrandom::fill(&mut raw).map_err(|e| format!("no random nonce: {e}"))?;
        Ok(Scram::with_nonce_mech(
            mech,
            user,
            password,
            &B64.encode(raw),
        ))
    }

    /// An exchange with a given nonce (tests).
    pub fn with_nonce(user: &str, password: &str, nonce: &str) -> Scram {
        Scram::with_nonce_mech(Mech::Sha256, user, password, nonce)
    }

    /// An exchange of mechanism `mech` with a given nonce (tests).
    pub fn with_nonce_mech(mech: Mech, user: &str, password: &str, nonce: &str) -> Scram {
        let user = user.replace('=', "=3D").replace(',', "=2C");
        Scram {
            mech,
            password: prepared(mech, password),
            client_first_bare: format!("n={user},r={nonce}"),
            nonce: nonce.to_string(),
            expected: None,
        }
    }

    /// The client-first message.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// The client-final message answering the server-first message `server_first`.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<String, String> {
        let sf = std::str::from_utf8(server_first).map_err(|_| "SCRAM: server-first not UTF-8")?;
        let (mut r, mut s, mut i) = (None, None, None);
        for part in sf.split(',') {
            match part.split_at_checked(2) {
                Some(("r=", v)) => r = Some(v),
                Some(("s=", v)) => s = Some(v),
                Some(("i=", v)) => i = Some(v),
                _ => {}
            }
        }
        let (Some(r), Some(s), Some(i)) = (r, s, i) else {
            return Err("SCRAM: malformed server-first message".into());
        };
        if !r.starts_with(&self.nonce) || r.len() == self.nonce.len() {
            return Err("SCRAM: the server's nonce does not extend ours".into());
        }
        let salt = B64.decode(s).map_err(|_| "SCRAM: salt not base64")?;
        let iters: u32 = i.parse().map_err(|_| "SCRAM: bad iteration count")?;
        if !(1..=MAX_ITERATIONS).contains(&iters) {
            return Err(format!("SCRAM: iteration count {iters} out of range"));
        }
        let m = self.mech;
        let salted = salted_cached(m, &self.password, &salt, iters);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c=biws,r={r}");
        let auth = format!("{},{sf},{without_proof}", self.client_first_bare);
        let sig = m.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let server_key = m.hmac(&salted, b"Server Key");
        self.expected = Some(m.hmac(&server_key, auth.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server-final message (`v=` the server signature).
    pub fn verify(&self, server_final: &[u8]) -> Result<(), String> {
        let v = std::str::from_utf8(server_final)
            .ok()
            .and_then(|s| s.strip_prefix("v="))
            .and_then(|v| B64.decode(v.trim_end_matches('\0')).ok());
        match (v, &self.expected) {
            (Some(v), Some(e)) if &v == e => Ok(()),
            _ => {
                Err("SCRAM: the server's signature does not match (not the server we think)".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 7677, section 3.
    #[test]
    fn rfc7677_vector() {
        let mut s = Scram::with_nonce("user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(s.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let f = s
            .client_final(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                  s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            )
            .unwrap();
        assert_eq!(
            f,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert!(
            s.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .is_ok()
        );
        assert!(s.verify(b"v=AAAA").is_err());
    }

    /// The proof of `password` against the RFC 7677 server-first message.
    fn proof(mech: Mech, password: &str) -> String {
        let mut s = Scram::with_nonce_mech(mech, "user", password, "rOprNGfwEbeRWgbNEkqO");
        s.client_final(
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        )
        .unwrap()
    }

    /// RFC 4013's examples: a soft hyphen maps to nothing, a non-ASCII space to a space, a
    /// compatibility character to its NFKC form; prohibited characters leave the password as
    /// given. SCRAM-SHA-1 takes its (ASCII) digest untouched.
    #[test]
    fn sha256_passwords_are_saslprepped() {
        let m = Mech::Sha256;
        assert_eq!(proof(m, "pen\u{AD}cil"), proof(m, "pencil"));
        assert_eq!(proof(m, "pen\u{A0}cil"), proof(m, "pen cil"));
        assert_eq!(proof(m, "pw\u{2168}"), proof(m, "pwIX"));
        assert_eq!(prepared(m, "pw\u{2168}"), b"pwIX");
        assert_eq!(prepared(m, "a\u{7}b"), b"a\x07b"); // prohibited: as given
        assert_eq!(
            prepared(Mech::Sha1, "pen\u{AD}cil"),
            "pen\u{AD}cil".as_bytes()
        );
    }

    #[test]
    fn refuses_bad_servers() {
        let mut s = Scram::with_nonce("", "pw", "abc");
        assert!(s.client_final(b"r=xyz1,s=AAAA,i=4096").is_err()); // not our nonce
        assert!(s.client_final(b"r=abc,s=AAAA,i=4096").is_err()); // not extended
        assert!(s.client_final(b"r=abcd,s=AAAA,i=0").is_err());
        assert!(s.client_final(b"r=abcd,s=!!,i=1").is_err());
        assert!(s.verify(b"v=").is_err()); // no exchange yet
        assert!(Scram::new("", "pw").is_ok());
    }

    proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            let mut s = Scram::with_nonce("", "pw", "n");
            let _ = s.client_final(&b);
            let _ = s.verify(&b);
        }
    }
}
