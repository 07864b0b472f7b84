//! Write coalescing for HTTP/2 connections: [`GatherWrites`] holds what a connection writes
//! until the end of the scheduler round, so the frames of every stream that had something to
//! send leave in one TLS record batch and one `writev`.
//!
//! Why: when one event reaches 100 watches multiplexed on one HTTP/2 connection, h2 hands each
//! DATA frame over 256 bytes to the connection separately and flushes after each. Tokio runs a
//! task woken by another task next (its LIFO slot), so the connection task runs between the
//! watch tasks: without this, one event costs 100 TLS records and 100 `writev`s per
//! connection. A flush is put off with [`tokio::task::yield_now`]'s mechanism, which wakes the
//! connection task only once its worker has run every task that was ready (or at the worker's
//! next maintenance tick, after at most 61 tasks); h2 flushes again at the end of every poll of
//! the connection, and that flush writes. So a response waits at most one scheduler round.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker, ready};

use bytes::{Buf, BytesMut};
use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes gathered before they are written out even if no flush is due.
const GATHER_LIMIT: usize = 64 * 1024;

/// Wakes the connection task once its deferral has passed.
#[derive(Default)]
struct Deferred {
    fired: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Deferred {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// [`tokio::task::yield_now`]'s future, whose type has no name.
type Yield = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A connection's transport that gathers writes until the scheduler round ends (see the module
/// docs); with `gather` off (HTTP/1.1) it passes everything straight through.
pub struct GatherWrites<T> {
    inner: T,
    gather: bool,
    /// Written by the connection, not yet handed to `inner`.
    buf: BytesMut,
    /// A flush put off until the round ends: the yield future and the flag its waker sets.
    deferral: Option<(Yield, Arc<Deferred>)>,
}

impl<T> GatherWrites<T> {
    pub fn new(inner: T, gather: bool) -> Self {
        GatherWrites {
            inner,
            gather,
            buf: BytesMut::new(),
            deferral: None,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncWrite + Unpin> GatherWrites<T> {
    /// Writes out everything gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.buf.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.buf.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Whether a flush is due now; if not, arranges for the task to be woken once it is.
    fn flush_due(&mut self, cx: &mut Context<'_>) -> bool {
        match &self.deferral {
            Some((_, deferred)) if deferred.fired.load(Ordering::Acquire) => true,
            Some((_, deferred)) => {
                deferred.task.register(cx.waker());
                false
            }
            None => {
                let deferred = Arc::new(Deferred::default());
                deferred.task.register(cx.waker());
                let mut yielding: Yield = Box::pin(tokio::task::yield_now());
                let waker = Waker::from(deferred.clone());
                let pending = yielding
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_pending();
                // outside a runtime the yield wakes at once: flush now
                self.deferral = Some((yielding, deferred));
                !pending
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GatherWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GatherWrites<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if !this.gather {
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        if this.buf.len() + data.len() > GATHER_LIMIT {
            ready!(this.poll_drain(cx))?;
        }
        this.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if !this.gather {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.buf.len() + total > GATHER_LIMIT {
            ready!(this.poll_drain(cx))?;
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        self.gather || self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.gather && !this.buf.is_empty() {
            if !this.flush_due(cx) {
                return Poll::Ready(Ok(()));
            }
            ready!(this.poll_drain(cx))?;
        }
        this.deferral = None;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A transport that records each write it is given.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        flushes: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes.push(data.to_vec());
            Poll::Ready(Ok(data.len()))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn frames_flushed_in_one_round_leave_in_one_write_at_the_next_flush() {
        let mut io = GatherWrites::new(Recorder::default(), true);
        for frame in 0..100u8 {
            io.write_all(&[frame; 300]).await.unwrap();
            io.flush().await.unwrap();
        }
        assert!(io.get_ref().writes.is_empty(), "nothing written mid-round");
        // the round ends: the deferred wake fires, and the connection's next flush writes
        tokio::task::yield_now().await;
        io.flush().await.unwrap();
        let writes = &io.get_ref().writes;
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].len(), 100 * 300);
        assert_eq!(writes[0][299], 0);
        assert_eq!(writes[0][300], 1);
        assert_eq!(io.get_ref().flushes, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_buffer_is_written_out_before_more_is_gathered() {
        let mut io = GatherWrites::new(Recorder::default(), true);
        io.write_all(&vec![1; GATHER_LIMIT - 10]).await.unwrap();
        io.write_all(&[2; 20]).await.unwrap();
        assert_eq!(io.get_ref().writes.len(), 1);
        assert_eq!(io.get_ref().writes[0].len(), GATHER_LIMIT - 10);
        io.shutdown().await.unwrap();
        assert_eq!(io.get_ref().writes[1], vec![2; 20]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_gathering_writes_and_flushes_pass_straight_through() {
        let mut io = GatherWrites::new(Recorder::default(), false);
        io.write_all(b"one").await.unwrap();
        io.flush().await.unwrap();
        io.write_all(b"two").await.unwrap();
        assert_eq!(io.get_ref().writes, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(io.get_ref().flushes, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_deferred_flush_wakes_the_task_that_put_it_off() {
        // a connection task that writes, flushes (deferred), then waits to be woken and
        // flushes again, as h2 does at the end of each poll
        let task = tokio::spawn(async {
            let mut io = GatherWrites::new(Recorder::default(), true);
            io.write_all(b"frame").await.unwrap();
            io.flush().await.unwrap();
            let woken = std::future::poll_fn(|cx| {
                if io.flush_due(cx) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            woken.await;
            io.flush().await.unwrap();
            io.get_ref().writes.clone()
        });
        assert_eq!(task.await.unwrap(), vec![b"frame".to_vec()]);
    }
}
