//! Query-string parameters of the API: decoding, the time range (`from`, `to`: unix seconds or
//! relative to the store's end), the filters, and the bounded numbers (`limit`, `points`).
//! Every error is one line, answered as 400.

use std::collections::HashMap;

/// Most rows `/api/top` returns.
pub const MAX_LIMIT: usize = 1_000;
/// Most points of a series or sparkline.
pub const MAX_POINTS: usize = 1_440;
/// The default range: the last hour of data.
pub const DEFAULT_RANGE_S: i64 = 3_600;

/// The decoded parameters of a query string (the last value of a repeated name wins).
pub struct Params(HashMap<String, String>);

impl Params {
    pub fn parse(query: &str) -> Result<Params, String> {
        let mut m = HashMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            m.insert(decode(k)?, decode(v)?);
        }
        Ok(Params(m))
    }

    /// The value of `name`, when given and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A required value.
    pub fn need(&self, name: &str) -> Result<&str, String> {
        self.get(name)
            .ok_or_else(|| format!("missing parameter {name}"))
    }

    /// A count between 1 and `max`, `default` when absent.
    pub fn count(&self, name: &str, default: usize, max: usize) -> Result<usize, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => match v.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(format!(
                    "bad {name} {}: expected a whole number from 1 to {max}",
                    shown(v)
                )),
            },
        }
    }

    /// The value filters and the search text.
    pub fn filter(&self) -> store::Filter {
        let f = |n: &str| self.get(n).map(str::to_string);
        store::Filter {
            server: f("server"),
            database: f("database"),
            user: f("user"),
            client: f("client"),
            protocol: f("protocol"),
            search: f("q"),
        }
    }

    /// The range of `from_name`/`to_name` (see [`resolve_range`]) with the filters.
    pub fn range(
        &self,
        from_name: &str,
        to_name: &str,
        span: Option<(i64, i64)>,
        now_s: i64,
    ) -> Result<store::RangeQuery, String> {
        let (from_s, to_s) = resolve_range(self.get(from_name), self.get(to_name), span, now_s)
            .map_err(|e| e.replace("{from}", from_name).replace("{to}", to_name))?;
        Ok(store::RangeQuery {
            from_s,
            to_s,
            filter: self.filter(),
        })
    }
}

/// A parameter value as shown in an error: at most 40 printable characters, quoted.
pub fn shown(v: &str) -> String {
    let s: String = v.chars().take(40).filter(|c| !c.is_control()).collect();
    format!("{s:?}")
}

/// Percent-decoding of a query-string component (`+` is a space).
fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                match byte {
                    Some(v) => out.push(v),
                    None => return Err(format!("bad percent-encoding in {}", shown(s))),
                }
                i += 2;
            }
            _ => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("parameter {} is not UTF-8", shown(s)))
}

/// A relative time `-1h`, `-30m`, `-24h`, `-7d`, `-2w`, `-90s`: seconds back (positive).
pub fn parse_relative(v: &str) -> Option<i64> {
    let rest = v.strip_prefix('-')?;
    let unit_at = rest.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = rest.split_at(unit_at);
    let n: i64 = n.parse().ok()?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// One time parameter: unix seconds, or relative to `end` (the store's end).
fn parse_time(v: &str, end: i64, name: &str) -> Result<i64, String> {
    if let Some(back) = parse_relative(v) {
        return Ok(end.saturating_sub(back));
    }
    match v.parse::<i64>() {
        Ok(t) if (0..=253_402_300_799).contains(&t) => Ok(t),
        _ => Err(format!(
            "bad {name} {}: expected unix seconds or a relative time such as -1h, -24h, -7d",
            shown(v)
        )),
    }
}

/// The range `[from, to)` in unix seconds: `to` defaults to the store's end (`span`'s end, or
/// `now_s` for an empty store), `from` to an hour before `to`. Relative times count back from
/// the store's end. Errors name the parameters `{from}` and `{to}`.
pub fn resolve_range(
    from: Option<&str>,
    to: Option<&str>,
    span: Option<(i64, i64)>,
    now_s: i64,
) -> Result<(i64, i64), String> {
    let end = span.map_or(now_s - now_s.rem_euclid(60) + 60, |s| s.1);
    let to_s = match to {
        Some(v) => parse_time(v, end, "{to}")?,
        None => end,
    };
    let from_s = match from {
        Some(v) => parse_time(v, end, "{from}")?,
        None => to_s.saturating_sub(DEFAULT_RANGE_S),
    };
    if from_s >= to_s {
        return Err(format!(
            "{{from}} ({from_s}) must be before {{to}} ({to_s})"
        ));
    }
    Ok((from_s, to_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_components() {
        let p = Params::parse("q=select%20*+from&x=%E2%82%AC&&y").expect("ok");
        assert_eq!(p.get("q"), Some("select * from"));
        assert_eq!(p.get("x"), Some("€"));
        assert_eq!(p.get("y"), None);
        assert!(Params::parse("q=%zz").is_err());
        assert!(Params::parse("q=%4").is_err());
        assert!(Params::parse("q=%ff").is_err());
    }

    #[test]
    fn ranges() {
        let span = Some((1_000_020, 1_007_220));
        assert_eq!(
            resolve_range(None, None, span, 0),
            Ok((1_003_620, 1_007_220))
        );
        assert_eq!(
            resolve_range(Some("-2h"), None, span, 0),
            Ok((1_000_020, 1_007_220))
        );
        assert_eq!(
            resolve_range(Some("1000000"), Some("1000060"), span, 0),
            Ok((1_000_000, 1_000_060))
        );
        assert!(resolve_range(Some("-1x"), None, span, 0).is_err());
        assert!(resolve_range(Some("5"), Some("5"), span, 0).is_err());
        assert!(resolve_range(Some("abc"), None, span, 0).is_err());
        // An empty store: the hour up to the end of the current minute.
        assert_eq!(resolve_range(None, None, None, 7_230), Ok((3_660, 7_260)));
        assert_eq!(parse_relative("-7d"), Some(604_800));
        assert_eq!(parse_relative("-99999999999999999999d"), None);
    }

    #[test]
    fn counts() {
        let p = Params::parse("limit=0&points=10&n=abc").expect("ok");
        assert!(p.count("limit", 5, 10).is_err());
        assert_eq!(p.count("points", 5, 10), Ok(10));
        assert_eq!(p.count("absent", 5, 10), Ok(5));
        assert!(p.count("n", 5, 10).unwrap_err().contains("\"abc\""));
    }
}
