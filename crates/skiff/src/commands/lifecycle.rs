//! How a long-running component runs: on its own (`skiff scheduler`: SIGTERM or Ctrl-C stops
//! it and its ready line goes to stdout) or as a task of `skiff server`, which stops its
//! components one by one and prints their ready lines as its own progress.

use tokio::sync::watch;

/// What a component's run function gets besides its flags: when to stop, and where its
/// ready line goes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    stop: watch::Receiver<bool>,
    embedded: bool,
}

/// Stops the component whose [`Lifecycle`] came with it (on [`Stopper::stop`] or when dropped).
#[derive(Debug)]
pub struct Stopper(watch::Sender<bool>);

impl Stopper {
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

impl Lifecycle {
    /// A component on its own: stopped by SIGTERM or Ctrl-C, its ready line on stdout.
    pub fn standalone() -> Lifecycle {
        let (tx, stop) = watch::channel(false);
        tokio::spawn(async move {
            super::store::shutdown_signal().await;
            tx.send_replace(true);
        });
        Lifecycle {
            stop,
            embedded: false,
        }
    }

    /// A component inside `skiff server`: stopped by the returned [`Stopper`], its ready line
    /// printed as a progress line (`ready` becomes `up`: the server alone says `ready`).
    pub fn embedded() -> (Stopper, Lifecycle) {
        let (tx, stop) = watch::channel(false);
        (
            Stopper(tx),
            Lifecycle {
                stop,
                embedded: true,
            },
        )
    }

    /// Resolves once the component should stop.
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        // a dropped Stopper stops the component too
        let _ = stop.wait_for(|stop| *stop).await;
    }

    /// Announces that the component serves.
    pub fn ready(&self, line: String) {
        if self.embedded {
            println!("  {}", line.replacen("ready", "up", 1));
        } else {
            println!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_embedded_component_stops_when_told_or_when_its_stopper_is_dropped() {
        let (stopper, lifecycle) = Lifecycle::embedded();
        let waiting = tokio::spawn({
            let lifecycle = lifecycle.clone();
            async move { lifecycle.stopped().await }
        });
        stopper.stop();
        waiting.await.unwrap();

        let (stopper, lifecycle) = Lifecycle::embedded();
        drop(stopper);
        lifecycle.stopped().await;
    }
}
