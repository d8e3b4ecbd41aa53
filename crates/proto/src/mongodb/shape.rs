//! The query shape text, written while a command document is skimmed: the members of a small
//! JSON object (`"filter":{"age":{"$gt":"?"}},"sort":{"_id":1}`) with keys in wire order and
//! values replaced as each field's [`Mode`] says. Literal values never reach it. Bounded: past
//! its cap it stops growing and says it was cut.

use std::fmt::Write as _;

use super::bson::{Act, Ctx, Scalar, ty};
use super::commands::Mode;

/// The context tag of every shape container.
pub const SHAPE: Ctx = 0x100;

/// Strings kept in the shape (field paths, distinct keys) are at most this long.
const NAME_CAP: usize = 128;

#[derive(Clone, Copy, Debug)]
struct Frame {
    arr: bool,
    mode: Mode,
    /// Where the container's text starts (its `{` or `[`).
    start: usize,
    count: u32,
    /// Arrays: every element so far was a scalar (the array then folds to `?`).
    all_scalar: bool,
}

/// The shape members of one request.
#[derive(Debug, Default)]
pub struct Shape {
    out: String,
    cap: usize,
    truncated: bool,
    stack: Vec<Frame>,
    /// The mode of the scalar the walker is about to read for us.
    pending: Option<Mode>,
}

/// Whether `s` is a field path as pipelines use them: `$name`, `$a.b`.
fn is_field_path(s: &[u8]) -> bool {
    match s {
        [b'$', first, rest @ ..] => {
            (first.is_ascii_alphabetic() || *first == b'_')
                && rest
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.'))
                && s.len() <= NAME_CAP
        }
        _ => false,
    }
}

/// Appends `s` as a JSON string (invalid UTF-8 replaced, control characters escaped).
pub fn push_json_str(out: &mut String, s: &[u8]) {
    out.push('"');
    // The usual key: printable ASCII, nothing to escape, copied in the one pass that checks it
    // (an ASCII byte is its own char); anything else starts over on the escaping path.
    let start = out.len();
    out.reserve(s.len() + 1);
    for &b in s {
        if (b' '..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(char::from(b));
        } else {
            out.truncate(start);
            push_json_escaped(out, s);
            return;
        }
    }
    out.push('"');
}

/// The rest of [`push_json_str`] for a string with bytes to escape (or not UTF-8).
fn push_json_escaped(out: &mut String, s: &[u8]) {
    for c in String::from_utf8_lossy(s).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Shape {
    pub fn new(cap: usize) -> Self {
        Shape {
            cap,
            ..Shape::default()
        }
    }

    /// Starts over as [`Shape::new`] would, keeping the text's buffer.
    pub fn reset(&mut self, cap: usize) {
        self.out.clear();
        self.stack.clear();
        self.cap = cap;
        self.truncated = false;
        self.pending = None;
    }

    /// The members written so far (no outer braces).
    pub fn members(&self) -> &str {
        &self.out
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// The shape hit its cap and was cut.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.out.capacity() + self.stack.capacity() * std::mem::size_of::<Frame>()
    }

    fn put(&mut self, s: &str) {
        if self.truncated {
            return;
        }
        if self.out.len() + s.len() > self.cap {
            self.truncated = true;
            return;
        }
        self.out.push_str(s);
    }

    /// [`Shape::put`] of `s` as a JSON string, written in place (and taken back when it
    /// does not fit).
    fn put_json_str(&mut self, s: &[u8]) {
        if self.truncated {
            return;
        }
        let start = self.out.len();
        push_json_str(&mut self.out, s);
        if self.out.len() > self.cap {
            self.out.truncate(start);
            self.truncated = true;
        }
    }

    /// Starts a top-level member `"key":`.
    fn member_key(&mut self, key: &[u8]) {
        if !self.out.is_empty() {
            self.put(",");
        }
        self.put_json_str(key);
        self.put(":");
    }

    /// A top-level member whose value is the element about to be walked (type `t`). Returns
    /// what the walker should do with it; containers get the [`SHAPE`] context.
    pub fn member(&mut self, key: &[u8], t: u8, mode: Mode) -> Act {
        self.member_key(key);
        self.value(key, t, mode)
    }

    /// A top-level member whose value is a whole document walked as a root (legacy OP_QUERY,
    /// OP_UPDATE, OP_DELETE): writes `"key":{`; the walker's root then gets [`SHAPE`].
    pub fn member_root(&mut self, key: &[u8], mode: Mode) {
        self.member_key(key);
        self.open(false, mode);
    }

    /// A member whose value is just `?` (its content is not shown).
    pub fn member_opaque(&mut self, key: &[u8]) {
        self.member_key(key);
        self.put("\"?\"");
    }

    fn open(&mut self, arr: bool, mode: Mode) {
        let start = self.out.len();
        self.put(if arr { "[" } else { "{" });
        self.stack.push(Frame {
            arr,
            mode,
            start,
            count: 0,
            all_scalar: true,
        });
    }

    /// An element inside a shape container.
    pub fn element(&mut self, key: &[u8], t: u8) -> Act {
        let Some(f) = self.stack.last_mut() else {
            return Act::Skip;
        };
        let first = f.count == 0;
        f.count += 1;
        if ty::is_container(t) {
            f.all_scalar = false;
        }
        let (arr, mode) = (f.arr, f.mode);
        if !first {
            self.put(",");
        }
        if !arr {
            self.put_json_str(key);
            self.put(":");
        }
        let mode = match (mode, key) {
            (Mode::Pipeline, b"$sort") => Mode::Keep,
            (m, _) => m,
        };
        self.value(key, t, mode)
    }

    fn value(&mut self, key: &[u8], t: u8, mode: Mode) -> Act {
        let mode = match mode {
            Mode::Update if t == ty::ARRAY => Mode::Pipeline,
            Mode::Update => Mode::Values,
            m => m,
        };
        let folds = matches!(key, b"$in" | b"$nin" | b"$all");
        match t {
            _ if mode == Mode::Opaque => {
                self.put("\"?\"");
                Act::Skip
            }
            ty::ARRAY if folds && mode != Mode::Keep => {
                self.put("\"?\"");
                Act::Skip
            }
            ty::DOCUMENT | ty::ARRAY => {
                self.open(t == ty::ARRAY, mode);
                Act::Descend(SHAPE)
            }
            ty::DOUBLE | ty::INT32 | ty::INT64 | ty::BOOL if mode == Mode::Keep => {
                self.pending = Some(mode);
                Act::Read
            }
            ty::STRING if matches!(mode, Mode::Pipeline | Mode::Name) => {
                self.pending = Some(mode);
                Act::Read
            }
            _ => {
                self.put("\"?\"");
                Act::Skip
            }
        }
    }

    /// The value of a scalar this shape asked to read.
    pub fn scalar(&mut self, v: Scalar<'_>) {
        let Some(mode) = self.pending.take() else {
            return;
        };
        match (mode, v) {
            (Mode::Keep, Scalar::Bool(b)) => self.put(if b { "true" } else { "false" }),
            (Mode::Keep, v) => match v.as_i64() {
                Some(i) => {
                    let s = i.to_string();
                    self.put(&s);
                }
                None => self.put("\"?\""),
            },
            (Mode::Pipeline, Scalar::Str { bytes, complete })
                if complete && is_field_path(bytes) =>
            {
                self.put_json_str(bytes)
            }
            (Mode::Name, Scalar::Str { bytes, complete })
                if complete && bytes.len() <= NAME_CAP =>
            {
                self.put_json_str(bytes)
            }
            _ => self.put("\"?\""),
        }
    }

    /// A shape container ended.
    pub fn leave(&mut self) {
        let Some(f) = self.stack.pop() else {
            return;
        };
        if f.arr && f.all_scalar && f.mode != Mode::Keep && !self.truncated {
            // An array of values (or an empty one) is a value.
            self.out.truncate(f.start);
            self.put("\"?\"");
        } else {
            self.put(if f.arr { "]" } else { "}" });
        }
    }

    /// Closes containers left open by a document cut short.
    pub fn close_all(&mut self) {
        while let Some(f) = self.stack.pop() {
            self.put(if f.arr { "]" } else { "}" });
        }
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::super::bson::build::Doc;
    use super::super::bson::{Visitor, Walker};
    use super::*;

    /// Walks a command document whose root elements are members in `mode`.
    struct One<'a>(&'a mut Shape, Mode);
    impl Visitor for One<'_> {
        fn element(&mut self, parent: Ctx, key: &[u8], t: u8, _: u32) -> Act {
            if parent == 0 {
                self.0.member(key, t, self.1)
            } else {
                self.0.element(key, t)
            }
        }
        fn scalar(&mut self, _: Ctx, _: &[u8], v: Scalar<'_>) {
            self.0.scalar(v)
        }
        fn leave(&mut self, ctx: Ctx) {
            if ctx == SHAPE {
                self.0.leave()
            }
        }
    }

    fn walk(mode: Mode, cmd: &Doc) -> String {
        let mut s = Shape::new(1 << 16);
        let b = cmd.bytes();
        let mut w = Walker::default();
        w.start(0, b.len() as u64);
        w.push(&b, &mut One(&mut s, mode)).unwrap();
        assert!(w.done());
        s.members().to_string()
    }

    fn shape(name: &str, mode: Mode, d: &Doc) -> String {
        walk(mode, &Doc::new().doc(name, d.clone()))
    }

    #[test]
    fn values_become_question_marks_and_operators_stay() {
        let d = Doc::new()
            .doc("age", Doc::new().i32("$gt", 30).i32("$lt", 40))
            .str("name", "bob")
            .doc("tags", Doc::new().arr_str("$in", &["a", "b", "c"]))
            .arr_i32("exact", &[1, 2])
            .arr(
                "$or",
                vec![Doc::new().i32("x", 1), Doc::new().regex("y", "^a", "i")],
            );
        assert_eq!(
            shape("filter", Mode::Values, &d),
            r#""filter":{"age":{"$gt":"?","$lt":"?"},"name":"?","tags":{"$in":"?"},"exact":"?","$or":[{"x":"?"},{"y":"?"}]}"#
        );
    }

    #[test]
    fn keep_mode_keeps_numbers_and_booleans() {
        let d = Doc::new()
            .i32("a", 1)
            .i64("b", -1)
            .f64("c", 1.0)
            .f64("d", 0.5)
            .bool("e", true)
            .str("f", "x")
            .doc("score", Doc::new().str("$meta", "textScore"));
        assert_eq!(
            shape("sort", Mode::Keep, &d),
            r#""sort":{"a":1,"b":-1,"c":1,"d":"?","e":true,"f":"?","score":{"$meta":"?"}}"#
        );
    }

    #[test]
    fn pipelines_keep_field_paths_and_sort_stages() {
        let p = vec![
            Doc::new().doc("$match", Doc::new().str("status", "A")),
            Doc::new().doc(
                "$group",
                Doc::new()
                    .str("_id", "$cust_id")
                    .doc("total", Doc::new().str("$sum", "$amount")),
            ),
            Doc::new().doc("$sort", Doc::new().i32("total", -1)),
            Doc::new().i32("$limit", 10),
            Doc::new().doc("$set", Doc::new().str("x", "$5 off")),
        ];
        assert_eq!(
            walk(Mode::Pipeline, &Doc::new().arr("pipeline", p)),
            r#""pipeline":[{"$match":{"status":"?"}},{"$group":{"_id":"$cust_id","total":{"$sum":"$amount"}}},{"$sort":{"total":-1}},{"$limit":"?"},{"$set":{"x":"?"}}]"#
        );
    }

    #[test]
    fn keys_are_escaped_and_the_cap_holds() {
        let d = Doc::new().i32("we\"ird\n", 1);
        assert_eq!(shape("q", Mode::Values, &d), r#""q":{"we\"ird\u000a":"?"}"#);
        let mut s = Shape::new(10);
        s.member_root(b"filter", Mode::Values);
        s.element(b"abcdefgh", ty::INT32);
        assert!(s.truncated());
        assert!(s.members().len() <= 10);
        s.close_all();
    }

    #[test]
    fn distinct_key_is_kept_but_not_long_or_cut_strings() {
        let mut s = Shape::new(1000);
        assert_eq!(s.member(b"key", ty::STRING, Mode::Name), Act::Read);
        s.scalar(Scalar::Str {
            bytes: b"address.city",
            complete: true,
        });
        assert_eq!(s.member(b"limit", ty::INT32, Mode::Opaque), Act::Skip);
        assert_eq!(s.member(b"other", ty::STRING, Mode::Name), Act::Read);
        s.scalar(Scalar::Str {
            bytes: b"x",
            complete: false,
        });
        assert_eq!(
            s.members(),
            r#""key":"address.city","limit":"?","other":"?""#
        );
    }
}
