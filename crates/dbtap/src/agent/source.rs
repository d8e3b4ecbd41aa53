//! Which source a live run reads (`--source packet|ebpf|auto`): packet rings, the eBPF tracer,
//! or both, with the line that tells the user what was chosen and why.

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use anyhow::Result;

use super::Control;
use super::setup::Plan;
use super::worker::WorkerReport;
use crate::cli::{CaptureArgs, Source};
use crate::rotate::SharedFiles;

/// The eBPF side of a run, as started.
pub(super) struct Chosen {
    /// The tracer thread, when eBPF runs.
    pub(super) handle: Option<JoinHandle<()>>,
    /// What the run reads, for a second start line (none when `--source packet` said it).
    pub(super) line: Option<String>,
}

/// Whether the run opens packet rings.
pub(super) fn wants_packets(c: &CaptureArgs) -> bool {
    c.source != Source::Ebpf
}

/// Starts the eBPF tracer as worker `idx` when the source asks for it. `--source ebpf` fails
/// with a one-line reason when it cannot run; `auto` falls back to packets and says why. With
/// `auto` and eBPF running, the packet workers leave TLS connections to eBPF
/// (`plan.settings.tls_read_elsewhere`): start this before them.
pub(super) fn start(
    c: &CaptureArgs,
    plan: &mut Plan,
    idx: usize,
    ctl: &Arc<Control>,
    tx: &Sender<WorkerReport>,
    files: &SharedFiles,
) -> Result<Chosen> {
    let tcp = match c.source {
        Source::Packet => {
            return Ok(Chosen {
                handle: None,
                line: None,
            });
        }
        Source::Ebpf => true,
        Source::Auto => false,
    };
    match try_ebpf(c, plan, idx, tcp, ctl, tx, files)? {
        Ok((handle, traced)) => {
            let line = if tcp {
                format!("source ebpf: the server processes' sockets (tracing {traced})")
            } else {
                plan.settings.tls_read_elsewhere = true;
                format!(
                    "source auto: packets for plaintext TCP, eBPF for Unix sockets and TLS \
                     (tracing {traced})"
                )
            };
            Ok(Chosen {
                handle: Some(handle),
                line: Some(line),
            })
        }
        Err(why) if !tcp => Ok(Chosen {
            handle: None,
            line: Some(format!(
                "source auto: packets only; Unix sockets and TLS are not seen (eBPF: {why})"
            )),
        }),
        Err(why) => anyhow::bail!("--source ebpf: {why}"),
    }
}

#[cfg(feature = "ebpf")]
type Started = std::result::Result<(JoinHandle<()>, String), String>;

#[cfg(feature = "ebpf")]
fn try_ebpf(
    c: &CaptureArgs,
    plan: &Plan,
    idx: usize,
    tcp: bool,
    ctl: &Arc<Control>,
    tx: &Sender<WorkerReport>,
    files: &SharedFiles,
) -> Result<Started> {
    if let Err(why) = super::ebpf::available() {
        return Ok(Err(why));
    }
    Ok(
        super::ebpf::spawn(c, plan, idx, tcp, ctl, tx.clone(), files)?
            .map(|s| (s.handle, s.summary)),
    )
}

#[cfg(not(feature = "ebpf"))]
fn try_ebpf(
    _c: &CaptureArgs,
    _plan: &Plan,
    _idx: usize,
    _tcp: bool,
    _ctl: &Arc<Control>,
    _tx: &Sender<WorkerReport>,
    _files: &SharedFiles,
) -> Result<std::result::Result<(JoinHandle<()>, String), String>> {
    Ok(Err(
        "this dbtap was built without the `ebpf` feature".to_string()
    ))
}
