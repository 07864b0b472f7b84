//! What a plugin says about a pod: upstream's `framework.Status`, a code and the reasons behind
//! it, which become the `FailedScheduling` message ("0/5 nodes are available: 3 Insufficient
//! cpu, …").

use std::fmt;

/// A plugin's verdict (upstream's `framework.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The plugin ran and the pod may proceed.
    Success,
    /// Something went wrong inside the plugin (not the pod's fault): the pod is retried with
    /// backoff.
    Error,
    /// The pod does not fit this node now; preemption may help, and the pod is parked until
    /// a cluster event could make it fit.
    Unschedulable,
    /// The pod does not fit this node and preempting pods on it would not change that (node
    /// affinity, taints, the node name): preemption skips the node.
    UnschedulableAndUnresolvable,
    /// A Permit plugin asks the pod to wait before binding.
    Wait,
    /// The plugin has nothing to do for this pod; its Filter or Score for the cycle is skipped.
    Skip,
    /// The pod must wait for something outside the scheduler (upstream's `Pending`): it is
    /// parked as unschedulable without preemption.
    Pending,
}

/// A code with the plugin that returned it and its reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    code: Code,
    reasons: Vec<String>,
    plugin: &'static str,
}

impl Status {
    pub fn new(code: Code, reasons: Vec<String>) -> Status {
        Status {
            code,
            reasons,
            plugin: "",
        }
    }

    pub fn success() -> Status {
        Status::new(Code::Success, Vec::new())
    }

    pub fn skip() -> Status {
        Status::new(Code::Skip, Vec::new())
    }

    pub fn error(reason: impl Into<String>) -> Status {
        Status::new(Code::Error, vec![reason.into()])
    }

    pub fn unschedulable(reason: impl Into<String>) -> Status {
        Status::new(Code::Unschedulable, vec![reason.into()])
    }

    pub fn unresolvable(reason: impl Into<String>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, vec![reason.into()])
    }

    /// The same status, attributed to `plugin`.
    pub fn with_plugin(mut self, plugin: &'static str) -> Status {
        self.plugin = plugin;
        self
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn reasons(&self) -> &[String] {
        &self.reasons
    }

    /// The plugin that returned this status ("" when not attributed).
    pub fn plugin(&self) -> &'static str {
        self.plugin
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// Whether the pod was rejected (as opposed to an error or success).
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }

    /// The reasons joined as upstream's `Status.Message`.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.code)?;
        if !self.plugin.is_empty() {
            write!(f, " ({})", self.plugin)?;
        }
        if !self.reasons.is_empty() {
            write!(f, ": {}", self.message())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_told_apart_from_errors() {
        assert!(Status::unschedulable("Insufficient cpu").is_rejected());
        assert!(Status::unresolvable("node(s) didn't match Pod's node affinity").is_rejected());
        assert!(!Status::error("boom").is_rejected());
        assert!(!Status::success().is_rejected());
    }

    #[test]
    fn the_message_joins_the_reasons() {
        let s = Status::new(
            Code::Unschedulable,
            vec!["Insufficient cpu".into(), "Insufficient memory".into()],
        )
        .with_plugin("NodeResourcesFit");
        assert_eq!(s.message(), "Insufficient cpu, Insufficient memory");
        assert_eq!(s.plugin(), "NodeResourcesFit");
        assert_eq!(
            s.to_string(),
            "Unschedulable (NodeResourcesFit): Insufficient cpu, Insufficient memory"
        );
    }
}
