//! MongoDB fingerprints: `<command> <db>.<collection> <shape>` with the shape's keys sorted.
//!
//! The input is the text `proto::mongodb` puts in an event: the command, the namespace and a
//! small JSON object of the query's shape whose values are already `"?"` (or kept sort
//! directions and flags), keys in the order the client sent them. [`fingerprint`] writes the
//! group's display text into `out` and returns its 64-bit group hash:
//!
//! * object keys are sorted (bytewise, recursively), so the same query with keys in another
//!   order is one group, except inside a sort (`sort`, `$sort`, `$orderby`), where the order
//!   of the keys is the order of the sort and is kept. Array elements keep their order
//!   (pipeline stages, `$or` branches). With `keep_key_order` nothing is reordered;
//! * an array under `$in`, `$nin` or `$all` folds to `"?"` (the session already does this;
//!   text from elsewhere gets the same treatment);
//! * whitespace outside strings is dropped.
//!
//! Operators are kept as sent: `{a: 5}` and `{a: {$eq: 5}}` are two groups (the server's own
//! query shapes make them one), and value types are not told apart (`{a: "x"}` and `{a: 5}`
//! are one group; the server's shapes tell `?string` from `?number`).
//!
//! Text that is not in this form (a shape cut at its size limit, say) is kept as it is from
//! the first byte that does not parse. The hash is FNV-1a over the output with a final mix:
//! stable across runs, platforms and releases.

/// Nesting deeper than this is not reordered (the rest is kept as it is).
const MAX_DEPTH: usize = 128;

/// Normalizes `text` into `out` (cleared first) and returns the group hash.
pub fn fingerprint(text: &str, keep_key_order: bool, out: &mut String) -> u64 {
    out.clear();
    let text = text.trim();
    let (head, shape) = match text.find(" {") {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    // The command and the namespace, one space between.
    let mut first = true;
    for w in head.split_ascii_whitespace() {
        if !first {
            out.push(' ');
        }
        out.push_str(w);
        first = false;
    }
    if let Some(shape) = shape {
        out.push(' ');
        let mut p = Parser {
            s: shape.as_bytes(),
            pos: 0,
        };
        match p.value(0) {
            Some(v) if p.at_end() => write(&v, keep_key_order, false, out),
            _ => out.push_str(shape),
        }
    }
    hash(out.as_bytes())
}

fn hash(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // fmix64 (MurmurHash3) so that similar texts spread over all bits.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A parsed JSON value borrowing the text.
#[derive(Debug)]
enum Node<'a> {
    /// Members: the key token (quotes included, as written) and the value.
    Obj(Vec<(&'a str, Node<'a>)>),
    Arr(Vec<Node<'a>>),
    /// A string (quotes included), number, `true`, `false` or `null`, as written.
    Atom(&'a str),
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    fn at_end(&mut self) -> bool {
        self.ws();
        self.pos == self.s.len()
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn slice(&self, from: usize) -> Option<&'a str> {
        std::str::from_utf8(self.s.get(from..self.pos)?).ok()
    }

    fn string(&mut self) -> Option<&'a str> {
        let start = self.pos;
        if self.s.get(self.pos) != Some(&b'"') {
            return None;
        }
        self.pos += 1;
        loop {
            match self.s.get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return self.slice(start);
                }
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => {
                self.pos += 1;
                let mut members = Vec::new();
                if self.eat(b'}') {
                    return Some(Node::Obj(members));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    if !self.eat(b':') {
                        return None;
                    }
                    let v = self.value(depth + 1)?;
                    members.push((k, v));
                    if self.eat(b'}') {
                        return Some(Node::Obj(members));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Some(Node::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    if self.eat(b']') {
                        return Some(Node::Arr(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'"' => self.string().map(Node::Atom),
            _ => {
                let start = self.pos;
                while self
                    .s
                    .get(self.pos)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.'))
                {
                    self.pos += 1;
                }
                if self.pos == start {
                    return None;
                }
                self.slice(start).map(Node::Atom)
            }
        }
    }
}

fn is_sort_key(k: &str) -> bool {
    matches!(k, "\"sort\"" | "\"$sort\"" | "\"$orderby\"" | "\"orderby\"")
}

fn write(n: &Node<'_>, keep: bool, in_sort: bool, out: &mut String) {
    match n {
        Node::Atom(a) => out.push_str(a),
        Node::Arr(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, keep, false, out);
            }
            out.push(']');
        }
        Node::Obj(members) => {
            let mut order: Vec<&(&str, Node<'_>)> = members.iter().collect();
            if !keep && !in_sort {
                order.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, v)) in order.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(k);
                out.push(':');
                if matches!(*k, "\"$in\"" | "\"$nin\"" | "\"$all\"") && matches!(v, Node::Arr(_)) {
                    out.push_str("\"?\"");
                } else {
                    write(v, keep, is_sort_key(k), out);
                }
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(text: &str) -> (String, u64) {
        let mut out = String::new();
        let h = fingerprint(text, false, &mut out);
        (out, h)
    }

    fn fp_keep(text: &str) -> (String, u64) {
        let mut out = String::new();
        let h = fingerprint(text, true, &mut out);
        (out, h)
    }

    #[test]
    fn keys_are_sorted_recursively_but_not_in_sorts() {
        let (a, ha) = fp(
            r#"find test.users {"sort":{"b":1,"a":-1},"filter":{"z":"?","age":{"$lt":"?","$gt":"?"}}}"#,
        );
        assert_eq!(
            a,
            r#"find test.users {"filter":{"age":{"$gt":"?","$lt":"?"},"z":"?"},"sort":{"b":1,"a":-1}}"#
        );
        let (b, hb) = fp(
            r#"find test.users {"filter":{"age":{"$gt":"?","$lt":"?"},"z":"?"},"sort":{"b":1,"a":-1}}"#,
        );
        assert_eq!((a, ha), (b, hb));
        // The order of a sort is the sort.
        let (_, hc) = fp(
            r#"find test.users {"filter":{"age":{"$gt":"?","$lt":"?"},"z":"?"},"sort":{"a":-1,"b":1}}"#,
        );
        assert_ne!(ha, hc);
    }

    #[test]
    fn keep_key_order_keeps_the_wire_order() {
        let x = r#"find d.c {"filter":{"b":"?","a":"?"}}"#;
        let y = r#"find d.c {"filter":{"a":"?","b":"?"}}"#;
        assert_eq!(fp(x).1, fp(y).1);
        assert_ne!(fp_keep(x).1, fp_keep(y).1);
        assert_eq!(fp_keep(x).0, x);
    }

    #[test]
    fn pipelines_keep_stage_order_and_sort_stage_keys() {
        let (out, _) = fp(
            r#"aggregate s.o {"pipeline":[{"$match":{"b":"?","a":"?"}},{"$sort":{"y":1,"x":-1}}]}"#,
        );
        assert_eq!(
            out,
            r#"aggregate s.o {"pipeline":[{"$match":{"a":"?","b":"?"}},{"$sort":{"y":1,"x":-1}}]}"#
        );
    }

    #[test]
    fn in_arrays_fold_even_when_given_literally() {
        let a = fp(r#"find d.c {"filter":{"a":{"$in":[1,2,3]}}}"#);
        let b = fp(r#"find d.c {"filter":{"a":{"$in":[1]}}}"#);
        let c = fp(r#"find d.c {"filter":{"a":{"$in":"?"}}}"#);
        assert_eq!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn texts_without_shape_and_broken_shapes() {
        assert_eq!(fp("ping admin").0, "ping admin");
        assert_eq!(fp("  insert   test.users ").0, "insert test.users");
        assert_eq!(fp("").0, "");
        // Cut at the size limit: kept as it is.
        let cut = r#"find d.c {"filter":{"b":"?","a""#;
        assert_eq!(fp(cut).0, cut);
        assert_eq!(
            fp(r#"find d.c {"a":1} trailing"#).0,
            r#"find d.c {"a":1} trailing"#
        );
        assert_eq!(fp(r#"x y {"a":"\"}\\"}"#).0, r#"x y {"a":"\"}\\"}"#);
        let deep = format!("find d.c {}{}", "[".repeat(500), "]".repeat(500));
        assert_eq!(fp(&deep).0, deep);
    }

    #[test]
    fn hash_is_stable() {
        // Pinned: the hash is a persisted format.
        assert_eq!(fp("ping admin").1, fp("ping admin").1);
        assert_ne!(fp("ping admin").1, fp("ping local").1);
        assert_eq!(hash(b"ping admin"), 0x61cb_1183_b682_04e0);
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::fingerprint;

    proptest! {
        #[test]
        fn never_panics_and_is_idempotent(s in "[a-z{}\\[\\]\":,?$ 1-]{0,80}", keep in any::<bool>()) {
            let mut once = String::new();
            let h1 = fingerprint(&s, keep, &mut once);
            let mut twice = String::new();
            let h2 = fingerprint(&once, keep, &mut twice);
            prop_assert_eq!(&once, &twice);
            prop_assert_eq!(h1, h2);
        }

        #[test]
        fn arbitrary_text_never_panics(s in ".{0,200}") {
            let mut out = String::new();
            fingerprint(&s, false, &mut out);
        }
    }
}

/// §6.3 vectors run end to end: commands built as BSON, read by the `proto::mongodb` session,
/// their event text fingerprinted.
#[cfg(test)]
mod vectors {
    use std::net::SocketAddr;

    use proto::mongodb::bson::build::Doc;
    use proto::mongodb::wire::{op, put_message};
    use proto::{ConnMeta, Direction, Session, SessionConfig, VecSink};

    use super::fingerprint;

    /// The event text of `find`-like command documents sent one after another.
    fn texts(cmds: Vec<Doc>) -> Vec<String> {
        let meta = ConnMeta {
            id: 1,
            client: "127.0.0.1:5000".parse::<SocketAddr>().unwrap().into(),
            server: "127.0.0.1:27017".parse::<SocketAddr>().unwrap().into(),
            saw_open: true,
            peer: None,
            after_tls: false,
        };
        let mut s = proto::mongodb::new_session(meta, SessionConfig::default());
        let mut sink = VecSink::default();
        for (i, c) in cmds.into_iter().enumerate() {
            let rid = i as i32 + 1;
            let mut body = vec![0, 0, 0, 0, 0];
            body.extend(c.bytes());
            let mut m = Vec::new();
            put_message(&mut m, rid, 0, op::MSG, &body);
            s.feed(Direction::ToServer, &m, 1, &mut sink);
            let mut r = vec![0, 0, 0, 0, 0];
            r.extend(Doc::new().f64("ok", 1.0).bytes());
            let mut m = Vec::new();
            put_message(&mut m, 1000 + rid, rid, op::MSG, &r);
            s.feed(Direction::ToClient, &m, 2, &mut sink);
        }
        s.close(3, &mut sink);
        sink.events
            .iter()
            .map(|e| e.text.as_deref().unwrap_or("").to_string())
            .collect()
    }

    fn find(filter: Doc) -> Doc {
        Doc::new()
            .str("find", "c")
            .doc("filter", filter)
            .str("$db", "test")
    }

    fn fp(text: &str) -> (String, u64) {
        let mut out = String::new();
        let h = fingerprint(text, false, &mut out);
        (out, h)
    }

    fn fps(cmds: Vec<Doc>) -> Vec<(String, u64)> {
        texts(cmds).iter().map(|t| fp(t)).collect()
    }

    /// M1: the server turns `{a: 5}` into `{a: {$eq: ?}}`; operators are kept as sent here, so
    /// the two are different groups.
    #[test]
    fn differs_from_server_shape_m1_eq_sugar() {
        let f = fps(vec![
            find(Doc::new().i32("a", 5)),
            find(Doc::new().doc("a", Doc::new().i32("$eq", 5))),
        ]);
        assert_eq!(f[0].0, r#"find test.c {"filter":{"a":"?"}}"#);
        assert_eq!(f[1].0, r#"find test.c {"filter":{"a":{"$eq":"?"}}}"#);
        assert_ne!(f[0].1, f[1].1);
    }

    /// M2: the server rewrites two fields into `$and`; here the fields stay (sorted).
    #[test]
    fn differs_from_server_shape_m2_no_implicit_and() {
        let f = fps(vec![
            find(Doc::new().i32("b", 6).i32("a", 5)),
            find(Doc::new().i32("a", 7).i32("b", 8)),
        ]);
        assert_eq!(f[0].0, r#"find test.c {"filter":{"a":"?","b":"?"}}"#);
        assert_eq!(f[0], f[1], "keys reordered: one group");
    }

    /// M3 and M16: `$in` lists of any length are one group (pt/PMM keep one `?` per element).
    #[test]
    fn m3_m16_in_lists_fold() {
        let f = fps(vec![
            find(Doc::new().doc("a", Doc::new().arr_i32("$in", &[1]))),
            find(Doc::new().doc("a", Doc::new().arr_i32("$in", &[1, 2, 3]))),
            find(Doc::new().doc("a", Doc::new().arr_str("$in", &["str", "x"]))),
        ]);
        assert_eq!(f[0].0, r#"find test.c {"filter":{"a":{"$in":"?"}}}"#);
        assert_eq!(f[0], f[1]);
        assert_eq!(f[0], f[2], "M4: element types and order do not matter");
    }

    /// M5: value types are not part of the shape here (the server says `?string`/`?number`).
    #[test]
    fn differs_from_server_shape_m5_no_type_tags() {
        let f = fps(vec![
            find(Doc::new().str("a", "card")),
            find(Doc::new().i32("a", 5)),
        ]);
        assert_eq!(f[0], f[1]);
    }

    /// M6, M7: regexes, `$exists`, `$where` are values like any other.
    #[test]
    fn m6_m7_regex_exists_where() {
        let f = fps(vec![
            find(Doc::new().regex("a", "a+", "i")),
            find(Doc::new().doc("a", Doc::new().bool("$exists", true))),
            find(Doc::new().str("$where", "f()")),
        ]);
        assert_eq!(f[0].0, r#"find test.c {"filter":{"a":"?"}}"#);
        assert_eq!(f[1].0, r#"find test.c {"filter":{"a":{"$exists":"?"}}}"#);
        assert_eq!(f[2].0, r#"find test.c {"filter":{"$where":"?"}}"#);
    }

    /// M8: the server drops a `$natural` sort from the shape (a hint); here it is a sort key.
    #[test]
    fn differs_from_server_shape_m8_natural_sort_kept() {
        let f = fps(vec![
            find(Doc::new()).doc("sort", Doc::new().i32("$natural", 1)),
            find(Doc::new()),
        ]);
        assert_eq!(f[0].0, r#"find test.c {"filter":{},"sort":{"$natural":1}}"#);
        assert_ne!(f[0].1, f[1].1);
    }

    /// M9: any value of qty, same sort: one group.
    #[test]
    fn m9_values_do_not_matter() {
        let q = |v| {
            find(Doc::new().doc("qty", Doc::new().i32("$gt", v)))
                .doc("sort", Doc::new().i32("ord_date", 1))
        };
        let f = fps(vec![q(10), q(99)]);
        assert_eq!(f[0], f[1]);
        assert_eq!(
            f[0].0,
            r#"find test.c {"filter":{"qty":{"$gt":"?"}},"sort":{"ord_date":1}}"#
        );
    }

    /// M10 (PMM): filter, sort, limit, skip.
    #[test]
    fn m10_find_with_sort_limit_skip() {
        let f = fps(vec![
            find(Doc::new().str("name", "test"))
                .doc("sort", Doc::new().i32("_id", 1))
                .i32("limit", 4)
                .i32("skip", 5),
        ]);
        assert_eq!(
            f[0].0,
            r#"find test.c {"filter":{"name":"?"},"limit":"?","skip":"?","sort":{"_id":1}}"#
        );
    }

    /// M11: findOne (limit 1, singleBatch) of three fields: keys sorted.
    #[test]
    fn m11_find_one() {
        let f = fps(vec![
            find(Doc::new().i32("time", 1).i32("id", 1).str("name", "test"))
                .i32("limit", 1)
                .bool("singleBatch", true),
        ]);
        assert_eq!(
            f[0].0,
            r#"find test.c {"filter":{"id":"?","name":"?","time":"?"},"limit":"?"}"#
        );
    }

    /// M12, M13: update and delete statements; deleteOne (limit 1) and deleteMany (limit 0)
    /// are two groups.
    #[test]
    fn m12_m13_update_and_delete() {
        let f = fps(vec![
            Doc::new()
                .str("update", "update_collection")
                .arr(
                    "updates",
                    vec![
                        Doc::new()
                            .doc("q", Doc::new().str("name", "test"))
                            .doc("u", Doc::new().doc("$set", Doc::new().str("name", "new"))),
                    ],
                )
                .str("$db", "test"),
            Doc::new()
                .str("delete", "delete_collection")
                .arr(
                    "deletes",
                    vec![
                        Doc::new()
                            .doc("q", Doc::new().str("name", "test"))
                            .i32("limit", 0),
                    ],
                )
                .str("$db", "test"),
            Doc::new()
                .str("delete", "delete_collection")
                .arr(
                    "deletes",
                    vec![
                        Doc::new()
                            .doc("q", Doc::new().str("name", "test"))
                            .i32("limit", 1),
                    ],
                )
                .str("$db", "test"),
        ]);
        assert_eq!(
            f[0].0,
            r#"update test.update_collection {"q":{"name":"?"},"u":{"$set":{"name":"?"}}}"#
        );
        assert_eq!(
            f[1].0,
            r#"delete test.delete_collection {"limit":0,"q":{"name":"?"}}"#
        );
        assert_ne!(f[1].1, f[2].1);
    }

    /// M14, M15: any insert of a collection is one group; a find by two fields shows them.
    #[test]
    fn m14_m15_insert_and_fields() {
        let f = fps(vec![
            Doc::new()
                .str("insert", "feedback")
                .arr("documents", vec![Doc::new().i32("a", 1)])
                .str("$db", "test"),
            Doc::new()
                .str("insert", "feedback")
                .arr(
                    "documents",
                    vec![Doc::new().str("b", "x"), Doc::new().i32("c", 2)],
                )
                .str("$db", "test"),
            Doc::new()
                .str("find", "feedback")
                .doc(
                    "filter",
                    Doc::new().str("tool", "Atlas").str("potId", "2c91"),
                )
                .i32("limit", 1)
                .str("$db", "test"),
        ]);
        assert_eq!(f[0].0, "insert test.feedback");
        assert_eq!(f[0], f[1]);
        assert_eq!(
            f[2].0,
            r#"find test.feedback {"filter":{"potId":"?","tool":"?"},"limit":"?"}"#
        );
    }

    #[test]
    fn reordered_keys_one_group_unless_kept() {
        let t = texts(vec![
            find(
                Doc::new()
                    .str("x", "1")
                    .doc("y", Doc::new().i32("$lt", 1).i32("$gt", 0)),
            ),
            find(
                Doc::new()
                    .doc("y", Doc::new().i32("$gt", 5).i32("$lt", 9))
                    .str("x", "2"),
            ),
        ]);
        assert_eq!(fp(&t[0]), fp(&t[1]));
        let mut a = String::new();
        let mut b = String::new();
        assert_ne!(
            fingerprint(&t[0], true, &mut a),
            fingerprint(&t[1], true, &mut b)
        );
        assert_eq!(a, t[0]);
    }
}
