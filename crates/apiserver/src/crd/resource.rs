//! The strategy of one served version of a custom resource (upstream's
//! `customResourceStrategy`): schema defaulting, pruning and validation (CEL rules included),
//! selectable fields, printer columns and the scale subresource's paths.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

use serde_json::Value;
use skiff_apimachinery::validation::FieldError;

use super::printer::{self, Column, JsonPath};
use super::schema::Schema;
use crate::strategy::{ScalePaths, Strategy};
use skiff_apimachinery::managedfields::schema::Custom;

/// What one version of a CRD asks of its objects.
#[derive(Debug)]
pub struct CustomResourceStrategy {
    schema: Option<Schema>,
    columns: Vec<Column>,
    /// Field-selector names (`spec.color`) and where their values are.
    selectable: Vec<(&'static str, JsonPath)>,
    scale: Option<ScalePaths>,
    /// Whether the schema sets any default (only then can a read be defaulted).
    has_defaults: bool,
    /// Server-side apply's view of the schema.
    apply: Option<Custom>,
    /// Set once the CRD is being deleted: creates are refused from then on.
    terminating: AtomicBool,
}

impl CustomResourceStrategy {
    /// The strategy of `version` (an entry of a valid CRD's `spec.versions`).
    pub fn new(version: &Value) -> Self {
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .and_then(|s| Schema::new(s, &Default::default()).ok());
        let selectable = version
            .get("selectableFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| {
                let text = f.get("jsonPath")?.as_str()?;
                let path = JsonPath::parse(text).ok()?;
                Some((intern(text.trim_start_matches('.')), path))
            })
            .collect();
        let pointer = |k: &str| {
            let text = version
                .pointer(&format!("/subresources/scale/{k}"))?
                .as_str()?;
            JsonPath::parse(text).ok()?.pointer()
        };
        let scale = version
            .pointer("/subresources/scale")
            .is_some()
            .then(|| {
                Some(ScalePaths {
                    spec_replicas: pointer("specReplicasPath")?,
                    status_replicas: pointer("statusReplicasPath")?,
                    label_selector: pointer("labelSelectorPath"),
                })
            })
            .flatten();
        let has_defaults = schema.as_ref().is_some_and(Schema::has_defaults);
        let apply = schema.as_ref().map(Schema::apply_schema);
        Self {
            apply,
            schema,
            columns: printer::columns(version),
            selectable,
            scale,
            has_defaults,
            terminating: AtomicBool::new(false),
        }
    }

    /// Refuses creates from now on (the CRD is being deleted).
    pub fn terminate(&self) {
        self.terminating.store(true, Ordering::Relaxed);
    }
}

/// Field-selector names live as long as the server: interned, so that a CRD installed and
/// removed again does not leak a copy each time.
fn intern(name: &str) -> &'static str {
    static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    match names.get(name) {
        Some(n) => n,
        None => {
            let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
            names.insert(leaked);
            leaked
        }
    }
}

impl Strategy for CustomResourceStrategy {
    fn apply_schema(&self) -> Option<&Custom> {
        self.apply.as_ref()
    }

    fn default_on_read(&self, object: &mut Value) -> bool {
        self.schema
            .as_ref()
            .filter(|_| self.has_defaults)
            .is_some_and(|schema| schema.apply_defaults(object))
    }

    fn check_create(&self) -> crate::Result<()> {
        if self.terminating.load(Ordering::Relaxed) {
            return Err(crate::ApiError::with_code(
                405,
                "MethodNotAllowed",
                "create not allowed while custom resource definition is terminating",
            ));
        }
        Ok(())
    }

    fn prepare_for_create(&self, object: &mut Value) {
        if let Some(schema) = &self.schema {
            schema.apply_defaults(object);
        }
    }

    fn prepare_for_update(&self, object: &mut Value, _old: &Value) {
        if let Some(schema) = &self.schema {
            schema.apply_defaults(object);
        }
    }

    fn validate(&self, object: &Value) -> Vec<FieldError> {
        self.schema
            .as_ref()
            .map(|s| s.validate(object, None))
            .unwrap_or_default()
    }

    fn validate_update(&self, object: &Value, old: &Value) -> Vec<FieldError> {
        self.schema
            .as_ref()
            .map(|s| s.validate(object, Some(old)))
            .unwrap_or_default()
    }

    fn fields(&self, object: &Value) -> Vec<(&'static str, String)> {
        self.selectable
            .iter()
            .map(|(name, path)| {
                let value = match path.find(object).first() {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                (*name, value)
            })
            .collect()
    }

    fn unknown_fields(&self, object: &mut Value) -> Vec<String> {
        match &self.schema {
            Some(schema) => schema
                .prune(object)
                .into_iter()
                .map(|f| f.trim_start_matches('.').to_string())
                .collect(),
            None => Vec::new(),
        }
    }

    fn table_columns(&self) -> Option<Vec<Value>> {
        Some(printer::definitions(&self.columns))
    }

    fn table_row(&self, object: &Value, now: jiff::Timestamp) -> Vec<Value> {
        printer::cells(&self.columns, object, now)
    }

    fn scale_paths(&self) -> Option<&ScalePaths> {
        self.scale.as_ref()
    }
}
