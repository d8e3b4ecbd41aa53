//! The terminal side: raw mode, alternate screen, the event loop, and restoring the terminal on
//! every way out.

use std::io::{self, Write};
use std::panic::{self, PanicHookInfo};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossterm::event::{self, Event, KeyEventKind};
use crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

use crate::view::{View, on_key};
use crate::{Frame, SortBy, draw};

/// How long to wait for a key before looking for a new frame again.
const POLL: Duration = Duration::from_millis(100);

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

/// True while the terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Leaves raw mode and the alternate screen and shows the cursor, once: leaving the alternate
/// screen a second time would move the cursor back over what was printed since (a panic message).
fn restore() {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    let _ = terminal::disable_raw_mode();
    let mut out = io::stdout();
    let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
    let _ = out.flush();
}

/// Restores the terminal when dropped (normal return, `?` errors, unwinding panics) and, while
/// alive, from a panic hook too (for panics on other threads and `panic = "abort"`). Dropping it
/// puts the previous panic hook back.
struct Guard {
    prev: Arc<Mutex<Option<Hook>>>,
}

impl Guard {
    /// `stop` is set by the hook: once the terminal is restored the UI cannot go on drawing.
    fn install(stop: Arc<AtomicBool>) -> io::Result<Guard> {
        let prev: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(Some(panic::take_hook())));
        let p = Arc::clone(&prev);
        panic::set_hook(Box::new(move |info| {
            restore();
            stop.store(true, Ordering::Relaxed);
            if let Ok(h) = p.lock()
                && let Some(h) = h.as_ref()
            {
                h(info);
            }
        }));
        let guard = Guard { prev };
        ACTIVE.store(true, Ordering::SeqCst);
        terminal::enable_raw_mode()?;
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(guard)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
        // Put the previous hook back (not while panicking: the hook is in use then).
        if !std::thread::panicking() {
            let prev = self.prev.lock().ok().and_then(|mut h| h.take());
            if let Some(prev) = prev {
                let _ = panic::take_hook();
                panic::set_hook(prev);
            }
        }
    }
}

/// Runs the terminal UI until the user quits (`q`, Esc or Ctrl-C) or `stop` is set. Takes the
/// newest [`Frame`] from `rx` whenever frames arrive (older queued ones are dropped); keeps
/// showing the last one if the sender goes away. Sets `stop` when the user quits. The terminal is
/// restored on every exit path, including errors and panics; a panic on any thread while the UI
/// runs restores the terminal at once (so the panic message is readable) and sets `stop`.
pub fn run(rx: Receiver<Frame>, stop: Arc<AtomicBool>, initial: SortBy) -> io::Result<()> {
    let _guard = Guard::install(Arc::clone(&stop))?;
    let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    term.clear()?;
    let mut view = View::new(initial);
    let mut connected = true;
    let mut dirty = true;
    while !stop.load(Ordering::Relaxed) {
        let mut newest = None;
        while connected {
            match rx.try_recv() {
                Ok(f) => newest = Some(f),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => connected = false,
            }
        }
        if let Some(f) = newest {
            view.set_frame(f);
            dirty = true;
        }
        if dirty && !stop.load(Ordering::Relaxed) {
            term.draw(|f| draw(f, &view))?;
            dirty = false;
        }
        if event::poll(POLL)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    if on_key(&mut view, k) {
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    Ok(())
}
