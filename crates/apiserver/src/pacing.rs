//! Paced response bodies: [`Paced`] hands its connection at most [`SLICE`] bytes per turn of the
//! connection's task, and gives the worker back to the scheduler between turns.
//!
//! Why: a Tokio task is never preempted, and a connection task writes as much of its response
//! as the socket takes each time it runs. A 600 KB list through TLS keeps a worker for most of
//! a millisecond; when a reader drains 30 such connections at once, a small request that
//! arrives then waits for all of them, in the run queue, before its own connection is read.
//! Upstream's goroutines are preempted by Go's scheduler; here a large body yields instead, so
//! that every runnable connection (and a new request) gets a turn per slice. Bodies under one
//! slice, nearly every response, pass untouched; a stream of small frames (a watch) yields once
//! per slice's worth of frames.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};

/// Bytes handed to the connection per turn of its task. Measured (`skiff bench api --fairness`
/// and the unpaged list of 20,000 pods in `skiff bench scale`): 64 KiB took a polite client's
/// p99 under a flood of lists from about 40 ms to 10; 16 KiB to 7, but made one 60 MB list half
/// again as slow, which 64 KiB does not.
pub const SLICE: usize = 64 * 1024;

/// A body that yields between slices of [`SLICE`] bytes (see the module docs).
pub struct Paced<B> {
    inner: B,
    /// What is left of a data frame larger than a slice.
    rest: Bytes,
    /// Bytes handed out since the task last gave its worker back.
    this_turn: usize,
}

impl<B> Paced<B> {
    pub fn new(inner: B) -> Self {
        Paced {
            inner,
            rest: Bytes::new(),
            this_turn: 0,
        }
    }

    /// The next piece of `data` this turn may hand out.
    fn slice(&mut self, mut data: Bytes) -> Frame<Bytes> {
        let room = SLICE - self.this_turn;
        if data.len() > room {
            self.rest = data.split_off(room);
        }
        self.this_turn += data.len();
        Frame::data(data)
    }
}

impl<B> Body for Paced<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if this.this_turn >= SLICE {
            // a turn's worth sent: the task goes to the back of its worker's queue
            this.this_turn = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if this.rest.has_remaining() {
            let rest = std::mem::take(&mut this.rest);
            return Poll::Ready(Some(Ok(this.slice(rest))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                // waiting for the source gives the worker back as well
                this.this_turn = 0;
                Poll::Pending
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => Poll::Ready(Some(Ok(this.slice(data)))),
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.rest.has_remaining() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use http_body_util::{Full, StreamBody};

    use super::*;

    /// Counts the wakes a body asks for.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Polls `body` to its end as a connection would, re-polling after each self-wake; returns
    /// the data frames' sizes, with 0 for each turn given back, and the body's bytes.
    fn drain<B: Body<Data = Bytes> + Unpin>(mut body: B) -> (Vec<usize>, Vec<u8>)
    where
        B::Error: std::fmt::Debug,
    {
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut turns, mut bytes) = (Vec::new(), Vec::new());
        loop {
            let before = wakes.0.load(Ordering::Relaxed);
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(None) => return (turns, bytes),
                Poll::Ready(Some(frame)) => {
                    let data = frame.unwrap().into_data().unwrap();
                    turns.push(data.len());
                    bytes.extend_from_slice(&data);
                }
                Poll::Pending => {
                    assert_eq!(
                        wakes.0.load(Ordering::Relaxed),
                        before + 1,
                        "it woke itself"
                    );
                    turns.push(0);
                }
            }
        }
    }

    #[test]
    fn a_large_body_leaves_a_slice_per_turn_and_keeps_its_length() {
        let data: Vec<u8> = (0..SLICE * 2 + 10).map(|i| i as u8).collect();
        let body = Paced::new(Full::new(Bytes::from(data.clone())));
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64));
        let (turns, bytes) = drain(body);
        assert_eq!(turns, [SLICE, 0, SLICE, 0, 10]);
        assert_eq!(bytes, data);
    }

    #[test]
    fn small_frames_pass_whole_until_a_slice_is_spent() {
        let chunk = SLICE / 4 + 1;
        let frames = (0..6)
            .map(|_| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![7; chunk]))));
        let body = Paced::new(StreamBody::new(futures::stream::iter(frames)));
        let (turns, bytes) = drain(body);
        // the fourth frame overruns the slice by 4 bytes: it is cut there, the rest waits a turn
        assert_eq!(turns, [chunk, chunk, chunk, chunk - 4, 0, 4, chunk, chunk]);
        assert_eq!(bytes.len(), chunk * 6);
        let small = Paced::new(Full::new(Bytes::from_static(b"{}")));
        assert_eq!(drain(small).0, [2]);
    }
}
