//! `--credentials FILE`: the passwords of the captured users, one `user:password` a line, so
//! each session logs in as the user it was captured with. A session whose user is not in the
//! file (or unknown) logs in with the default `--user`/`--password`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::redis::Credentials;

/// Longest credentials file read (a bigger one is refused).
const MAX_FILE: usize = 1 << 20;

/// Parses a credentials file: `user:password` per line (the password is everything after the
/// first `:`, kept as written, `:` included); blank lines and lines starting with `#` are
/// skipped. A line without `:` or with an empty user is a one-line error naming the line.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    if text.len() > MAX_FILE {
        return Err(format!("longer than {MAX_FILE} bytes"));
    }
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        match line.split_once(':') {
            Some((u, p)) if !u.trim().is_empty() => {
                out.insert(u.trim().to_string(), p.to_string());
            }
            _ => return Err(format!("line {}: expected user:password", i + 1)),
        }
    }
    Ok(out)
}

impl Credentials {
    /// The credentials of a session captured as `user`: its password from the file when the
    /// file has it, else the defaults.
    pub fn for_user(&self, user: Option<&str>) -> Credentials {
        match user.and_then(|u| self.users.get(u).map(|p| (u, p))) {
            Some((u, p)) => Credentials {
                user: Some(u.to_string()),
                password: Some(p.clone()),
                users: Arc::default(),
            },
            None => Credentials {
                users: Arc::default(),
                ..self.clone()
            },
        }
    }

    /// Whether `user` has a password of its own (from the file).
    pub fn has_user(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn file_format() {
        let m = parse("# users\nalice:s3cr:et\n\n  bob : pw \r\n").unwrap();
        assert_eq!(m.get("alice").map(String::as_str), Some("s3cr:et"));
        assert_eq!(m.get("bob").map(String::as_str), Some(" pw "));
        assert_eq!(
            parse("alice\n").unwrap_err(),
            "line 1: expected user:password"
        );
        assert!(parse(":pw").is_err());
        assert_eq!(parse("u:").unwrap().get("u").map(String::as_str), Some(""));
    }

    #[test]
    fn per_user_or_default() {
        let c = Credentials {
            user: Some("app".into()),
            password: Some("dflt".into()),
            users: Arc::new(parse("alice:a1").unwrap()),
        };
        let a = c.for_user(Some("alice"));
        assert_eq!(
            (a.user.as_deref(), a.password.as_deref()),
            (Some("alice"), Some("a1"))
        );
        let b = c.for_user(Some("bob"));
        assert_eq!(
            (b.user.as_deref(), b.password.as_deref()),
            (Some("app"), Some("dflt"))
        );
        let n = c.for_user(None);
        assert_eq!(n.user.as_deref(), Some("app"));
        assert!(c.has_user("alice") && !c.has_user("bob"));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,200}") {
            let _ = parse(&s);
        }
    }
}
