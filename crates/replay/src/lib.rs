//! Replay of captured database sessions onto a target server: the captured connections'
//! client bytes are framed into requests ([`capture`]), scheduled ([`schedule`]) and sent, one
//! target connection per captured connection, each waiting for its own replies ([`run`]).
//! The target's replies are read by the same protocol sessions as a capture, so both sides of
//! the report come from the same code. Redis ([`redis`], [`resp`]), MySQL/MariaDB ([`mysql`]) and
//! PostgreSQL ([`postgres`]), MongoDB ([`mongo`]). Filters (`--read-only`, `--where`, a time
//! range) in [`filter`].

#![forbid(unsafe_code)]

pub mod capture;
pub mod creds;
pub mod fidelity;
pub mod filter;
pub mod mongo;
pub mod mysql;
pub mod postgres;
pub mod redis;
pub mod resp;
pub mod run;
pub mod schedule;
pub mod scram;
pub mod tls;

pub use capture::{Collector, Limits, Plan};
pub use fidelity::Fidelity;
pub use run::{Options, Target};
pub use schedule::Timing;
