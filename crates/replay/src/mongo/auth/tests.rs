//! Tests of the MongoDB login: MongoDB's published SCRAM-SHA-1 vector, the captured login's
//! user and database, and whole conversations against a server simulated here (its proof
//! check written from RFC 5802 with RustCrypto directly, not with [`crate::scram`]).

use super::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use proto::mongodb::wire::put_message;
use sha2::Sha256;

fn op_msg(d: &Doc) -> Vec<u8> {
    let mut body = 0u32.to_le_bytes().to_vec();
    body.push(0);
    body.extend(d.bytes());
    let mut m = Vec::new();
    put_message(&mut m, 7, 0, op::MSG, &body);
    m
}

/// The MongoDB authentication specification's SCRAM-SHA-1 conversation (user `user`,
/// password `pencil`): the password is MongoDB's digest of it.
#[test]
fn mongodb_scram_sha1_vector() {
    let pw = mech_password(Mech::Sha1, "user", "pencil");
    assert_eq!(pw, "1c33006ec1ffd90f9cadcbcc0e118200");
    let mut s = Scram::with_nonce_mech(Mech::Sha1, "user", &pw, "fyko+d2lbbFgONRv9qkxdawL");
    assert_eq!(s.client_first(), "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL");
    let f = s
        .client_final(
            b"r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,\
              s=rQ9ZY3MntBeuP3E1TDVC4w==,i=10000",
        )
        .unwrap();
    assert_eq!(
        f,
        "c=biws,r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,\
         p=MC2T8BvbmWRckDw8oWl5IVghwCY="
    );
    assert!(s.verify(b"v=UMWeI25JD1yNYZRMpZ4VHvhZ9e0=").is_ok());
    assert!(s.verify(b"v=UMWeI25JD1yNYZRMpZ4VHvhZ9e1=").is_err());
    assert_eq!(mech_password(Mech::Sha256, "user", "pencil"), "pencil");
}

#[test]
fn captured_login() {
    let start = Doc::new()
        .i32("saslStart", 1)
        .str("mechanism", "SCRAM-SHA-1")
        .bin("payload", b"n,,n=a=2Cb=3Dc,r=xyz")
        .str("$db", "shop");
    let ping = op_msg(&Doc::new().i32("ping", 1).str("$db", "x"));
    let c = captured([ping.as_slice(), &op_msg(&start)].into_iter());
    assert_eq!(
        c,
        Captured {
            user: Some("a,b=c".into()),
            db: Some("shop".into()),
            mech: Some(Way::Scram(Mech::Sha1)),
        }
    );
    // pymongo's handshake: hello with speculativeAuthenticate.
    let hello = Doc::new().i32("hello", 1).doc(
        "speculativeAuthenticate",
        Doc::new()
            .i32("saslStart", 1)
            .str("mechanism", "SCRAM-SHA-256")
            .bin("payload", b"n,,n=app,r=q")
            .str("db", "admin"),
    );
    let c = captured([op_msg(&hello.str("$db", "admin")).as_slice()].into_iter());
    assert_eq!(c.user.as_deref(), Some("app"));
    assert_eq!(c.mech, Some(Way::Scram(Mech::Sha256)));
    // Legacy OP_QUERY on db.$cmd.
    let mut q = 0u32.to_le_bytes().to_vec();
    q.extend_from_slice(b"old.$cmd\0");
    q.extend_from_slice(&[0; 8]);
    q.extend(start.clone().bytes());
    let mut m = Vec::new();
    put_message(&mut m, 1, 0, op::QUERY, &q);
    let c = captured([m.as_slice()].into_iter());
    assert_eq!(
        (c.user.as_deref(), c.db.as_deref()),
        (Some("a,b=c"), Some("old"))
    );
    // No login, or a saslStart without a usable payload.
    assert_eq!(captured([ping.as_slice()].into_iter()), Captured::default());
    let bare = op_msg(&Doc::new().i32("saslStart", 1).str("$db", "x"));
    assert_eq!(captured([bare.as_slice()].into_iter()), Captured::default());
    assert_eq!(scram_user(b"n,,r=x"), None);
    assert_eq!(scram_user(b"p=tls-unique,,n=u,r=x").as_deref(), Some("u"));
}

#[test]
fn whom_to_log_in_as() {
    let cap = Captured {
        user: Some("alice".into()),
        db: Some("shop".into()),
        mech: None,
    };
    let none = Credentials::default();
    assert_eq!(plan(&cap, &none), Ok(None));
    let pw_only = Credentials {
        password: Some("pw".into()),
        ..Credentials::default()
    };
    let l = plan(&cap, &pw_only).unwrap().unwrap();
    assert_eq!((l.user.as_str(), l.db.as_str()), ("alice", "shop"));
    assert!(plan(&Captured::default(), &pw_only).is_err());
    let file = Credentials {
        user: Some("dflt".into()),
        password: Some("d".into()),
        users: std::sync::Arc::new(crate::creds::parse("alice:a1").unwrap()),
    };
    let l = plan(&cap, &file).unwrap().unwrap();
    assert_eq!((l.user.as_str(), l.password.as_str()), ("alice", "a1"));
    let l = plan(&Captured::default(), &file).unwrap().unwrap();
    assert_eq!((l.user.as_str(), l.db.as_str()), ("dflt", "admin"));
    // The captured mechanism goes with the captured user only.
    let sha1 = Captured {
        mech: Some(Way::Scram(Mech::Sha1)),
        ..cap.clone()
    };
    assert_eq!(
        plan(&sha1, &file).unwrap().unwrap().mech,
        Some(Way::Scram(Mech::Sha1))
    );
    let bob = Captured {
        user: Some("bob".into()),
        ..sha1
    };
    assert_eq!(plan(&bob, &file).unwrap().unwrap().mech, None);
}

/// A server's side of SCRAM for one user, written from RFC 5802.
struct Server {
    sha1: bool,
    password: String,
    /// Whether the user has SCRAM-SHA-256 credentials.
    has_256: bool,
    first_bare: String,
    server_first: String,
    /// Whether the conversation ends on the proof (else one more empty step).
    done_early: bool,
    steps: Vec<String>,
}

fn mac(sha1: bool, key: &[u8], msg: &[u8]) -> Vec<u8> {
    if sha1 {
        let mut m = Hmac::<sha1::Sha1>::new_from_slice(key).unwrap();
        m.update(msg);
        m.finalize().into_bytes().to_vec()
    } else {
        let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
        m.update(msg);
        m.finalize().into_bytes().to_vec()
    }
}

fn reply_err(code: i32, msg: &str) -> Vec<u8> {
    Doc::new()
        .f64("ok", 0.0)
        .str("errmsg", msg)
        .i32("code", code)
        .bytes()
}

impl Server {
    fn new(password: &str, has_256: bool) -> Server {
        Server {
            sha1: false,
            password: password.into(),
            has_256,
            first_bare: String::new(),
            server_first: String::new(),
            done_early: false,
            steps: Vec::new(),
        }
    }

    fn command(&mut self, d: Vec<u8>) -> Result<Vec<u8>, String> {
        let name = doc::elements(&d).unwrap()[0].key.to_vec();
        let payload = String::from_utf8(binary(&d, b"payload").unwrap()).unwrap();
        self.steps.push(String::from_utf8(name.clone()).unwrap());
        assert_eq!(string(&d, b"$db").as_deref(), Some("admin"));
        if name == b"saslStart" {
            let mech = string(&d, b"mechanism").unwrap();
            self.sha1 = mech == "SCRAM-SHA-1";
            if !self.sha1 && !self.has_256 {
                return Ok(reply_err(334, "Unable to use SCRAM-SHA-256"));
            }
            self.first_bare = payload.strip_prefix("n,,").unwrap().to_string();
            let nonce = self.first_bare.split(",r=").nth(1).unwrap();
            self.server_first = format!("r={nonce}SRV,s={},i=4096", B64.encode(b"saltsalt"));
            return Ok(Doc::new()
                .i32("conversationId", 1)
                .bool("done", false)
                .bin("payload", self.server_first.as_bytes())
                .f64("ok", 1.0)
                .bytes());
        }
        assert_eq!(number(&d, b"conversationId"), Some(1));
        if payload.is_empty() {
            return Ok(Doc::new().bool("done", true).f64("ok", 1.0).bytes());
        }
        let (without, proof) = payload.split_once(",p=").unwrap();
        let auth = format!("{},{},{without}", self.first_bare, self.server_first);
        let pw = if self.sha1 {
            mech_password(Mech::Sha1, "app", &self.password)
        } else {
            self.password.clone()
        };
        let salted = if self.sha1 {
            let mut o = [0u8; 20];
            pbkdf2::pbkdf2_hmac::<sha1::Sha1>(pw.as_bytes(), b"saltsalt", 4096, &mut o);
            o.to_vec()
        } else {
            let mut o = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(pw.as_bytes(), b"saltsalt", 4096, &mut o);
            o.to_vec()
        };
        let client_key = mac(self.sha1, &salted, b"Client Key");
        let stored: Vec<u8> = if self.sha1 {
            sha1::Sha1::digest(&client_key).to_vec()
        } else {
            Sha256::digest(&client_key).to_vec()
        };
        let sig = mac(self.sha1, &stored, auth.as_bytes());
        let got: Vec<u8> = B64
            .decode(proof)
            .unwrap()
            .iter()
            .zip(&sig)
            .map(|(a, b)| a ^ b)
            .collect();
        let got_stored: Vec<u8> = if self.sha1 {
            sha1::Sha1::digest(&got).to_vec()
        } else {
            Sha256::digest(&got).to_vec()
        };
        if got_stored != stored {
            return Ok(reply_err(18, "Authentication failed."));
        }
        let server_key = mac(self.sha1, &salted, b"Server Key");
        let v = B64.encode(mac(self.sha1, &server_key, auth.as_bytes()));
        Ok(Doc::new()
            .i32("conversationId", 1)
            .bool("done", self.done_early)
            .bin("payload", format!("v={v}").as_bytes())
            .f64("ok", 1.0)
            .bytes())
    }
}

fn login(password: &str, mech: Option<Way>) -> Login {
    Login {
        user: "app".into(),
        password: password.into(),
        db: "admin".into(),
        mech,
    }
}

#[test]
fn conversations() {
    // SCRAM-SHA-256 with MongoDB's final empty step.
    let mut srv = Server::new("s3cret", true);
    assert_eq!(
        log_in(&login("s3cret", None), Way::Scram(Mech::Sha256), &mut |d| {
            srv.command(d)
        }),
        Ok(())
    );
    assert_eq!(srv.steps, ["saslStart", "saslContinue", "saslContinue"]);
    // Ending on the proof (skipEmptyExchange servers).
    let mut srv = Server::new("s3cret", true);
    srv.done_early = true;
    assert_eq!(
        log_in(&login("s3cret", None), Way::Scram(Mech::Sha256), &mut |d| {
            srv.command(d)
        }),
        Ok(())
    );
    assert_eq!(srv.steps.len(), 2);
    // The captured mechanism, SCRAM-SHA-1.
    let mut srv = Server::new("s3cret", true);
    assert_eq!(
        log_in(
            &login("s3cret", Some(Way::Scram(Mech::Sha1))),
            Way::Scram(Mech::Sha1),
            &mut |d| srv.command(d)
        ),
        Ok(())
    );
    assert!(srv.sha1);
    // A user with SCRAM-SHA-1 credentials only: SHA-256 is refused, SHA-1 follows.
    let mut srv = Server::new("s3cret", false);
    assert_eq!(
        log_in(&login("s3cret", None), Way::Scram(Mech::Sha256), &mut |d| {
            srv.command(d)
        }),
        Ok(())
    );
    assert_eq!(srv.steps[..2], ["saslStart", "saslStart"]);
    // A wrong password: one line with the user, database, mechanism and server's message.
    let mut srv = Server::new("s3cret", true);
    let e = log_in(&login("wrong", None), Way::Scram(Mech::Sha256), &mut |d| {
        srv.command(d)
    })
    .unwrap_err();
    assert_eq!(
        e,
        "app@admin (SCRAM-SHA-256): Authentication failed. (code 18)"
    );
    // A server whose signature is not the one the password gives.
    let mut n = 0;
    let mut liar = |d: Vec<u8>| {
        n += 1;
        let mut r = Server::new("s3cret", true).command(d.clone());
        if n == 1 {
            let p = String::from_utf8(binary(&d, b"payload").unwrap()).unwrap();
            let nonce = p.split(",r=").nth(1).unwrap().to_string();
            r = Ok(Doc::new()
                .i32("conversationId", 1)
                .bin(
                    "payload",
                    format!("r={nonce}X,s=c2FsdA==,i=4096").as_bytes(),
                )
                .f64("ok", 1.0)
                .bytes());
        } else {
            r = r.map(|_| Doc::new().bin("payload", b"v=AAAA").f64("ok", 1.0).bytes());
        }
        r
    };
    let e = log_in(&login("s3cret", None), Way::Scram(Mech::Sha256), &mut liar).unwrap_err();
    assert!(e.contains("signature does not match"), "{e}");
    // The transport failing.
    let e = log_in(
        &login("s3cret", None),
        Way::Scram(Mech::Sha256),
        &mut |_| Err("timeout".into()),
    )
    .unwrap_err();
    assert_eq!(e, "app@admin (SCRAM-SHA-256): timeout");
}

/// A captured PLAIN login names its user (never its password), and dbtap's PLAIN login is one
/// `saslStart` carrying the given password, refused with the server's message.
#[test]
fn plain_login() {
    let start = Doc::new()
        .i32("saslStart", 1)
        .str("mechanism", "PLAIN")
        .bin("payload", b"\0ldap-user\0captured-pw")
        .str("$db", "$external");
    let c = captured([op_msg(&start).as_slice()].into_iter());
    let want = Captured {
        user: Some("ldap-user".into()),
        db: Some("$external".into()),
        mech: Some(Way::Plain),
    };
    assert_eq!(c, want);
    assert_eq!(plain_user(b"authz\0who\0pw"), Some("who".into()));
    assert_eq!(plain_user(b"\0\0pw"), None);
    assert_eq!(plain_user(b"no separators"), None);
    let l = Login {
        user: "ldap-user".into(),
        password: "given-pw".into(),
        db: "$external".into(),
        mech: Some(Way::Plain),
    };
    let mut sent = Vec::new();
    let ok = Doc::new()
        .i32("conversationId", 1)
        .bool("done", true)
        .i32("ok", 1);
    let r = log_in(&l, Way::Plain, &mut |d| {
        sent.push(d);
        Ok(ok.bytes())
    });
    assert_eq!(r, Ok(()));
    assert_eq!(sent.len(), 1);
    assert_eq!(string(&sent[0], b"mechanism").as_deref(), Some("PLAIN"));
    assert_eq!(string(&sent[0], b"$db").as_deref(), Some("$external"));
    assert_eq!(
        binary(&sent[0], b"payload").unwrap(),
        b"\0ldap-user\0given-pw"
    );
    let refused = Doc::new()
        .i32("ok", 0)
        .i32("code", 18)
        .str("codeName", "AuthenticationFailed")
        .str("errmsg", "Authentication failed.");
    let e = log_in(&l, Way::Plain, &mut |_| Ok(refused.bytes())).unwrap_err();
    assert_eq!(
        e,
        "ldap-user@$external (PLAIN): Authentication failed. (code 18, AuthenticationFailed)"
    );
    let e = log_in(&l, Way::Plain, &mut |_| Ok(Doc::new().i32("ok", 1).bytes())).unwrap_err();
    assert!(e.contains("did not end the PLAIN conversation"), "{e}");
}

#[test]
fn mechanism_from_hello() {
    let l = login("pw", Some(Way::Scram(Mech::Sha1)));
    let mechs = |m: &[&str]| Doc::new().arr_str("saslSupportedMechs", m).bytes();
    assert_eq!(
        choose(&l, &mechs(&["SCRAM-SHA-1", "SCRAM-SHA-256"])),
        Way::Scram(Mech::Sha1)
    );
    assert_eq!(
        choose(&l, &mechs(&["SCRAM-SHA-256"])),
        Way::Scram(Mech::Sha256)
    );
    assert_eq!(choose(&l, &Doc::new().bytes()), Way::Scram(Mech::Sha1));
    let any = login("pw", None);
    assert_eq!(
        choose(&any, &mechs(&["SCRAM-SHA-1"])),
        Way::Scram(Mech::Sha1)
    );
    assert_eq!(choose(&any, &mechs(&["PLAIN"])), Way::Scram(Mech::Sha256));
    // A captured PLAIN login stays PLAIN whatever the list says.
    let plain = login("pw", Some(Way::Plain));
    assert_eq!(choose(&plain, &mechs(&["SCRAM-SHA-256"])), Way::Plain);
    let h = hello(Some(&any));
    assert_eq!(
        string(&h, b"saslSupportedMechs").as_deref(),
        Some("admin.app")
    );
    assert_eq!(string(&hello(None), b"saslSupportedMechs"), None);
}

#[test]
fn unauthorized_replies() {
    let r = op_msg(
        &Doc::new()
            .f64("ok", 0.0)
            .str("errmsg", "Command find requires authentication")
            .i32("code", 13)
            .str("codeName", "Unauthorized"),
    );
    assert_eq!(
        unauthorized(&r).as_deref(),
        Some("Command find requires authentication (code 13, Unauthorized)")
    );
    let ok = op_msg(&Doc::new().f64("ok", 1.0));
    assert_eq!(unauthorized(&ok), None);
    let other = op_msg(&Doc::new().f64("ok", 0.0).i32("code", 26));
    assert_eq!(unauthorized(&other), None);
}

proptest! {
    #[test]
    fn untrusted_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = captured([b.as_slice()].into_iter());
        let _ = unauthorized(&b);
        let _ = scram_user(&b);
        let mut n = 0;
        let _ = log_in(&login("pw", None), Way::Scram(Mech::Sha256), &mut |_| {
            n += 1;
            if n > 8 { return Err("stop".into()); }
            Ok(b.clone())
        });
    }

    #[test]
    fn framed_garbage_never_panics(d in proptest::collection::vec(any::<u8>(), 0..120)) {
        let mut m = Vec::new();
        put_message(&mut m, 1, 0, op::MSG, &d);
        let _ = captured([m.as_slice()].into_iter());
        let _ = unauthorized(&m);
        let mut q = Vec::new();
        put_message(&mut q, 1, 0, op::QUERY, &d);
        let _ = captured([q.as_slice()].into_iter());
    }
}
