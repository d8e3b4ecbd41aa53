//! Finding the database server processes in /proc: pure parsers of /proc/net/{tcp,tcp6,unix},
//! /proc/PID/{maps,stat} and fd links, and the scan that applies them (`discover`; listeners
//! come from sock_diag where the kernel has it, see `sockdiag`, and for servers in other network
//! namespaces, containers, from those namespaces' own /proc/PID/net/tcp{,6}).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::{Config, Target, Why};

/// Listening sockets of /proc/net/tcp or tcp6: (port, socket inode).
pub fn tcp_listeners(text: &str) -> Vec<(u16, u64)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(st), Some(ino)) = (f.get(1), f.get(3), f.get(9)) else {
            continue;
        };
        if *st != "0A" {
            continue;
        }
        let port = local
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        if let (Some(port), Ok(ino)) = (port, ino.parse()) {
            out.push((port, ino));
        }
    }
    out
}

/// Listening sockets of /proc/net/unix: (path, socket inode); abstract names start with '@'.
pub fn unix_listeners(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let mut it = line.split_whitespace();
        let (Some(_), Some(_), Some(_), Some(flags), Some(_), Some(_), Some(ino)) = (
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
        ) else {
            continue;
        };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|v| v & 0x10000 != 0);
        let path = it.collect::<Vec<_>>().join(" ");
        if !listening || path.is_empty() {
            continue;
        }
        if let Ok(ino) = ino.parse() {
            out.push((path, ino));
        }
    }
    out
}

/// The libssl shared objects mapped in a /proc/PID/maps text.
pub fn ssl_libs(maps: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        let name = path.rsplit('/').next().unwrap_or("");
        if path.starts_with('/')
            && name.starts_with("libssl")
            && name.contains(".so")
            && !line.ends_with("(deleted)")
        {
            let p = PathBuf::from(path);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The parent pid from a /proc/PID/stat text (after the command's closing parenthesis).
pub fn stat_ppid(stat: &str) -> Option<u32> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The inode of a "socket:[N]" fd link.
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

struct Proc {
    comm: String,
    ppid: u32,
}

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn procs() -> BTreeMap<u32, Proc> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = read(format!("/proc/{pid}/comm")).trim_end().to_string();
        let ppid = stat_ppid(&read(format!("/proc/{pid}/stat"))).unwrap_or(0);
        out.insert(pid, Proc { comm, ppid });
    }
    out
}

/// Listening TCP sockets of this network namespace: from sock_diag (the listening table only),
/// else /proc/net/tcp{,6}.
fn all_tcp_listeners() -> Vec<(u16, u64)> {
    crate::sockdiag::tcp_listeners().unwrap_or_else(|_| {
        let mut v = tcp_listeners(&read("/proc/net/tcp"));
        v.extend(tcp_listeners(&read("/proc/net/tcp6")));
        v
    })
}

/// The network namespace of `/proc/{pid}` (`pid` may be `self`): the inode its `ns/net` link
/// names ("net:[4026531840]").
fn netns_of(pid: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    link.to_str()?
        .strip_prefix("net:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// One process of each network namespace of `pids` other than this process's (a server in a
/// container): sock_diag and /proc/net answer for this namespace only, and /proc/PID/net/* is
/// PID's namespace's table.
fn foreign_netns_pids(pids: impl Iterator<Item = u32>) -> Vec<u32> {
    let Some(own) = netns_of("self") else {
        return Vec::new();
    };
    let mut seen = HashSet::from([own]);
    pids.filter(|pid| netns_of(&pid.to_string()).is_some_and(|ns| seen.insert(ns)))
        .collect()
}

/// Listening TCP sockets of the network namespaces of `pids` other than this process's.
fn foreign_tcp_listeners(pids: impl Iterator<Item = u32>) -> Vec<(u16, u64)> {
    let mut out = Vec::new();
    for pid in foreign_netns_pids(pids) {
        out.extend(tcp_listeners(&read(format!("/proc/{pid}/net/tcp"))));
        out.extend(tcp_listeners(&read(format!("/proc/{pid}/net/tcp6"))));
    }
    out
}

/// The identity of the file at `p` (device, inode): a socket file seen from outside a
/// container (a bind-mounted directory) has another path than inside it, but the same file.
fn file_id(p: impl AsRef<Path>) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.dev(), m.ino()))
}

fn listen_inodes(cfg: &Config, pids: impl Iterator<Item = u32>) -> HashMap<u64, Why> {
    let mut want = HashMap::new();
    // The `--socket` files, for other namespaces' listeners (matched by identity, below).
    let ids: Vec<((u64, u64), &PathBuf)> = cfg
        .unix_paths
        .iter()
        .filter_map(|p| Some((file_id(p)?, p)))
        .collect();
    // Other namespaces are looked at only when something may be found there.
    let foreign = if cfg.ports.is_empty() && ids.is_empty() {
        Vec::new()
    } else {
        foreign_netns_pids(pids)
    };
    if !cfg.ports.is_empty() {
        let mut all = all_tcp_listeners();
        all.extend(foreign_tcp_listeners(foreign.iter().copied()));
        for (port, ino) in all {
            if cfg.ports.contains(&port) {
                want.insert(ino, Why::Port(port));
            }
        }
    }
    if cfg.unix_paths.is_empty() {
        return want;
    }
    let paths: Vec<(String, &PathBuf)> = cfg
        .unix_paths
        .iter()
        .flat_map(|p| {
            let canon = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            [
                (p.display().to_string(), p),
                (canon.display().to_string(), p),
            ]
        })
        .collect();
    let unix = crate::sockdiag::unix_listeners()
        .unwrap_or_else(|_| unix_listeners(&read("/proc/net/unix")));
    for (path, ino) in unix {
        if let Some((_, p)) = paths.iter().find(|(s, _)| *s == path) {
            want.insert(ino, Why::Socket((*p).clone()));
        }
    }
    // Other namespaces' listeners: their files are matched by identity, through the root of a
    // process of that namespace (the path inside a container is not the one given here).
    for pid in foreign.iter().filter(|_| !ids.is_empty()) {
        for (path, ino) in unix_listeners(&read(format!("/proc/{pid}/net/unix"))) {
            let Some(inside) = path.strip_prefix('/') else {
                continue; // an abstract name: no file
            };
            let id = file_id(format!("/proc/{pid}/root/{inside}"));
            if let Some((_, p)) = ids.iter().find(|(i, _)| Some(*i) == id) {
                want.insert(ino, Why::Socket((*p).clone()));
            }
        }
    }
    want
}

fn holder_of(pid: u32, want: &HashMap<u64, Why>) -> Option<Why> {
    if want.is_empty() {
        return None;
    }
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    dir.flatten().find_map(|e| {
        let link = std::fs::read_link(e.path()).ok()?;
        want.get(&socket_inode(link.to_str()?)?).cloned()
    })
}

/// The socket inodes among the descriptors of process `pid`; `None` when they cannot be read (the
/// process is gone).
pub fn socket_inodes(pid: u32) -> Option<std::collections::HashSet<u64>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        dir.flatten()
            .filter_map(|e| socket_inode(std::fs::read_link(e.path()).ok()?.to_str()?))
            .collect(),
    )
}

/// The ports of the listening TCP sockets of this network namespace and of the namespaces of
/// the traced processes `pids` (unsorted, repeats kept: the dispatcher's `add_ports` sorts and
/// dedups them with the configured ones).
pub fn listening_ports(pids: impl Iterator<Item = u32>) -> Vec<u16> {
    let mut all = all_tcp_listeners();
    all.extend(foreign_tcp_listeners(pids));
    all.into_iter().map(|(p, _)| p).collect()
}

/// The processes to trace: holders of a listening socket on a configured port or Unix path,
/// `--pid`s, `--process` names, and children with their parent's command (PostgreSQL backends).
pub fn discover(cfg: &Config) -> Vec<Target> {
    let all = procs();
    let want = listen_inodes(cfg, all.keys().copied());
    let mut found: BTreeMap<u32, Why> = BTreeMap::new();
    for (&pid, p) in &all {
        if cfg.pids.contains(&pid) {
            found.insert(pid, Why::Pid);
        } else if cfg.processes.contains(&p.comm) {
            found.insert(pid, Why::Process(p.comm.clone()));
        } else if let Some(w) = holder_of(pid, &want) {
            found.insert(pid, w);
        }
    }
    loop {
        let children: Vec<(u32, u32)> = all
            .iter()
            .filter(|(pid, p)| !found.contains_key(pid) && found.contains_key(&p.ppid))
            .filter(|(_, p)| all.get(&p.ppid).is_some_and(|pp| pp.comm == p.comm))
            .map(|(&pid, p)| (pid, p.ppid))
            .collect();
        if children.is_empty() {
            break;
        }
        for (pid, ppid) in children {
            found.insert(pid, Why::Child(ppid));
        }
    }
    found
        .into_iter()
        .map(|(pid, why)| Target {
            pid,
            comm: all.get(&pid).map(|p| p.comm.clone()).unwrap_or_default(),
            why,
        })
        .collect()
}

/// The libssl files each traced process maps: (pid, path as seen from this process).
pub fn target_ssl_libs(targets: &[Target]) -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = Vec::new();
    for t in targets {
        for lib in ssl_libs(&read(format!("/proc/{}/maps", t.pid))) {
            let p = if lib.exists() {
                lib
            } else {
                Path::new(&format!("/proc/{}/root", t.pid))
                    .join(lib.strip_prefix("/").unwrap_or(&lib))
            };
            if !out.contains(&(t.pid, p.clone())) {
                out.push((t.pid, p));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 23456 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:18EB 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   101        0 23457 1\n garbage\n";
        assert_eq!(tcp_listeners(t), vec![(6379, 23456)]);
        let t6 = "  sl  local_address                         remote_address                        st\n   0: 00000000000000000000000000000000:0CEA 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 777 1\n";
        assert_eq!(tcp_listeners(t6), vec![(3306, 777)]);
    }

    #[test]
    fn unix() {
        let t = "Num       RefCount Protocol Flags    Type St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 01 31337 /run/mysqld/mysqld.sock\n0000000000000000: 00000003 00000000 00000000 0001 03 31338 /run/mysqld/mysqld.sock\n0000000000000000: 00000002 00000000 00010000 0001 01 4242 @/tmp/.X11-unix/X0\n0000000000000000: 00000002 00000000 00010000 0001 01 999\n0000000000000000: 00000002 00000000 00010000 0001 01 1000 /tmp/with space\nshort line\n";
        assert_eq!(
            unix_listeners(t),
            vec![
                ("/run/mysqld/mysqld.sock".to_string(), 31337),
                ("@/tmp/.X11-unix/X0".to_string(), 4242),
                ("/tmp/with space".to_string(), 1000)
            ]
        );
    }

    #[test]
    fn maps() {
        let m = "7f00-7f01 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libssl.so.3\n7f01-7f02 r-xp 00001000 08:01 123 /usr/lib/x86_64-linux-gnu/libssl.so.3\n7f02-7f03 r-xp 00000000 08:01 124 /usr/lib/x86_64-linux-gnu/libcrypto.so.3\n7f03-7f04 rw-p 00000000 00:00 0 \n7f04-7f05 r-xp 00000000 08:01 125 /opt/x/libssl.so.1.1 (deleted)\n";
        assert_eq!(
            ssl_libs(m),
            vec![PathBuf::from("/usr/lib/x86_64-linux-gnu/libssl.so.3")]
        );
    }

    #[test]
    fn stat_and_links() {
        assert_eq!(stat_ppid("123 (postgres: a) b) S 77 123 123 0"), Some(77));
        assert_eq!(stat_ppid("garbage"), None);
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[4242]"), None);
        assert_eq!(socket_inode("socket:[x]"), None);
    }

    #[test]
    fn own_network_namespace_is_not_read_again() {
        let own = netns_of("self").expect("/proc/self/ns/net");
        assert_eq!(netns_of(&std::process::id().to_string()), Some(own));
        assert_eq!(netns_of("no-such-process"), None);
        // This process's namespace is the one sock_diag answers for: nothing more to read.
        assert!(foreign_tcp_listeners([std::process::id()].into_iter()).is_empty());
        assert!(foreign_netns_pids([std::process::id()].into_iter()).is_empty());
    }

    #[test]
    fn a_file_is_the_same_by_any_path() {
        let dir = std::env::temp_dir().join(format!("dbtap-file-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("mysqld.sock");
        std::fs::write(&f, b"").unwrap();
        let other = dir.join("other");
        std::fs::write(&other, b"").unwrap();
        let via_root = format!("/proc/self/root{}", f.display());
        let id = file_id(&f);
        assert!(id.is_some());
        assert_eq!(file_id(&via_root), id);
        assert_ne!(file_id(&other), id);
        assert_eq!(file_id(dir.join("absent")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
