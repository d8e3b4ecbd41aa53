//! Every flag from the command line, a `DBTAP_<FLAG>` environment variable or a TOML config
//! file (`--config FILE`, or `DBTAP_CONFIG`), in that order of precedence, then the built-in
//! default; and the hidden `dbtap completions SHELL` and `dbtap man` generators.
//!
//! Done generically over clap's `Command` rather than by an attribute on each flag: before
//! parsing, each subcommand's flags get the value of their environment variable, else of the
//! config file, as their default (`Arg::default_value`). clap then uses it only when the command
//! line does not give the flag, and `--help` shows it as the default. A flag given on the
//! command line replaces the value from the environment or the file (repeatable flags too).
//!
//! The file: TOML whose keys are long flag names, either at the top level (for every
//! subcommand that has the flag) or in a section named after a subcommand (`[live]`), which
//! wins over the top level. A key that names no flag is an error naming it.
//!
//! `DBTAP_<SUBCOMMAND>_<FLAG>` (`DBTAP_LIVE_FORMAT`) sets a flag for one subcommand only and
//! wins over `DBTAP_<FLAG>`, as a file's section wins over its top level.
//!
//! Values: a string, a number or a boolean (`quiet = true`); an array for a repeatable flag
//! (`port = [3306, 3307]`). In the environment a repeatable flag takes a comma-separated list
//! (`DBTAP_PORT=3306,3307`) and a switch takes true/false, 1/0, yes/no or on/off.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, CommandFactory, FromArgMatches};

use crate::cli::Cli;

/// The environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "DBTAP_CONFIG";

/// Where the service's config file lives (the Debian package's unit passes it).
pub const SERVICE_CONFIG: &str = "/etc/dbtap/dbtap.toml";

/// Flags that are not settings: never read from the environment or a file.
const NOT_SETTINGS: &[&str] = &["help", "version", "config"];

/// The command line, parsed with the environment and the config file. `Ok(None)`: a generator
/// subcommand ran (its output is written). clap's own errors (and `--help`) exit as clap does.
pub fn cli() -> Result<Option<Cli>, String> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let path = config_path(&args, &env);
    let file = match &path {
        Some(p) => Some(read_file(p)?),
        None => None,
    };
    let cmd = with_settings(command(), &env, file.as_ref().zip(path.as_deref()))?;
    let matches = cmd.get_matches_from(args);
    match matches.subcommand() {
        Some(("completions", m)) => {
            let shell = m
                .get_one::<clap_complete::Shell>("shell")
                .copied()
                .ok_or("completions: which shell?")?;
            clap_complete::generate(shell, &mut command(), "dbtap", &mut std::io::stdout());
            Ok(None)
        }
        Some(("man", m)) => {
            man(m.get_one::<PathBuf>("dir").map(PathBuf::as_path)).map_err(|e| e.to_string())?;
            Ok(None)
        }
        _ => match Cli::from_arg_matches(&matches) {
            Ok(cli) => Ok(Some(cli)),
            Err(e) => e.exit(),
        },
    }
}

/// The whole command: the CLI of `cli.rs`, `--config`, and the hidden generators.
pub fn command() -> clap::Command {
    Cli::command()
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .global(true)
                .help(format!(
                    "Read settings from this TOML file (keys: long flag names, at the top level \
                     or under [SUBCOMMAND]); or set {CONFIG_ENV}. Any flag can also be set with \
                     DBTAP_<FLAG> (e.g. DBTAP_INTERVAL=10s). Precedence: command line, \
                     environment, file, default. The service reads {SERVICE_CONFIG}"
                )),
        )
        .subcommand(
            clap::Command::new("completions")
                .about("Print a shell completion script (bash, zsh, fish, elvish, powershell)")
                .hide(true)
                .arg(
                    Arg::new("shell")
                        .required(true)
                        .value_parser(clap::value_parser!(clap_complete::Shell)),
                ),
        )
        .subcommand(
            clap::Command::new("man")
                .about("Print the man page dbtap(1), or write it and one per subcommand to --dir")
                .hide(true)
                .arg(
                    Arg::new("dir")
                        .long("dir")
                        .value_name("DIR")
                        .value_parser(clap::value_parser!(PathBuf)),
                ),
        )
}

/// Writes dbtap.1 to stdout, or dbtap.1 and dbtap-SUBCOMMAND.1 for every visible subcommand
/// into `dir`.
fn man(dir: Option<&Path>) -> std::io::Result<()> {
    let cmd = command();
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            clap_mangen::generate_to(cmd, d)
        }
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout()),
    }
}

/// `--config FILE` or `--config=FILE` before any `--`, else `DBTAP_CONFIG`.
fn config_path(args: &[OsString], env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let Some(s) = a.to_str() else { continue };
        if s == "--" {
            break;
        }
        if s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(p) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(p));
        }
    }
    env.get(CONFIG_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// Reads and parses the config file; errors are one line naming the file.
pub fn read_file(path: &Path) -> Result<toml::Table, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    parse_file(&text).map_err(|e| format!("config file {}: {e}", path.display()))
}

/// Parses TOML, with a one-line error (`line N: message`).
pub fn parse_file(text: &str) -> Result<toml::Table, String> {
    text.parse::<toml::Table>().map_err(|e| {
        let line = e
            .span()
            .map(|s| text.get(..s.start).map_or(0, |t| t.matches('\n').count()) + 1);
        let msg = e.message().trim().replace('\n', " ");
        match line {
            Some(l) => format!("line {l}: {msg}"),
            None => msg,
        }
    })
}

/// Where a setting came from, for error messages.
#[derive(Clone, Debug)]
enum Source {
    Env(String),
    File { key: String },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Env(k) => write!(f, "environment variable {k}"),
            Source::File { key } => write!(f, "key '{key}'"),
        }
    }
}

/// The environment variable of a long flag: `max-text-total` -> `DBTAP_MAX_TEXT_TOTAL`.
pub fn env_name(long: &str) -> String {
    format!("DBTAP_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// Gives every flag of every subcommand its value from the environment or the file as its
/// default. `file` is the parsed file and its path.
pub fn with_settings(
    mut cmd: clap::Command,
    env: &BTreeMap<String, String>,
    file: Option<(&toml::Table, &Path)>,
) -> Result<clap::Command, String> {
    let empty = toml::Table::new();
    let (table, path) = match file {
        Some((t, p)) => (t, Some(p)),
        None => (&empty, None),
    };
    let in_file = |e: String| match path {
        Some(p) => format!("config file {}: {e}", p.display()),
        None => e,
    };
    check_keys(&cmd, table).map_err(in_file)?;
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let section = table.get(&name).and_then(toml::Value::as_table);
        let mut err: Option<String> = None;
        cmd = cmd.mut_subcommand(&name, |sub| {
            sub.mut_args(|arg| {
                if err.is_some() {
                    return arg;
                }
                match apply(arg.clone(), &name, env, section, table) {
                    Ok(a) => a,
                    Err(e) => {
                        err = Some(e);
                        arg
                    }
                }
            })
        });
        if let Some(e) = err {
            return Err(in_file(e));
        }
    }
    Ok(cmd)
}

/// Long flag names of a subcommand that can be settings.
fn settable(sub: &clap::Command) -> impl Iterator<Item = &str> {
    sub.get_arguments()
        .filter_map(Arg::get_long)
        .filter(|l| !NOT_SETTINGS.contains(l))
}

/// Every key names a flag: a top-level key some subcommand's flag, a section's key a flag of
/// that subcommand.
fn check_keys(cmd: &clap::Command, table: &toml::Table) -> Result<(), String> {
    let sub = |n: &str| cmd.get_subcommands().find(|s| s.get_name() == n);
    for (key, value) in table {
        if let (Some(s), Some(section)) = (sub(key), value.as_table()) {
            for k in section.keys() {
                if !settable(s).any(|l| l == k) {
                    return Err(format!("unknown key '{key}.{k}': dbtap {key} has no --{k}"));
                }
            }
            continue;
        }
        if !cmd.get_subcommands().any(|s| settable(s).any(|l| l == key)) {
            return Err(format!("unknown key '{key}': no subcommand has --{key}"));
        }
    }
    Ok(())
}

/// Sets one flag's default from the environment, else the subcommand's section, else the top
/// level of the file.
fn apply(
    arg: Arg,
    sub: &str,
    env: &BTreeMap<String, String>,
    section: Option<&toml::Table>,
    top: &toml::Table,
) -> Result<Arg, String> {
    let Some(long) = arg.get_long().filter(|l| !NOT_SETTINGS.contains(l)) else {
        return Ok(arg);
    };
    let long = long.to_string();
    let switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
    let multi = matches!(arg.get_action(), ArgAction::Append)
        || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    let var = [env_name(&format!("{sub}-{long}")), env_name(&long)]
        .into_iter()
        .find_map(|n| env.get(&n).map(|v| (n, v)));
    let values = if let Some((name, v)) = var {
        env_values(v, switch, multi).map_err(|e| format!("{}: {e}", Source::Env(name)))?
    } else if let Some(v) = section.and_then(|t| t.get(&long)) {
        let src = Source::File {
            key: format!("{sub}.{long}"),
        };
        file_values(v, switch, multi).map_err(|e| format!("{src}: {e}"))?
    } else if let Some(v) = top.get(&long).filter(|v| !v.is_table()) {
        let src = Source::File { key: long.clone() };
        file_values(v, switch, multi).map_err(|e| format!("{src}: {e}"))?
    } else {
        return Ok(arg);
    };
    // A switch set in the environment or the file is as if given: SetFalse flags store false.
    let values = match arg.get_action() {
        ArgAction::SetFalse => values
            .into_iter()
            .map(|v| (v != "true").to_string())
            .collect(),
        _ => values,
    };
    Ok(arg.default_values(values))
}

/// A switch's value: true or false.
fn boolean(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(format!("'{s}' is not true or false")),
    }
}

/// The values of an environment variable.
fn env_values(v: &str, switch: bool, multi: bool) -> Result<Vec<String>, String> {
    if switch {
        return Ok(vec![boolean(v)?.to_string()]);
    }
    if multi {
        return Ok(v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect());
    }
    Ok(vec![v.to_string()])
}

/// The values of a file key.
fn file_values(v: &toml::Value, switch: bool, multi: bool) -> Result<Vec<String>, String> {
    if switch {
        return match v {
            toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
            toml::Value::String(s) => Ok(vec![boolean(s)?.to_string()]),
            _ => Err("expected true or false".into()),
        };
    }
    match v {
        toml::Value::Array(items) if multi => items.iter().map(scalar).collect(),
        toml::Value::Array(_) => Err("takes one value, not a list".into()),
        v => Ok(vec![scalar(v)?]),
    }
}

/// A scalar as the command line would spell it.
fn scalar(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Datetime(d) => Ok(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => {
            Err("expected a string, a number or a boolean".into())
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
