//! Tests of config.rs: precedence, every kind of flag, and the errors.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use clap::FromArgMatches;

use super::*;
use crate::cli::{Command, Field};

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Parses `args` with the environment `env` and the file text `file`.
fn parse(args: &[&str], env: &BTreeMap<String, String>, file: &str) -> Result<Cli, String> {
    let table = parse_file(file)?;
    let cmd = with_settings(command(), env, Some((&table, Path::new("t.toml"))))?;
    let m = cmd.try_get_matches_from(args).map_err(|e| e.to_string())?;
    Cli::from_arg_matches(&m).map_err(|e| e.to_string())
}

fn live(args: &[&str], e: &[(&str, &str)], file: &str) -> crate::cli::LiveArgs {
    let mut a = vec!["dbtap", "live"];
    a.extend_from_slice(args);
    match parse(&a, &env(e), file).map(|c| c.command) {
        Ok(Command::Live(l)) => l,
        other => panic!("{other:?}"),
    }
}

#[test]
fn env_names() {
    assert_eq!(env_name("interval"), "DBTAP_INTERVAL");
    assert_eq!(env_name("max-text-total"), "DBTAP_MAX_TEXT_TOTAL");
}

#[test]
fn command_line_then_env_then_file_then_default() {
    let secs = |l: crate::cli::LiveArgs| l.interval;
    assert_eq!(secs(live(&[], &[], "")), Duration::from_secs(1));
    assert_eq!(
        secs(live(&[], &[], "interval = '7s'")),
        Duration::from_secs(7)
    );
    // A section wins over the top level.
    let both = "interval = '7s'\n[live]\ninterval = 8\n";
    assert_eq!(secs(live(&[], &[], both)), Duration::from_secs(8));
    let e = [("DBTAP_INTERVAL", "9s")];
    assert_eq!(secs(live(&[], &e, both)), Duration::from_secs(9));
    let cli = ["--interval", "10s"];
    assert_eq!(secs(live(&cli, &e, both)), Duration::from_secs(10));
    assert_eq!(
        secs(live(&["--interval=11"], &e, both)),
        Duration::from_secs(11)
    );
    // DBTAP_LIVE_INTERVAL is live's own and wins over DBTAP_INTERVAL.
    let e = [("DBTAP_INTERVAL", "9s"), ("DBTAP_LIVE_INTERVAL", "12s")];
    assert_eq!(secs(live(&[], &e, both)), Duration::from_secs(12));
    // DBTAP_DIGEST_FORMAT is digest's alone: events keeps its default.
    let e = env(&[("DBTAP_DIGEST_FORMAT", "json")]);
    assert!(parse(&["dbtap", "events", "x.pcap"], &e, "").is_ok());
    match parse(&["dbtap", "digest", "x.pcap"], &e, "").map(|c| c.command) {
        Ok(Command::Digest(d)) => assert_eq!(d.report.format, crate::cli::DigestFormat::Json),
        other => panic!("{other:?}"),
    }
    assert!(
        parse(
            &["dbtap", "events", "x.pcap"],
            &env(&[("DBTAP_FORMAT", "json")]),
            ""
        )
        .is_err()
    );
}

#[test]
fn repeatable_flags_take_lists_and_the_command_line_replaces_them() {
    let ports = |l: crate::cli::LiveArgs| l.capture.ports;
    assert_eq!(
        ports(live(&[], &[], "port = [3306, 3307]")),
        vec![3306, 3307]
    );
    assert_eq!(ports(live(&[], &[], "port = 3306")), vec![3306]);
    let e = [("DBTAP_PORT", "1, 2,3")];
    assert_eq!(ports(live(&[], &e, "port = [3306]")), vec![1, 2, 3]);
    assert_eq!(ports(live(&["--port", "5"], &e, "")), vec![5]);
    // A flag with its own delimiter (--fields a,b) takes either form.
    let fields = |l: crate::cli::LiveArgs| l.fields;
    let want = vec![Field::Time, Field::Qps];
    assert_eq!(fields(live(&[], &[], "fields = ['time', 'qps']")), want);
    assert_eq!(fields(live(&[], &[], "fields = 'time,qps'")), want);
    assert_eq!(fields(live(&[], &[("DBTAP_FIELDS", "time,qps")], "")), want);
}

#[test]
fn switches() {
    let quiet = |a: &[&str], e: &[(&str, &str)], f: &str| {
        let mut args = vec!["dbtap", "digest", "x.pcap"];
        args.extend_from_slice(a);
        match parse(&args, &env(e), f).map(|c| c.command) {
            Ok(Command::Digest(d)) => Ok(d.input.quiet),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        }
    };
    assert_eq!(quiet(&[], &[], ""), Ok(false));
    assert_eq!(quiet(&[], &[], "quiet = true"), Ok(true));
    assert_eq!(quiet(&[], &[], "[digest]\nquiet = true"), Ok(true));
    assert_eq!(quiet(&[], &[("DBTAP_QUIET", "yes")], ""), Ok(true));
    assert_eq!(
        quiet(&[], &[("DBTAP_QUIET", "0")], "quiet = true"),
        Ok(false)
    );
    assert_eq!(quiet(&["-q"], &[("DBTAP_QUIET", "off")], ""), Ok(true));
    let bad = quiet(&[], &[("DBTAP_QUIET", "maybe")], "").unwrap_err();
    assert!(
        bad.contains("DBTAP_QUIET") && bad.contains("maybe"),
        "{bad}"
    );
    let bad = quiet(&[], &[], "quiet = 3").unwrap_err();
    assert!(bad.contains("'quiet'"), "{bad}");
}

#[test]
fn a_top_level_key_applies_where_the_flag_exists() {
    // `interval` is a flag of live only: digest ignores it, live takes it.
    let file = "interval = '5s'\nmax-text-total = '1M'\n";
    match parse(&["dbtap", "digest", "x.pcap"], &env(&[]), file).map(|c| c.command) {
        Ok(Command::Digest(d)) => assert_eq!(d.input.text.max_text_total, 1 << 20),
        other => panic!("{other:?}"),
    }
    let l = live(&[], &[], file);
    assert_eq!(
        (l.interval, l.capture.text.max_text_total),
        (Duration::from_secs(5), 1 << 20)
    );
}

#[test]
fn unknown_keys_are_one_line_errors_naming_the_key() {
    let err = |f: &str| parse(&["dbtap", "live"], &env(&[]), f).unwrap_err();
    let e = err("intervall = '1s'");
    assert!(e.contains("'intervall'") && e.contains("t.toml"), "{e}");
    let e = err("[live]\nmetrics-topp = 3");
    assert!(e.contains("'live.metrics-topp'"), "{e}");
    // A flag of another subcommand is no key of this one's section.
    let e = err("[digest]\ninterval = '1s'");
    assert!(e.contains("'digest.interval'"), "{e}");
    let e = err("[nosuch]\nx = 1");
    assert!(e.contains("'nosuch'"), "{e}");
    for f in ["config = 'x'", "help = true", "version = true"] {
        assert!(err(f).contains("unknown key"), "{f}");
    }
    let e = err("interval = [1, 2]");
    assert!(e.contains("'interval'") && e.contains("one value"), "{e}");
    for e in [
        err("intervall = '1s'"),
        err("[live]\nx = 1"),
        err("interval = ["),
    ] {
        assert!(!e.contains('\n'), "{e}");
    }
    let e = parse_file("a = 1\nb = = 2\n").unwrap_err();
    assert!(e.starts_with("line 2:") && !e.contains('\n'), "{e}");
}

#[test]
fn bad_values_are_clap_errors_naming_the_flag() {
    let r = parse(&["dbtap", "live"], &env(&[("DBTAP_INTERVAL", "soon")]), "");
    let e = r.map(|_| ()).unwrap_err();
    assert!(e.contains("--interval") && e.contains("soon"), "{e}");
}

#[test]
fn config_path_from_the_command_line_or_the_environment() {
    let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
    let none = env(&[]);
    let e = env(&[(CONFIG_ENV, "/e.toml")]);
    let p = |a: &[&str], e| config_path(&args(a), e).map(|p| p.display().to_string());
    assert_eq!(p(&["dbtap", "live"], &none), None);
    assert_eq!(p(&["dbtap", "live"], &e).as_deref(), Some("/e.toml"));
    assert_eq!(
        p(&["dbtap", "live", "--config", "/c.toml"], &e).as_deref(),
        Some("/c.toml")
    );
    assert_eq!(
        p(&["dbtap", "--config=/d.toml", "live"], &none).as_deref(),
        Some("/d.toml")
    );
    assert_eq!(p(&["dbtap", "live", "--", "--config", "x"], &none), None);
}

#[test]
fn config_flag_parses_everywhere() {
    for args in [
        &["dbtap", "--config", "f.toml", "live"][..],
        &["dbtap", "live", "--config", "f.toml"],
        &["dbtap", "digest", "x.pcap", "--config=f.toml"],
    ] {
        assert!(command().try_get_matches_from(args).is_ok(), "{args:?}");
    }
}

/// Every flag of every subcommand is reachable from the environment (and so from the file:
/// the same code path), and no variable name is one dbtap or its tests use for another purpose.
#[test]
fn every_flag_has_a_variable() {
    let reserved = [
        "DBTAP_BIN",
        CONFIG_ENV,
        "DBTAP_UI_TOKEN",
        "DBTAP_REQUIRE_CAPTURE",
        "DBTAP_BPF_PREBUILT",
        "DBTAP_GIT_REVISION",
        "DBTAP_RUSTC_VERSION",
    ];
    let base = command();
    let mut vars = BTreeMap::new();
    let mut count = 0;
    for sub in base.get_subcommands() {
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long().filter(|l| !NOT_SETTINGS.contains(l)) else {
                continue;
            };
            let name = env_name(long);
            let own = env_name(&format!("{}-{long}", sub.get_name()));
            assert!(!reserved.contains(&name.as_str()), "{name}");
            assert!(!reserved.contains(&own.as_str()), "{own}");
            let switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
            vars.insert(name, if switch { "true" } else { "v" }.to_string());
            count += 1;
        }
    }
    assert!(count > 50, "{count}");
    let cmd = with_settings(command(), &vars, None).unwrap();
    for sub in cmd.get_subcommands() {
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long().filter(|l| !NOT_SETTINGS.contains(l)) else {
                continue;
            };
            let d: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let want = match arg.get_action() {
                ArgAction::SetTrue => "true",
                ArgAction::SetFalse => "false",
                _ => "v",
            };
            assert_eq!(d, [want], "{} --{long}", sub.get_name());
        }
    }
}

/// The config file the Debian package installs is valid and sets what its comments say.
#[test]
fn the_shipped_config_file() {
    let text = include_str!("../../../deploy/debian/dbtap.toml");
    let l = live(&[], &[], text);
    assert_eq!(l.capture.interface, "any");
    assert_eq!(
        l.capture.listen,
        Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9187)))
    );
    assert_eq!(
        l.store.store.as_deref(),
        Some(Path::new("/var/lib/dbtap/history.db"))
    );
    assert_eq!(l.interval, Duration::ZERO);
}

proptest::proptest! {
    /// Any string reaches a flag unchanged from the file and from the environment, and any
    /// list of ports from either.
    #[test]
    fn values_reach_the_flags_unchanged(
        s in "[^\u{0}]{0,40}",
        ports in proptest::collection::vec(1u16.., 1..5),
    ) {
        let file = format!("filter = {}\nport = {:?}\n", toml::Value::String(s.clone()), ports);
        let l = live(&[], &[], &file);
        proptest::prop_assert_eq!(l.capture.filter.as_deref(), Some(s.as_str()));
        proptest::prop_assert_eq!(&l.capture.ports, &ports);
        let joined: Vec<String> = ports.iter().map(u16::to_string).collect();
        let l = live(&[], &[("DBTAP_FILTER", &s), ("DBTAP_PORT", &joined.join(","))], "");
        proptest::prop_assert_eq!(l.capture.filter.as_deref(), Some(s.as_str()));
        proptest::prop_assert_eq!(&l.capture.ports, &ports);
    }

    /// Any file text is parsed or refused in one line, never a panic.
    #[test]
    fn any_file_text_is_one_line_or_parsed(text in "[ -~\n]{0,80}") {
        if let Err(e) = parse_file(&text) {
            proptest::prop_assert!(!e.contains('\n'), "{}", e);
        }
    }
}
