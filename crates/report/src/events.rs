//! NDJSON event output: one JSON object per query event, one per line, written as events arrive
//! (schema in docs/json-format.md, "Events"). Borrowing serializer: no per-event allocation
//! beyond what the writer does.

use std::fmt::Display;
use std::io::{self, Write};

use proto::{Endpoint, Outcome, QueryEvent};
use serde::{Serialize, Serializer};

use crate::fmt::Rfc3339;

/// Lower-case name of an outcome as it appears in JSON.
pub fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "ok",
        Outcome::Error => "error",
        Outcome::NoResponse => "no_response",
        Outcome::Incomplete => "incomplete",
        Outcome::NoReplyExpected => "no_reply_expected",
    }
}

/// Serializes any `Display` as a JSON string without allocating.
struct Str<T>(T);

impl<T: Display> Serialize for Str<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

#[derive(Serialize)]
struct ErrorLine<'a> {
    code: u32,
    state: Option<&'a str>,
    message: &'a str,
}

#[derive(Serialize)]
struct ProcessLine<'a> {
    pid: u32,
    comm: &'a str,
}

#[derive(Serialize)]
struct EventLine<'a> {
    ts: Str<Rfc3339>,
    start_ns: u64,
    protocol: &'static str,
    command: &'static str,
    id: &'a str,
    fingerprint: &'a str,
    conn: u64,
    client: Str<&'a Endpoint>,
    server: Str<&'a Endpoint>,
    /// Written only when the client process is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    process: Option<ProcessLine<'a>>,
    user: Option<&'a str>,
    database: Option<&'a str>,
    latency_us: Option<f64>,
    service_us: Option<f64>,
    ttfb_us: Option<f64>,
    bytes_in: u64,
    bytes_out: u64,
    rows: u64,
    rows_affected: u64,
    warnings: u64,
    outcome: &'static str,
    error: Option<ErrorLine<'a>>,
    statement_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text_truncated: Option<bool>,
    /// Written only for a count-only event (`false`), whose times are null.
    #[serde(skip_serializing_if = "is_true")]
    timed: bool,
    /// Written only when bytes of the request were lost while its framing held (`true`).
    #[serde(skip_serializing_if = "is_false")]
    text_partial: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_true(b: &bool) -> bool {
    *b
}

/// Writes one event as one NDJSON line, with its group's `id` and `fingerprint`.
pub fn write_ndjson(
    ev: &QueryEvent,
    fingerprint: &str,
    id: &str,
    out: &mut impl Write,
) -> io::Result<()> {
    let us = |ns: u64| ns as f64 / 1e3;
    let line = EventLine {
        ts: Str(Rfc3339(ev.start_ns)),
        start_ns: ev.start_ns,
        protocol: ev.protocol.name(),
        command: ev.command,
        id,
        fingerprint,
        conn: ev.conn,
        client: Str(&ev.client),
        server: Str(&ev.server),
        process: ev.peer.as_deref().map(|p| ProcessLine {
            pid: p.pid,
            comm: &p.comm,
        }),
        user: ev.user.as_deref(),
        database: ev.database.as_deref(),
        latency_us: ev.latency_ns().map(us),
        service_us: ev.service_ns().map(us),
        ttfb_us: ev
            .first_response_ns
            .filter(|_| ev.timed)
            .map(|f| us(f.saturating_sub(ev.start_ns))),
        bytes_in: ev.bytes_in,
        bytes_out: ev.bytes_out,
        rows: ev.rows_sent,
        rows_affected: ev.rows_affected,
        warnings: ev.warnings,
        outcome: outcome_name(ev.outcome),
        error: ev.error.as_ref().map(|e| ErrorLine {
            code: e.code,
            state: e.state.as_deref(),
            message: &e.message,
        }),
        statement_id: ev.statement_id,
        text: ev.text.as_deref(),
        text_truncated: ev.text.as_ref().map(|_| ev.text_truncated),
        timed: ev.timed,
        text_partial: ev.text_partial,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}
