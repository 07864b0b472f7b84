//! The server's component tasks: started in dependency order, each with a [`Lifecycle`] of its
//! own; watched, so that one ending on its own (a failure) stops the server with its error; and
//! stopped in reverse order, each awaited before the next, so that clients leave before the API
//! server and the API server (with the store under it) stops last.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::commands::lifecycle::{Lifecycle, Stopper};

/// How long one component may take to stop before the server gives up on it.
const STOP_GRACE: Duration = Duration::from_secs(30);

struct Component {
    name: &'static str,
    stopper: Stopper,
    task: JoinHandle<anyhow::Result<()>>,
}

pub struct Supervisor {
    /// SIGTERM or Ctrl-C for the server itself.
    interrupt: Lifecycle,
    components: Vec<Component>,
    /// The name of each component whose task ended, as it ends.
    ended: mpsc::UnboundedReceiver<&'static str>,
    ended_tx: mpsc::UnboundedSender<&'static str>,
}

impl Supervisor {
    pub fn new() -> Supervisor {
        let (ended_tx, ended) = mpsc::unbounded_channel();
        Supervisor {
            interrupt: Lifecycle::standalone(),
            components: Vec::new(),
            ended,
            ended_tx,
        }
    }

    /// Starts `name` as a task running `run` with a lifecycle this supervisor stops.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, run: F)
    where
        F: FnOnce(Lifecycle) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stopper, lifecycle) = Lifecycle::embedded();
        let future = run(lifecycle);
        let ended = self.ended_tx.clone();
        let task = tokio::spawn(async move {
            let result = future.await;
            let _ = ended.send(name);
            result
        });
        self.components.push(Component {
            name,
            stopper,
            task,
        });
    }

    /// Runs `step` unless the server is interrupted first (None) or a component ends first
    /// (its error).
    pub async fn guard<T>(
        &mut self,
        step: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<Option<T>> {
        tokio::select! {
            result = step => result.map(Some),
            () = self.interrupt.stopped() => Ok(None),
            Some(name) = self.ended.recv() => Err(self.failure(name).await),
        }
    }

    /// Why `name`, whose task ended, ended.
    async fn failure(&mut self, name: &'static str) -> anyhow::Error {
        let Some(i) = self.components.iter().position(|c| c.name == name) else {
            return anyhow::anyhow!("the {name} stopped");
        };
        let component = self.components.remove(i);
        match component.task.await {
            Ok(Ok(())) => anyhow::anyhow!("the {name} stopped on its own"),
            Ok(Err(err)) => err.context(format!("the {name} failed")),
            Err(err) => anyhow::anyhow!("the {name} panicked: {err}"),
        }
    }

    /// Stops every component, last started first; the first error any of them stopped with.
    pub async fn stop_all(mut self) -> anyhow::Result<()> {
        let mut first_error = None;
        while let Some(component) = self.components.pop() {
            let name = component.name;
            println!("skiff server: stopping the {name}");
            component.stopper.stop();
            let err = match tokio::time::timeout(STOP_GRACE, component.task).await {
                Ok(Ok(Ok(()))) => continue,
                Ok(Ok(Err(err))) => err.context(format!("stopping the {name}")),
                Ok(Err(err)) => anyhow::anyhow!("the {name} panicked: {err}"),
                Err(_) => anyhow::anyhow!("the {name} did not stop within {STOP_GRACE:?}"),
            };
            tracing::warn!(component = name, error = %format!("{err:#}"), "stopping");
            first_error.get_or_insert(err);
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn components_stop_last_started_first() {
        let stopped = Arc::new(Mutex::new(Vec::new()));
        let mut supervisor = Supervisor::new();
        for name in ["apiserver", "scheduler", "kubelet"] {
            let stopped = stopped.clone();
            supervisor.spawn(name, move |lifecycle| async move {
                lifecycle.stopped().await;
                stopped.lock().unwrap().push(name);
                Ok(())
            });
        }
        supervisor.stop_all().await.unwrap();
        assert_eq!(
            *stopped.lock().unwrap(),
            ["kubelet", "scheduler", "apiserver"]
        );
    }

    #[tokio::test]
    async fn a_component_that_fails_ends_the_step_being_guarded_with_its_error() {
        let mut supervisor = Supervisor::new();
        supervisor.spawn("apiserver", |lifecycle| async move {
            lifecycle.stopped().await;
            Ok(())
        });
        supervisor.spawn("dns", |_| async { anyhow::bail!("binding 10.0.0.1:53") });
        let err = supervisor
            .guard(std::future::pending::<anyhow::Result<()>>())
            .await
            .unwrap_err();
        assert_eq!(format!("{err:#}"), "the dns failed: binding 10.0.0.1:53");
        supervisor.stop_all().await.unwrap();
    }
}
