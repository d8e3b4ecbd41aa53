//! Tests of the Redis message layer (the request builder, replies, errors).

use super::*;

fn build(args: &[&[u8]]) -> Request {
    let mut b = Builder::new();
    b.begin(args.len() as u64);
    for (i, a) in args.iter().enumerate() {
        let k = b.keep(i as u64).min(a.len());
        b.arg(i as u64, &a[..k], a.len() as u64);
    }
    b.finish(1 << 20)
}

fn text(args: &[&[u8]]) -> String {
    build(args).text.to_string()
}

#[test]
fn texts() {
    assert_eq!(
        text(&[b"set", b"user:1234:profile", b"v"]),
        "SET user:1234:profile"
    );
    assert_eq!(text(&[b"GET", b"k"]), "GET k");
    assert_eq!(text(&[b"MGET", b"a", b"b"]), "MGET a");
    assert_eq!(text(&[b"config", b"get", b"maxmemory"]), "CONFIG GET");
    assert_eq!(text(&[b"CLIENT", b"LIST"]), "CLIENT LIST");
    assert_eq!(text(&[b"xinfo", b"stream", b"s1"]), "XINFO STREAM s1");
    assert_eq!(text(&[b"OBJECT", b"ENCODING", b"k"]), "OBJECT ENCODING k");
    assert_eq!(
        text(&[b"memory", b"usage", b"k", b"SAMPLES", b"5"]),
        "MEMORY USAGE k"
    );
    assert_eq!(text(&[b"SCRIPT", b"LOAD", b"return 1"]), "SCRIPT LOAD");
    assert_eq!(text(&[b"ping"]), "PING");
    assert_eq!(text(&[b"select", b"3"]), "SELECT");
    assert_eq!(text(&[b"AUTH", b"user", b"secret"]), "AUTH");
    assert_eq!(text(&[b"HELLO", b"3", b"AUTH", b"u", b"p"]), "HELLO");
    assert_eq!(text(&[b"EVAL", b"return 1", b"1", b"k1", b"a"]), "EVAL k1");
    assert_eq!(text(&[b"EVALSHA", b"abc", b"0", b"a"]), "EVALSHA");
    assert_eq!(text(&[b"FCALL", b"f", b"2", b"k1", b"k2"]), "FCALL k1");
    assert_eq!(
        text(&[b"BLMPOP", b"0", b"2", b"l1", b"l2", b"LEFT"]),
        "BLMPOP l1"
    );
    assert_eq!(
        text(&[
            b"XREAD", b"COUNT", b"2", b"STREAMS", b"s1", b"s2", b"0", b"0"
        ]),
        "XREAD s1"
    );
    assert_eq!(
        text(&[b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"s", b">"]),
        "XREADGROUP s"
    );
    assert_eq!(text(&[b"BITOP", b"AND", b"dest", b"a"]), "BITOP dest");
    assert_eq!(
        text(&[b"MIGRATE", b"h", b"1", b"k", b"0", b"5"]),
        "MIGRATE k"
    );
    assert_eq!(text(&[b"ft.search", b"idx", b"q"]), "FT.SEARCH");
    assert_eq!(build(&[b"ft.search", b"idx"]).command, "unknown");
    assert_eq!(build(&[b"hset", b"h", b"f", b"v"]).command, "hset");
    assert_eq!(text(&[b"SET", b"", b"v"]), "SET");
    assert_eq!(text(&[b"CONFIG", b"GET x"]), "CONFIG");
}

#[test]
fn long_keys_and_names_are_cut() {
    let key = vec![b'k'; 1000];
    let r = build(&[b"GET", &key]);
    assert_eq!(r.text.len(), 4 + KEY_KEEP);
    assert!(r.text_truncated);
    let name = vec![b'x'; 100];
    let r = build(&[&name]);
    assert_eq!(r.text.len(), NAME_KEEP);
    assert!(r.text_truncated);
    assert_eq!(r.command, "unknown");
    // A multi-byte character cut by the key limit is dropped, not replaced.
    let mut key = vec![b'a'; KEY_KEEP - 1];
    key.extend_from_slice("é".as_bytes());
    let r = build(&[b"GET", &key]);
    assert_eq!(r.text.len(), 4 + KEY_KEEP - 1);
    let mut b = Builder::new();
    b.begin(2);
    b.arg(0, b"GET", 3);
    b.arg(1, b"user:1", 6);
    let r = b.finish(6);
    assert_eq!(&*r.text, "GET us");
    assert!(r.text_truncated);
}

#[test]
fn passwords_and_values_are_never_kept() {
    let mut b = Builder::new();
    b.begin(3);
    assert_eq!(b.keep(0), NAME_KEEP);
    b.arg(0, b"SET", 3);
    assert_eq!(b.keep(1), KEY_KEEP);
    b.arg(1, b"k", 1);
    assert_eq!(b.keep(2), 0);
    b.begin(2);
    b.arg(0, b"AUTH", 4);
    assert_eq!(b.keep(1), 0);
    b.begin(3);
    b.arg(0, b"AUTH", 4);
    assert_eq!(b.keep(1), KEY_KEEP);
    b.arg(1, b"bob", 3);
    assert_eq!(b.keep(2), 0);
    assert_eq!(
        b.finish(100).special,
        Special::Auth {
            user: Arc::from("bob")
        }
    );
    b.begin(5);
    b.arg(0, b"HELLO", 5);
    b.arg(1, b"3", 1);
    b.arg(2, b"AUTH", 4);
    assert_eq!(b.keep(3), KEY_KEEP);
    b.arg(3, b"bob", 3);
    assert_eq!(b.keep(4), 0);
    assert_eq!(
        b.finish(100).special,
        Special::Hello {
            version: Some(3),
            user: Some(Arc::from("bob"))
        }
    );
}

#[test]
fn specials() {
    assert_eq!(
        build(&[b"client", b"reply", b"OFF"]).special,
        Special::ClientReply(ReplyMode::Off)
    );
    assert_eq!(
        build(&[b"CLIENT", b"REPLY", b"skip"]).special,
        Special::ClientReply(ReplyMode::Skip)
    );
    assert_eq!(build(&[b"CLIENT", b"LIST"]).special, Special::None);
    assert_eq!(
        build(&[b"SUBSCRIBE", b"a", b"b"]).special,
        Special::Subscribe {
            kind: PubKind::Channel,
            channels: 2
        }
    );
    assert_eq!(
        build(&[b"punsubscribe"]).special,
        Special::Unsubscribe {
            kind: PubKind::Pattern,
            channels: 0
        }
    );
    assert_eq!(build(&[b"SUBSCRIBE"]).special, Special::None);
    assert_eq!(
        build(&[b"select", b"2"]).special,
        Special::Select { db: Arc::from("2") }
    );
    assert_eq!(
        build(&[b"AUTH", b"pw"]).special,
        Special::Auth {
            user: Arc::from("default")
        }
    );
    assert_eq!(build(&[b"MULTI"]).special, Special::Multi);
    assert_eq!(build(&[b"psync", b"?", b"-1"]).special, Special::Sync);
}

#[test]
fn errors() {
    let e = db_error(b"WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(e.state.as_deref(), Some("WRONGTYPE"));
    assert_eq!(
        &*e.message,
        "Operation against a key holding the wrong kind of value"
    );
    let e = db_error(b"ERR unknown command 'NOPE'");
    assert_eq!(e.state.as_deref(), Some("ERR"));
    assert_eq!(e.code, 0);
    let e = db_error(b"something went wrong");
    assert_eq!(e.state, None);
    assert_eq!(&*e.message, "something went wrong");
    let e = db_error(b"MOVED 3999 127.0.0.1:6381");
    assert_eq!(e.state.as_deref(), Some("MOVED"));
    let e = db_error(b"");
    assert_eq!(e.state, None);
    let e = db_error(b"NOAUTH");
    assert_eq!(e.state.as_deref(), Some("NOAUTH"));
    assert_eq!(&*e.message, "");
}

#[test]
fn only_the_special_names_are_special() {
    // The slow match of `special` gives nothing for any other table entry, whatever
    // the arguments (`special_name` forced, as if the entry were listed).
    for c in super::super::commands::COMMANDS {
        if SPECIAL_NAMES.contains(&c.name) {
            continue;
        }
        for argc in 1..5 {
            let mut b = Builder::new();
            b.begin(argc);
            b.info = Some(c);
            b.special_name = true;
            b.has_sub = true;
            b.sub = b"reply".to_vec();
            b.arg1 = b"3".to_vec();
            b.arg2 = b"off".to_vec();
            assert_eq!(b.special(), Special::None, "{}", c.name);
        }
    }
    for n in SPECIAL_NAMES {
        assert!(lookup(n.as_bytes()).is_some(), "{n}");
    }
}

fn args_strategy() -> impl proptest::strategy::Strategy<Value = Vec<Vec<u8>>> {
    use proptest::prelude::*;
    let name = prop::sample::select(vec![
        &b"GET"[..],
        b"get",
        b"SET",
        b"client",
        b"CONFIG",
        b"select",
        b"auth",
        b"hello",
        b"subscribe",
        b"nosuch",
        b"OBJECT",
        b"EVAL",
        b"PING",
    ]);
    let arg = prop::sample::select(vec![
        &b"k1"[..],
        b"K1",
        b"reply",
        b"off",
        b"ENCODING",
        b"",
        b"3",
        b"\xff\xfe",
        b"a-very-long-key-a-very-long-key",
        &[b'k'; KEY_KEEP + 1],
    ]);
    (name, prop::collection::vec(arg, 0..4)).prop_map(|(n, a)| {
        let mut v = vec![n.to_vec()];
        v.extend(a.into_iter().map(<[u8]>::to_vec));
        v
    })
}

proptest::proptest! {
    #[test]
    fn a_builder_reused_builds_what_a_new_one_builds(
        cmds in proptest::collection::vec(args_strategy(), 1..12),
        max_text in proptest::sample::select(vec![4usize, 9, 1 << 20]),
    ) {
        let mut shared = Builder::new();
        for args in &cmds {
            let mut fresh = Builder::new();
            let mut got = Vec::new();
            for b in [&mut shared, &mut fresh] {
                b.begin(args.len() as u64);
                for (i, a) in (0u64..).zip(args) {
                    let k = b.keep(i).min(a.len());
                    b.arg(i, &a[..k], a.len() as u64);
                }
                let r = b.finish(max_text);
                got.push((r.command, r.text.to_string(), r.text_truncated, r.special, r.argc));
            }
            proptest::prop_assert_eq!(&got[0], &got[1]);
        }
    }

    #[test]
    fn a_whole_command_builds_what_its_arguments_build(
        cmds in proptest::collection::vec(args_strategy(), 1..12),
        max_text in proptest::sample::select(vec![4usize, 9, 1 << 20]),
    ) {
        // One builder takes whole commands (repeats of simple ones skip the steps per
        // argument), the other the arguments one by one, each reused across commands.
        let mut whole = Builder::new();
        let mut stepped = Builder::new();
        for args in &cmds {
            let r = whole.whole(args.len(), |i| args[i].as_slice(), max_text);
            let w = (r.command, r.text.to_string(), r.text_truncated, r.special, r.argc);
            stepped.begin(args.len() as u64);
            for (i, a) in (0u64..).zip(args) {
                let k = stepped.keep(i).min(a.len());
                stepped.arg(i, &a[..k], a.len() as u64);
            }
            let r = stepped.finish(max_text);
            let s = (r.command, r.text.to_string(), r.text_truncated, r.special, r.argc);
            proptest::prop_assert_eq!(w, s);
        }
    }
}
