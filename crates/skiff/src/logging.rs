//! Where the log goes: stderr, a write per line. The ingress access log writes its own lines,
//! in batches ([`skiff_ingress::access`]); [`Guard`] writes out what it has gathered on an
//! orderly exit.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber: `RUST_LOG`'s filter (default `info`, `warn` for hickory's
/// server), colours only when stderr is a terminal.
pub fn init() -> Guard {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,hickory_server=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    Guard
}

/// Writes the gathered access log out when dropped.
pub struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        skiff_ingress::access::flush();
    }
}
