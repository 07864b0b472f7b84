//! A work queue with client-go's guarantees for the collector's dynamically discovered
//! resources (kube-runtime's `Controller` needs one static type): an item queued many times is
//! handled once, and never by two workers at once; one queued while it is being handled is
//! handled again afterwards.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Invariant (under `state`): an item is in `queue` iff it is `dirty` and not `processing`.
#[derive(Debug)]
pub struct Queue<T> {
    state: Mutex<State<T>>,
    ready: Notify,
}

#[derive(Debug)]
struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashSet<T>,
}

impl<T: Clone + Eq + Hash + Send + 'static> Queue<T> {
    pub fn new() -> Arc<Queue<T>> {
        Arc::new(Queue {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
            }),
            ready: Notify::new(),
        })
    }

    pub fn add(&self, item: T) {
        let mut s = self.state.lock();
        if !s.dirty.insert(item.clone()) {
            return;
        }
        if !s.processing.contains(&item) {
            s.queue.push_back(item);
            drop(s);
            self.ready.notify_one();
        }
    }

    /// Adds `item` after `delay`.
    pub fn add_after(self: &Arc<Self>, item: T, delay: Duration) {
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(item);
        });
    }

    /// The next item; call [`Queue::done`] with it when handled.
    pub async fn next(&self) -> T {
        loop {
            let notified = self.ready.notified();
            {
                let mut s = self.state.lock();
                if let Some(item) = s.queue.pop_front() {
                    s.dirty.remove(&item);
                    s.processing.insert(item.clone());
                    if !s.queue.is_empty() {
                        self.ready.notify_one();
                    }
                    return item;
                }
            }
            notified.await;
        }
    }

    pub fn done(&self, item: &T) {
        let mut s = self.state.lock();
        s.processing.remove(item);
        if s.dirty.contains(item) {
            s.queue.push_back(item.clone());
            drop(s);
            self.ready.notify_one();
        }
    }

    /// Items waiting to be handed out.
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_item_queued_twice_is_handed_out_once() {
        let q = Queue::new();
        q.add(1);
        q.add(1);
        q.add(2);
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, 1);
        assert_eq!(q.next().await, 2);
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn an_item_queued_while_processing_waits_until_done() {
        let q = Queue::new();
        q.add(1);
        let item = q.next().await;
        q.add(1);
        assert_eq!(q.len(), 0, "not handed to a second worker");
        q.done(&item);
        assert_eq!(q.len(), 1);
        assert_eq!(q.next().await, 1);
    }
}
