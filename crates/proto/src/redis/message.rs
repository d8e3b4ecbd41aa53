//! Typed Redis requests and replies, borrowing nothing past the call: the command (name,
//! subcommand, first key) built from the arguments as they stream by, what a command does to
//! the connection (transactions, pub/sub, `CLIENT REPLY`, `HELLO`, ...), and what a reply says
//! (error prefix, pub/sub message or confirmation). Pure, no conversation state.

use std::sync::Arc;

use super::commands::{CommandInfo, KeyRule, lookup, subcommand_key};
use super::wire::{Kept, Type, Value, parse_i64};
use crate::DbError;

/// Bytes of the command name kept (longer names are not in the table and are cut in the text).
pub const NAME_KEEP: usize = 64;
/// Bytes of a subcommand kept; longer ones are left out of the text.
pub const SUB_KEEP: usize = 32;
/// Bytes of the first key kept in the text.
pub const KEY_KEEP: usize = 256;
/// Bytes of small option arguments kept (`CLIENT REPLY OFF`, `HELLO 3`, `SELECT 2`).
const OPT_KEEP: usize = 20;

/// The three pub/sub namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PubKind {
    /// SUBSCRIBE / UNSUBSCRIBE
    Channel,
    /// PSUBSCRIBE / PUNSUBSCRIBE
    Pattern,
    /// SSUBSCRIBE / SUNSUBSCRIBE
    Shard,
}

/// `CLIENT REPLY` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    Skip,
}

/// A connection's `CLIENT REPLY` state, as Redis keeps it (networking.c: clientCommand and
/// resetClient): OFF silences every reply until ON or RESET; SKIP silences the next command's;
/// OFF and SKIP are silent themselves; inside MULTI they are only queued. The session's and
/// the replay's rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyState {
    off: bool,
    skip_next: bool,
}

impl ReplyState {
    /// Takes a request that does `special`, sent inside MULTI when `in_multi`: whether the
    /// server answers it.
    pub fn answered(&mut self, special: &Special, in_multi: bool) -> bool {
        let skipped = std::mem::take(&mut self.skip_next);
        let silenced = if self.off {
            !matches!(
                special,
                Special::ClientReply(ReplyMode::On) | Special::Reset
            )
        } else {
            skipped
        };
        let self_silent = !in_multi
            && matches!(
                special,
                Special::ClientReply(ReplyMode::Off | ReplyMode::Skip)
            );
        match special {
            Special::ClientReply(ReplyMode::On) if !in_multi => self.off = false,
            Special::ClientReply(ReplyMode::Off) if !in_multi => self.off = true,
            Special::ClientReply(ReplyMode::Skip) if !in_multi && !self.off => {
                self.skip_next = true;
            }
            Special::Reset => self.off = false,
            _ => {}
        }
        !(silenced || self_silent)
    }
}

/// What a command does to the connection, beyond getting one reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Special {
    #[default]
    None,
    Multi,
    Exec,
    Discard,
    /// Leaves transactions, pub/sub and `CLIENT REPLY OFF`, back to RESP2, database 0.
    Reset,
    /// After its `+OK` the connection carries a stream of monitored commands.
    Monitor,
    /// SYNC/PSYNC: the connection becomes a replication stream.
    Sync,
    Hello {
        version: Option<u8>,
        user: Option<Arc<str>>,
    },
    Auth {
        user: Arc<str>,
    },
    Select {
        db: Arc<str>,
    },
    ClientReply(ReplyMode),
    /// One confirmation per channel.
    Subscribe {
        kind: PubKind,
        channels: u64,
    },
    /// One confirmation per channel; with no channel, one per current subscription (or one
    /// when there is none).
    Unsubscribe {
        kind: PubKind,
        channels: u64,
    },
}

/// A complete command as the session keeps it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Lower-case name from the command table, or `"unknown"`.
    pub command: &'static str,
    /// `NAME [SUBCOMMAND] [first key]`, see the module documentation.
    pub text: Arc<str>,
    pub text_truncated: bool,
    pub special: Special,
    pub argc: u64,
}

/// Builds a [`Request`] from the arguments of one command as they stream by, keeping only
/// the few bytes it needs: the name, the subcommand, the first key (at most [`KEY_KEEP`]
/// bytes) and a few option words. Never values, never passwords.
#[derive(Debug, Default)]
pub struct Builder {
    argc: u64,
    info: Option<&'static CommandInfo>,
    name: Vec<u8>,
    name_complete: bool,
    /// The subcommand, when `has_sub` (buffers are reused across commands).
    sub: Vec<u8>,
    has_sub: bool,
    rule: KeyRule,
    numkeys: Option<u64>,
    /// `After` rule: index of the keyword once found.
    keyword_at: Option<u64>,
    key: Vec<u8>,
    has_key: bool,
    key_truncated: bool,
    arg1: Vec<u8>,
    arg2: Vec<u8>,
    /// HELLO: index of the argument after `AUTH`.
    hello_user_at: Option<u64>,
    user: Option<Vec<u8>>,
    /// The text being built (reused across commands).
    text: String,
    /// The text of the previous command: a repeat shares it instead of a new allocation
    /// (pipelines repeat the same command and key over and over).
    last_text: Option<Arc<str>>,
    /// The commands whose options are read, named once per command instead of string
    /// comparisons per argument.
    kind: Kind,
    /// The last name looked up, as sent, and what the table said: pipelines repeat it.
    last_name: Vec<u8>,
    last_info: Option<&'static CommandInfo>,
    last_kind: Kind,
    /// The command is one [`Builder::special`] looks at (see [`SPECIAL_NAMES`]), and the same
    /// for the last name looked up.
    special_name: bool,
    last_special: bool,
    /// What the last text without a subcommand was built from (its key in `memo_key`): a
    /// command with the same name and key takes that text without building it again.
    memo: Option<Memo>,
    memo_key: Vec<u8>,
}

/// The command names [`Builder::special`] gives something other than [`Special::None`].
const SPECIAL_NAMES: &[&str] = &[
    "multi",
    "exec",
    "discard",
    "reset",
    "monitor",
    "sync",
    "psync",
    "hello",
    "auth",
    "select",
    "client",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
];

/// The inputs of the last text built for a command without a subcommand, and whether it was
/// cut; the text is `Builder::last_text` (one reference count to keep per command, not two).
#[derive(Debug)]
struct Memo {
    info: &'static CommandInfo,
    /// The key was in the text (set and not empty), and cut.
    keyed: bool,
    key_truncated: bool,
    max_text: usize,
    truncated: bool,
}

/// The commands [`Builder`] treats apart, from the table entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Other,
    Hello,
    Auth,
    /// SELECT or CLIENT: their first two arguments are kept as options.
    SelectOrClient,
}

impl Kind {
    fn of(info: Option<&CommandInfo>) -> Kind {
        match info.map(|i| i.name) {
            Some("hello") => Kind::Hello,
            Some("auth") => Kind::Auth,
            Some("select" | "client") => Kind::SelectOrClient,
            _ => Kind::Other,
        }
    }
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Heap bytes held.
    pub fn buffered_bytes(&self) -> usize {
        self.name.capacity()
            + self.sub.capacity()
            + self.key.capacity()
            + self.arg1.capacity()
            + self.arg2.capacity()
            + self.user.as_ref().map_or(0, Vec::capacity)
            + self.text.capacity()
            + self.last_name.capacity()
            + self.last_text.as_ref().map_or(0, |t| t.len())
            + self.memo_key.capacity()
    }

    /// A command with `argc` arguments begins.
    pub fn begin(&mut self, argc: u64) {
        self.argc = argc;
        self.info = None;
        self.kind = Kind::Other;
        self.special_name = false;
        self.name.clear();
        self.name_complete = false;
        self.has_sub = false;
        self.rule = KeyRule::None;
        self.numkeys = None;
        self.keyword_at = None;
        self.has_key = false;
        self.key_truncated = false;
        self.arg1.clear();
        self.arg2.clear();
        self.hello_user_at = None;
        self.user = None;
    }

    /// How many bytes of argument `i` to keep.
    pub fn keep(&self, i: u64) -> usize {
        if i == 0 {
            return NAME_KEEP;
        }
        let mut k = 0;
        let info = self.info;
        if info.is_some_and(|c| c.container) && i == 1 {
            k = SUB_KEEP;
        }
        match self.rule {
            KeyRule::None => {}
            KeyRule::At(at) if u64::from(at) == i => k = KEY_KEEP,
            KeyRule::At(_) => {}
            KeyRule::Numkeys { count_at, first } => {
                if u64::from(count_at) == i {
                    k = k.max(OPT_KEEP);
                } else if u64::from(first) == i && self.numkeys.is_some_and(|n| n > 0) {
                    k = KEY_KEEP;
                }
            }
            KeyRule::After { keyword, from } => match self.keyword_at {
                Some(at) if at + 1 == i => k = KEY_KEEP,
                Some(_) => {}
                None if i >= u64::from(from) => k = k.max(keyword.len()),
                None => {}
            },
        }
        if self.kind == Kind::Hello {
            if self.hello_user_at == Some(i) {
                k = KEY_KEEP;
            } else if self.hello_user_at.is_none_or(|u| i > u + 1) {
                // The version, or an option keyword (never the password after the user).
                k = k.max(OPT_KEEP);
            }
        } else if self.kind == Kind::Auth {
            if i == 1 && self.argc == 3 {
                k = KEY_KEEP;
            }
        } else if self.kind == Kind::SelectOrClient && i <= 2 {
            k = k.max(OPT_KEEP);
        }
        k
    }

    /// Argument `i` is complete: `head` is its kept first bytes, `len` its full length.
    pub fn arg(&mut self, i: u64, head: &[u8], len: u64) {
        if i == 0 {
            self.name.clear();
            self.name.extend_from_slice(head);
            self.name_complete = head.len() as u64 == len;
            self.info = if !self.name_complete {
                None
            } else if head == self.last_name.as_slice() {
                self.last_info
            } else {
                let info = lookup(head);
                self.last_name.clear();
                self.last_name.extend_from_slice(head);
                self.last_info = info;
                self.last_kind = Kind::of(info);
                self.last_special = info.is_some_and(|c| SPECIAL_NAMES.contains(&c.name));
                info
            };
            (self.kind, self.special_name) = if self.info.is_some() {
                (self.last_kind, self.last_special)
            } else {
                (Kind::Other, false)
            };
            self.rule = match self.info {
                Some(c) if !c.container => c.key,
                _ => KeyRule::None,
            };
            return;
        }
        let info = self.info;
        if let Some(c) = info.filter(|c| c.container)
            && i == 1
        {
            let plausible = head.len() as u64 == len
                && !head.is_empty()
                && head
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if plausible {
                self.sub.clear();
                self.sub.extend_from_slice(head);
                self.has_sub = true;
                self.rule = subcommand_key(c.name, head);
            }
        }
        match self.rule {
            KeyRule::None => {}
            KeyRule::At(at) => {
                if u64::from(at) == i {
                    self.set_key(head, len);
                }
            }
            KeyRule::Numkeys { count_at, first } => {
                if u64::from(count_at) == i {
                    self.numkeys = parse_i64(head)
                        .filter(|_| head.len() as u64 == len)
                        .and_then(|n| u64::try_from(n).ok());
                } else if u64::from(first) == i && self.numkeys.is_some_and(|n| n > 0) {
                    self.set_key(head, len);
                }
            }
            KeyRule::After { keyword, from } => match self.keyword_at {
                Some(at) if at + 1 == i => self.set_key(head, len),
                Some(_) => {}
                None => {
                    if i >= u64::from(from)
                        && len == keyword.len() as u64
                        && head.eq_ignore_ascii_case(keyword.as_bytes())
                    {
                        self.keyword_at = Some(i);
                    }
                }
            },
        }
        if self.kind == Kind::Hello {
            if self.hello_user_at == Some(i) {
                self.user = Some(head.to_vec());
            } else if i == 1 {
                self.arg1 = head.to_vec();
            } else if self.hello_user_at.is_none() && head.eq_ignore_ascii_case(b"auth") {
                self.hello_user_at = Some(i + 1);
            }
        } else if self.kind == Kind::Auth {
            if i == 1 && self.argc == 3 {
                self.user = Some(head.to_vec());
            }
        } else if i == 1 {
            self.arg1.clear();
            self.arg1
                .extend_from_slice(head.get(..OPT_KEEP).unwrap_or(head));
        } else if i == 2 {
            self.arg2.clear();
            self.arg2
                .extend_from_slice(head.get(..OPT_KEEP).unwrap_or(head));
        }
    }

    /// A whole command whose arguments all lie in memory, `args(i)` being argument `i`'s
    /// bytes: the request `begin`, then `keep` and `arg` for each argument, then `finish` give.
    /// A repeat of a simple command (see [`Self::simple_repeat`]) skips the steps per argument,
    /// and with the same key as the last text built, the key's copy and `finish` too.
    pub fn whole<'a>(
        &mut self,
        argc: usize,
        args: impl Fn(usize) -> &'a [u8],
        max_text: usize,
    ) -> Request {
        match self.simple_repeat(argc, &args) {
            Some(key) => {
                if let Some(r) = self.repeat_key(key, max_text) {
                    return r;
                }
                match key {
                    Some(k) => self.set_key(k.get(..KEY_KEEP).unwrap_or(k), k.len() as u64),
                    None => {
                        self.has_key = false;
                        self.key_truncated = false;
                    }
                }
            }
            None => {
                self.begin(argc as u64);
                for i in 0..argc {
                    let a = args(i);
                    let keep = self.keep(i as u64).min(a.len());
                    self.arg(i as u64, a.get(..keep).unwrap_or(a), a.len() as u64);
                }
            }
        }
        self.finish(max_text)
    }

    /// When argument 0 is the name looked up last and its table entry is simple (no
    /// subcommands, no options read, nothing special, the key at a fixed place or none), sets
    /// at once what `begin` and the arguments would but the key, and returns the key argument
    /// (`Some(None)` when there is none); `None`, with nothing changed, otherwise. Left as they
    /// were: `name`, `arg1` and `arg2`, read only for a name not in the table or a special
    /// command.
    fn simple_repeat<'a>(
        &mut self,
        argc: usize,
        args: &impl Fn(usize) -> &'a [u8],
    ) -> Option<Option<&'a [u8]>> {
        let info = self.last_info?;
        if self.last_special || self.last_kind != Kind::Other || info.container || argc == 0 {
            return None;
        }
        let key = match info.key {
            KeyRule::None => None,
            KeyRule::At(at) => usize::try_from(at).ok().filter(|&at| at < argc).map(args),
            KeyRule::Numkeys { .. } | KeyRule::After { .. } => return None,
        };
        if args(0) != self.last_name.as_slice() {
            return None;
        }
        self.argc = argc as u64;
        self.info = Some(info);
        self.kind = Kind::Other;
        self.special_name = false;
        self.name_complete = true;
        self.has_sub = false;
        self.rule = info.key;
        self.numkeys = None;
        self.keyword_at = None;
        self.hello_user_at = None;
        self.user = None;
        Some(key)
    }

    /// After [`Self::simple_repeat`]: [`Self::repeat`] for the key argument `key`, compared
    /// where it lies (the builder's key is left as it was: `finish` is not called).
    fn repeat_key(&self, key: Option<&[u8]>, max_text: usize) -> Option<Request> {
        let m = self.memo.as_ref()?;
        let info = self.info?;
        let kept = key.map(|k| k.get(..KEY_KEEP).unwrap_or(k));
        let keyed = kept.is_some_and(|k| !k.is_empty());
        let same = std::ptr::eq(info, m.info)
            && m.max_text == max_text
            && m.keyed == keyed
            && (!keyed
                || (key.is_some_and(|k| k.len() > KEY_KEEP) == m.key_truncated
                    && kept == Some(self.memo_key.as_slice())));
        let text = self.last_text.as_ref()?;
        same.then(|| Request {
            command: info.name,
            text: Arc::clone(text),
            text_truncated: m.truncated,
            special: Special::None,
            argc: self.argc,
        })
    }

    fn set_key(&mut self, head: &[u8], len: u64) {
        let k = head.get(..KEY_KEEP).unwrap_or(head);
        self.key.clear();
        self.key.extend_from_slice(k);
        self.has_key = true;
        self.key_truncated = (k.len() as u64) < len;
    }

    fn special(&self) -> Special {
        let Some(info) = self.info.filter(|_| self.special_name) else {
            return Special::None;
        };
        let channels = self.argc.saturating_sub(1);
        let arg1 = self.arg1.as_slice();
        let lossy = |b: &[u8]| -> Arc<str> { Arc::from(String::from_utf8_lossy(b).as_ref()) };
        match info.name {
            "multi" => Special::Multi,
            "exec" => Special::Exec,
            "discard" => Special::Discard,
            "reset" => Special::Reset,
            "monitor" => Special::Monitor,
            "sync" | "psync" => Special::Sync,
            "hello" => Special::Hello {
                version: match arg1 {
                    b"2" => Some(2),
                    b"3" => Some(3),
                    _ => None,
                },
                user: self.user.as_deref().map(lossy),
            },
            "auth" if self.argc == 2 || self.argc == 3 => Special::Auth {
                user: self
                    .user
                    .as_deref()
                    .map_or_else(|| Arc::from("default"), lossy),
            },
            "select" if self.argc == 2 => Special::Select { db: lossy(arg1) },
            "client"
                if self.argc == 3 && self.has_sub && self.sub.eq_ignore_ascii_case(b"reply") =>
            {
                let a = self.arg2.as_slice();
                if a.eq_ignore_ascii_case(b"on") {
                    Special::ClientReply(ReplyMode::On)
                } else if a.eq_ignore_ascii_case(b"off") {
                    Special::ClientReply(ReplyMode::Off)
                } else if a.eq_ignore_ascii_case(b"skip") {
                    Special::ClientReply(ReplyMode::Skip)
                } else {
                    Special::None
                }
            }
            "subscribe" if channels > 0 => Special::Subscribe {
                kind: PubKind::Channel,
                channels,
            },
            "psubscribe" if channels > 0 => Special::Subscribe {
                kind: PubKind::Pattern,
                channels,
            },
            "ssubscribe" if channels > 0 => Special::Subscribe {
                kind: PubKind::Shard,
                channels,
            },
            "unsubscribe" => Special::Unsubscribe {
                kind: PubKind::Channel,
                channels,
            },
            "punsubscribe" => Special::Unsubscribe {
                kind: PubKind::Pattern,
                channels,
            },
            "sunsubscribe" => Special::Unsubscribe {
                kind: PubKind::Shard,
                channels,
            },
            _ => Special::None,
        }
    }

    /// The command is complete. `max_text` caps the text.
    pub fn finish(&mut self, max_text: usize) -> Request {
        if let Some(r) = self.repeat(max_text) {
            return r;
        }
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        let mut truncated = false;
        match self.info {
            Some(c) => {
                text.push_str(c.name);
                text.make_ascii_uppercase();
                if self.has_sub {
                    text.push(' ');
                    for &b in &self.sub {
                        text.push(char::from(b.to_ascii_uppercase()));
                    }
                }
                if self.has_key && !self.key.is_empty() {
                    text.push(' ');
                    push_lossy(&mut text, &self.key, self.key_truncated);
                    truncated |= self.key_truncated;
                }
            }
            None => {
                let upper: Vec<u8> = self.name.iter().map(u8::to_ascii_uppercase).collect();
                push_lossy(&mut text, &upper, !self.name_complete);
                truncated |= !self.name_complete;
            }
        }
        if text.len() > max_text {
            let mut cut = max_text;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            truncated = true;
        }
        let shared = match &self.last_text {
            Some(t) if **t == *text => Arc::clone(t),
            _ => {
                let t: Arc<str> = Arc::from(text.as_str());
                self.last_text = Some(Arc::clone(&t));
                t
            }
        };
        // The buffer is kept for the next command unless one huge text grew it.
        if text.capacity() <= 4 * KEY_KEEP {
            self.text = text;
        }
        self.remember(max_text, truncated);
        Request {
            command: self.info.map_or("unknown", |c| c.name),
            text: shared,
            text_truncated: truncated,
            special: self.special(),
            argc: self.argc,
        }
    }
}

impl Builder {
    /// Whether the key goes into the text.
    fn keyed(&self) -> bool {
        self.has_key && !self.key.is_empty()
    }

    /// The request when the command repeats the last one built without a subcommand (same
    /// table entry, same key, same cap): its text is taken as it is, not built again.
    fn repeat(&self, max_text: usize) -> Option<Request> {
        let m = self.memo.as_ref()?;
        let info = self.info?;
        let keyed = self.keyed();
        let same = !self.has_sub
            && std::ptr::eq(info, m.info)
            && m.max_text == max_text
            && m.keyed == keyed
            && (!keyed || (self.key_truncated == m.key_truncated && self.key == self.memo_key));
        let text = self.last_text.as_ref()?;
        same.then(|| Request {
            command: info.name,
            text: Arc::clone(text),
            text_truncated: m.truncated,
            special: self.special(),
            argc: self.argc,
        })
    }

    /// Remembers what the text just built (now `last_text`) was built from, for
    /// [`Self::repeat`]; only commands of the table without a subcommand are remembered.
    fn remember(&mut self, max_text: usize, truncated: bool) {
        let Some(info) = self.info.filter(|_| !self.has_sub) else {
            self.memo = None;
            return;
        };
        let keyed = self.keyed();
        self.memo_key.clear();
        if keyed {
            self.memo_key.extend_from_slice(&self.key);
        }
        self.memo = Some(Memo {
            info,
            keyed,
            key_truncated: self.key_truncated,
            max_text,
            truncated,
        });
    }
}

/// Appends `b` as text, replacing invalid UTF-8; when `cut`, a character cut at the end is
/// dropped rather than replaced.
fn push_lossy(out: &mut String, mut b: &[u8], cut: bool) {
    match std::str::from_utf8(b) {
        // The usual case, checked by the fast validator.
        Ok(s) => return out.push_str(s),
        Err(e) if cut && e.error_len().is_none() => {
            b = b.get(..e.valid_up_to()).unwrap_or(&[]);
        }
        Err(_) => {}
    }
    out.push_str(&String::from_utf8_lossy(b));
}

/// The error an error reply (`-...` or `!...`) carries: the first word is the prefix when it
/// is an upper-case code (`ERR`, `WRONGTYPE`, `NOSCRIPT`, `MOVED`, ...), the rest the message.
pub fn db_error(content: &[u8]) -> DbError {
    let text = String::from_utf8_lossy(content);
    let (first, rest) = text.split_once(' ').unwrap_or((&text, ""));
    let is_code = !first.is_empty()
        && first.len() <= 32
        && first
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && first.bytes().next().is_some_and(|b| b.is_ascii_uppercase());
    if is_code {
        DbError {
            code: 0,
            state: Some(first.into()),
            message: rest.trim().into(),
        }
    } else {
        DbError {
            code: 0,
            state: None,
            message: text.trim().into(),
        }
    }
}

/// Rows a reply carries: the element count of an array, set, map (pairs) or push; 1 for a
/// non-null bulk or verbatim string; 0 for everything else (simple strings, integers, nulls,
/// errors, doubles, booleans).
pub fn rows(v: &Value) -> u64 {
    if v.null {
        return 0;
    }
    match v.ty {
        Type::Array | Type::Set | Type::Map | Type::Push => v.len,
        Type::BulkString | Type::Verbatim => 1,
        _ => 0,
    }
}

/// A pub/sub subscription confirmation: `[kind, channel, count]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirmation {
    pub kind: PubKind,
    pub subscribe: bool,
    /// The channel is null: an unsubscribe-all with nothing subscribed.
    pub null_channel: bool,
    /// Subscriptions left after it (channels + patterns, or shard channels).
    pub count: u64,
}

fn text_of(k: &Kept) -> Option<&[u8]> {
    (matches!(k.ty, Type::BulkString | Type::SimpleString | Type::Verbatim) && !k.null)
        .then(|| k.content())
}

/// Whether a top-level array or push is a subscription confirmation.
pub fn confirmation(v: &Value, firsts: &[Kept]) -> Option<Confirmation> {
    if !matches!(v.ty, Type::Array | Type::Push) || v.null || v.len != 3 {
        return None;
    }
    let [k0, k1, k2] = firsts else {
        return None;
    };
    let (kind, subscribe) = match text_of(k0)? {
        b"subscribe" => (PubKind::Channel, true),
        b"unsubscribe" => (PubKind::Channel, false),
        b"psubscribe" => (PubKind::Pattern, true),
        b"punsubscribe" => (PubKind::Pattern, false),
        b"ssubscribe" => (PubKind::Shard, true),
        b"sunsubscribe" => (PubKind::Shard, false),
        _ => return None,
    };
    let count = u64::try_from(k2.integer()?).ok()?;
    Some(Confirmation {
        kind,
        subscribe,
        null_channel: k1.null,
        count,
    })
}

/// Whether a top-level array or push is a published message (`message`, `pmessage`,
/// `smessage`), which is never a reply.
pub fn is_message(v: &Value, firsts: &[Kept]) -> bool {
    if !matches!(v.ty, Type::Array | Type::Push) || v.null {
        return false;
    }
    matches!(
        (firsts.first().and_then(text_of), v.len),
        (Some(b"message" | b"smessage"), 3) | (Some(b"pmessage"), 4)
    )
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
