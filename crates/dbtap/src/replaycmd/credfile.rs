//! `dbtap replay --credentials FILE`: reads the captured users' passwords (format in
//! [`replay::creds`]), warns when the file is readable by others, and says which replayed
//! sessions' users have no password of their own there (they log in with the defaults).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use replay::Plan;
use replay::redis::Credentials;

/// The passwords of `path`.
pub fn read(path: &Path) -> Result<BTreeMap<String, String>> {
    use std::os::unix::fs::PermissionsExt;
    let meta =
        std::fs::metadata(path).with_context(|| format!("--credentials {}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        eprintln!(
            "dbtap: warning: --credentials {}: readable by others than its owner (chmod 600 it)",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--credentials {}", path.display()))?;
    replay::creds::parse(&text).map_err(|e| anyhow!("--credentials {}: {e}", path.display()))
}

/// One line naming the captured users (of `plans`) without a password in the file, with how
/// many sessions each has: they log in with `--user`/`--password` (or their defaults).
pub fn note_missing(creds: &Credentials, plans: &[Plan]) {
    let mut missing: BTreeMap<String, u64> = BTreeMap::new();
    for p in plans {
        let u = p.user.as_deref().unwrap_or("(unknown)");
        if !creds.has_user(u) {
            *missing.entry(u.to_string()).or_default() += 1;
        }
    }
    if missing.is_empty() {
        return;
    }
    let list: Vec<String> = missing.iter().map(|(u, n)| format!("{u} ({n})")).collect();
    eprintln!(
        "dbtap: note: sessions whose user has no password in --credentials log in with the \
         default --user/--password: {}",
        list.join(", ")
    );
}
