//! Custom resources (`apiextensions.k8s.io/v1`): CustomResourceDefinitions, the controller that
//! serves what they define, and the rules their objects follow.
//!
//! # Layout
//! - [`definition`]: the strategy of CRDs themselves (defaults, stored versions, validation).
//! - [`controller`]: names, `Established`, serving and unserving, and deletion with the
//!   custom resources.
//! - [`resource`]: the strategy of one served version of a custom resource.
//! - [`printer`]: printer columns and the JSONPath subset they (and selectable fields) use.
//! - [`schema`]: structural schemas: the structural check, validation, defaulting, pruning and
//!   `x-kubernetes-validations` CEL rules.

pub mod controller;
pub mod definition;
pub mod printer;
pub mod resource;
pub mod schema;

/// The API group of CRDs.
pub const GROUP: &str = "apiextensions.k8s.io";
/// Their resource.
pub const PLURAL: &str = "customresourcedefinitions";
/// The finalizer a CRD's deletion waits on while its custom resources are deleted.
pub const FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
