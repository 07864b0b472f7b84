//! Skiff's OpenAPI documents and the schema checks built on them.
//!
//! Unmodified kubectl reads these documents: `kubectl explain` walks the OpenAPI 3 document of
//! a resource's group version, and `kubectl apply` looks in it for the `fieldValidation`
//! parameter to decide whether the server validates fields (kubectl 1.27 and 1.28 first fetch
//! the Swagger 2.0 document, as protobuf). The schemas come from k8s-openapi's `schemars`
//! impls, the operations from the resource catalog (`skiff_apimachinery::catalog`), so every
//! served resource is described and nothing else is.
//!
//! Build the documents once at startup with [`Documents::build`] (or use
//! [`Documents::global`]) and serve the bytes; [`Documents::serve_v2`],
//! [`Documents::serve_v3_index`] and [`Documents::serve_v3`] decide status and headers as
//! kube-openapi does. [`unknown_fields`] backs `fieldValidation=Strict|Warn`.
//!
//! # Layout
//! - `types`: the k8s-openapi types whose schemas are generated.
//! - `schemas`: the registry of definitions, corrected to upstream's shapes.
//! - `patch_meta`: strategic-merge-patch extensions (merge keys) added to the definitions.
//! - `paths`: the operations of every catalog resource, as OpenAPI 3 path items.
//! - `params`: the query and path parameters those operations take.
//! - [`v3`]: one OpenAPI 3.0 document per group version, and index keys.
//! - `v2`: the Swagger 2.0 document.
//! - `proto`: the Swagger 2.0 document as gnostic protobuf.
//! - `custom`: custom resources' definitions and paths ([`Custom`]).
//! - `documents`: [`Documents`], serialized once (again when custom resources change), with
//!   hashes and request answers.
//! - `unknown`: [`unknown_fields`] for strict field validation.

mod custom;
mod documents;
mod params;
mod patch_meta;
mod paths;
mod proto;
mod schemas;
mod types;
mod unknown;
mod v2;
pub mod v3;

pub use custom::{Custom, definition_name};
pub use documents::{Documents, JSON, Reply, V2_PROTOBUF, V2_PROTOBUF_ALT};
pub use unknown::{has_schema, kinds_without_schema, unknown_fields};
