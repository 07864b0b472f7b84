//! `horizontal-pod-autoscaler` (upstream's `podautoscaler` package): the calculations first.
//!
//! # Layout
//! - [`replicas`]: the replicas a resource metric asks for, from the target's pods and their
//!   metrics (upstream's `ReplicaCalculator`).
//! - [`behavior`]: stabilization windows, scaling policies and bounds applied to that proposal
//!   (upstream's `normalizeDesiredReplicasWithBehaviors`), with the conditions' reasons.

pub mod behavior;
pub mod replicas;
