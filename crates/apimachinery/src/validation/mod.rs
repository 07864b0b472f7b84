//! Validation as upstream's `k8s.io/apimachinery/pkg/util/validation` and `pkg/api/validation`:
//! name and label format checks worded exactly as upstream, field paths and field error lists
//! (`field.ErrorList`), and `ObjectMeta` validation on create.
//!
//! # Layout
//! - [`names`]: `is_dns1123_subdomain`, `is_qualified_name`, `is_valid_label_value`, … returning
//!   upstream's messages.
//! - [`field`]: [`FieldPath`], [`ErrorType`], [`FieldError`] and [`aggregate`], whose text is
//!   upstream's `field.Error.Error()` and `ErrorList.ToAggregate()`.
//! - [`object_meta`]: [`validate_object_meta`], [`validate_labels`], [`validate_annotations`],
//!   [`validate_label_selector`].
//! - `gofmt` (private): Go's `%q`, `%v` and `json.Marshal` renderings used inside messages.

pub mod field;
pub mod gofmt;
pub mod names;
pub mod object_meta;

pub use field::{ErrorList, ErrorType, FieldError, FieldPath, aggregate};
pub use names::{
    is_c_identifier, is_config_map_key, is_dns1035_label, is_dns1123_label, is_dns1123_subdomain,
    is_env_var_name, is_path_segment_name, is_qualified_name, is_valid_ip, is_valid_label_value,
    is_valid_port_name, is_valid_port_num, parse_ip_sloppy,
};
pub use object_meta::{
    TOTAL_ANNOTATION_SIZE_LIMIT_BYTES, validate_annotations, validate_label_selector,
    validate_labels, validate_object_meta, validate_object_meta_update,
};
