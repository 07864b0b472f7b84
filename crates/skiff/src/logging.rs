//! Where the log goes: stderr, one write per line, except the ingress access log (tracing
//! target `access`, a line per request), which is gathered and written in batches of up to
//! [`BATCH`] bytes, at the latest [`FLUSH_EVERY`] after its first line: a write per request
//! would cost the proxy a system call per request (nginx's `access_log … buffer=16k
//! flush=100ms`). Lines still gathered when the process is killed are lost, as with nginx's
//! buffer; [`Guard`] writes them out on an orderly exit.
//!
//! Written here rather than with `tracing-appender`'s non-blocking writer, which sends every
//! line through a channel to a writer thread (an allocation and often a wake-up per line).

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// Access-log bytes gathered before they are written at once.
pub const BATCH: usize = 16 * 1024;
/// The longest an access-log line waits to be written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Installs the global subscriber: `RUST_LOG`'s filter (default `info`, `warn` for hickory's
/// server), colours only when stderr is a terminal.
pub fn init() -> Guard {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,hickory_server=warn"));
    let access = Batched::default();
    let writer = std::io::stderr
        .with_filter(|meta| meta.target() != skiff_ingress::proxy::ACCESS_LOG)
        .or_else(access.clone());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer)
        .init();
    Guard(access)
}

/// Writes the gathered access log out when dropped.
pub struct Guard(Batched);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.write_out();
    }
}

/// The access log's batch, shared by every thread that logs a request.
#[derive(Clone, Default)]
struct Batched(Arc<Shared>);

#[derive(Default)]
struct Shared {
    lines: Mutex<Vec<u8>>,
    /// Held while a batch is written, so that batches reach stderr in the order taken.
    writing: Mutex<()>,
    /// The thread that writes a batch out [`FLUSH_EVERY`] at the latest, started by the
    /// first line.
    flusher: OnceLock<()>,
}

impl Batched {
    fn start_flusher(&self) {
        self.0.flusher.get_or_init(|| {
            let batched = self.clone();
            let started = std::thread::Builder::new()
                .name("access-log".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(FLUSH_EVERY);
                        batched.write_out();
                    }
                });
            if let Err(e) = started {
                // lines are then written when a batch fills, and at exit
                eprintln!("skiff: starting the access log's writer thread: {e}");
            }
        });
    }

    fn write_out(&self) {
        let _writing = self.0.writing.lock();
        let batch = std::mem::take(&mut *self.0.lines.lock());
        if !batch.is_empty() {
            let _ = std::io::stderr().write_all(&batch);
        }
    }
}

/// A line being added to the batch: appended under the lock, the batch written out when full.
struct Line<'a>(&'a Batched);

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let full = {
            let mut lines = self.0.0.lines.lock();
            if lines.is_empty() {
                self.0.start_flusher();
            }
            lines.extend_from_slice(buf);
            lines.len() >= BATCH
        };
        if full {
            self.0.write_out();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line(self)
    }
}
