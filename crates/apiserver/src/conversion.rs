//! Conversion between the forms of one object: the form it is stored in, the form handlers work
//! on (strategies, admission), and the form it is served in. Every conversion goes through
//! [`Converter`], async and fallible, because one of them calls out:
//!
//! - **Custom resources** are handled in the request's version (as upstream, whose internal
//!   version of a custom resource is whatever version it was decoded in), stored in the CRD's
//!   storage version, and read back from whatever version each object was stored in (the storage
//!   version may have changed since). With conversion `None` only `apiVersion` changes
//!   (upstream's `nopConverter`); with `Webhook` the objects not already in the desired version
//!   are sent, all in one `ConversionReview` (a list converts in one call), to the CRD's
//!   webhook, and its answer is checked as upstream's `webhookConverter` checks it: the uid,
//!   `result.status` `Success` (else its message), as many objects as sent, each in the desired
//!   version and of the same kind, with the same name, namespace and uid; metadata other than
//!   labels and annotations is restored from the original.
//! - **`events.k8s.io/v1` Events** are stored and handled as core `v1` Events (as upstream, they
//!   share one storage), so kubectl describe sees events written through either API. Field
//!   mapping as upstream's `events/v1` conversion: regarding ⇄ involvedObject, note ⇄ message,
//!   reportingController ⇄ reportingComponent, deprecatedSource/FirstTimestamp/LastTimestamp/Count
//!   ⇄ source/firstTimestamp/lastTimestamp/count.
//!
//! - **`autoscaling/v1` HorizontalPodAutoscalers** are stored and handled as `autoscaling/v2`
//!   ones ([`skiff_apimachinery::autoscaling`], upstream's round-trip annotations); a v1 object
//!   whose round-trip annotation is not JSON is a 400.
//!
//! A failed conversion is a `Status` with upstream's message (`conversion webhook for
//! stable.example.com/v1, Kind=CronTab failed: …`): on reads a 500 without a reason (upstream
//! fails while encoding the response), on writes a 500 `InternalError` (upstream fails while
//! encoding for storage), before anything is stored.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Value, json};
use skiff_apimachinery::autoscaling;
use skiff_apimachinery::catalog::ResourceType;
use skiff_apimachinery::validation::{FieldPath, validate_annotations, validate_labels};

use crate::error::ApiError;
use crate::webhook_client::{Caller, ClientConfig};

/// How long a conversion webhook may take (upstream's webhook client default).
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// The ConversionReview versions the server speaks, in the order it prefers them.
const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];

/// (new API field, core field) pairs that are renamed one to one.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Why a conversion failed, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// None of the CRD's `conversionReviewVersions` is one the server speaks.
    #[error("no supported conversion review versions")]
    NoReviewVersion,
    /// The call failed, or its answer was malformed or not `Success`.
    #[error("conversion webhook for {gvk} failed: {why}")]
    Call { gvk: String, why: String },
    /// The answer held another number of objects than were sent.
    #[error("conversion webhook for {gvk} returned {got} objects, expected {expected}")]
    Count {
        gvk: String,
        got: usize,
        expected: usize,
    },
    /// A converted object is of the wrong version or kind, or another object.
    #[error("conversion webhook for {gvk} returned invalid {what}: {why}")]
    Invalid {
        gvk: String,
        what: String,
        why: String,
    },
    /// A client's object cannot be read in the form the server handles (a 400 on writes).
    #[error("{0}")]
    Decode(String),
    /// A converted object's labels or annotations cannot be kept.
    #[error("conversion webhook for {gvk} returned invalid metadata{at}: {why}")]
    Metadata {
        gvk: String,
        at: String,
        why: String,
    },
}

impl Error {
    /// As a read answers it: upstream fails while encoding the response, a 500 whose reason is
    /// unknown (`Error from server: conversion webhook for …`).
    fn on_read(self) -> ApiError {
        ApiError::with_code(500, "", self.to_string())
    }

    /// As a write answers it: a 500 `InternalError`.
    fn on_write(self) -> ApiError {
        match self {
            Error::Decode(why) => ApiError::bad_request(why),
            e => ApiError::internal(e.to_string()),
        }
    }
}

/// How a CRD's conversion is configured (`spec.conversion.strategy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Only `apiVersion` changes.
    None,
    /// A ConversionReview is sent to `client`, in the first of `review_versions` the server
    /// speaks.
    Webhook {
        client: ClientConfig,
        review_versions: Vec<String>,
    },
}

/// What converting the objects of one CRD needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Custom {
    /// The version objects are written in.
    pub storage: String,
    /// How many versions the CRD has (with one, nothing ever converts).
    pub versions: usize,
    pub strategy: Strategy,
}

impl Custom {
    /// Reads a (valid) CRD.
    pub fn from_crd(crd: &Value) -> Custom {
        let conversion = &crd["spec"]["conversion"];
        let strategy = match conversion["strategy"].as_str() {
            Some("Webhook") => Strategy::Webhook {
                client: ClientConfig::parse(&conversion["webhook"]["clientConfig"]),
                review_versions: conversion["webhook"]["conversionReviewVersions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            },
            _ => Strategy::None,
        };
        Custom {
            storage: crate::crd::definition::storage_version(crd)
                .unwrap_or("")
                .to_string(),
            versions: crate::crd::definition::versions(crd).count(),
            strategy,
        }
    }
}

/// Which form of an object a conversion produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// As the request's version serves it.
    Served,
    /// As handlers, strategies and admission work on it.
    Internal,
    /// As it is written to the store.
    Storage,
}

/// The one converter of a server: the conversions of the custom resources served now, and the
/// webhook client their webhooks are called with.
pub struct Converter {
    /// By `group/plural`, replaced whole when a CRD changes. A plain lock, never held across an
    /// await.
    custom: RwLock<HashMap<String, Arc<Custom>>>,
    caller: Arc<dyn Caller>,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter").finish_non_exhaustive()
    }
}

fn custom_key(group: &str, plural: &str) -> String {
    format!("{group}/{plural}")
}

fn is_events_api(rt: &ResourceType) -> bool {
    rt.group == "events.k8s.io" && rt.plural == "events"
}

fn api_version_of(obj: &Value) -> &str {
    obj.get("apiVersion").and_then(Value::as_str).unwrap_or("")
}

fn kind_of(obj: &Value) -> &str {
    obj.get("kind").and_then(Value::as_str).unwrap_or("")
}

impl Converter {
    /// A converter calling conversion webhooks with `caller`, knowing no custom resource yet.
    pub fn new(caller: Arc<dyn Caller>) -> Converter {
        Converter {
            custom: RwLock::default(),
            caller,
        }
    }

    /// Sets how the versions of the custom resource `group`/`plural` convert (its CRD is served
    /// or changed).
    pub fn set(&self, group: &str, plural: &str, custom: Custom) {
        let mut all = self.custom.write().unwrap_or_else(|e| e.into_inner());
        all.insert(custom_key(group, plural), Arc::new(custom));
    }

    /// Forgets `group`/`plural` (no longer served).
    pub fn remove(&self, group: &str, plural: &str) {
        let mut all = self.custom.write().unwrap_or_else(|e| e.into_inner());
        all.remove(&custom_key(group, plural));
    }

    fn custom(&self, rt: &ResourceType) -> Option<Arc<Custom>> {
        let all = self.custom.read().unwrap_or_else(|e| e.into_inner());
        all.get(&custom_key(&rt.group, &rt.plural)).cloned()
    }

    /// Whether objects of `rt` may be served in a different form than stored: Events through
    /// the new API, and custom resources whose CRD has several versions (an object may be
    /// stored in any of them).
    pub fn needed(&self, rt: &ResourceType) -> bool {
        if is_events_api(rt) || rt.storage_version.is_some() {
            return true;
        }
        !rt.builtin && self.custom(rt).is_some_and(|c| c.versions > 1)
    }

    /// `obj` (stored or handled) as `rt` serves it.
    pub async fn to_external(&self, rt: &ResourceType, obj: Value) -> crate::Result<Value> {
        let mut out = self
            .convert(rt, vec![obj], Form::Served, false)
            .await
            .map_err(Error::on_read)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// The objects of a list as `rt` serves them, converted in one call.
    pub async fn to_external_all(
        &self,
        rt: &ResourceType,
        objects: Vec<Value>,
    ) -> crate::Result<Vec<Value>> {
        self.convert(rt, objects, Form::Served, true)
            .await
            .map_err(Error::on_read)
    }

    /// `obj` (received through `rt`, or stored) in the form handlers work on.
    pub async fn to_internal(&self, rt: &ResourceType, obj: Value) -> crate::Result<Value> {
        let mut out = self
            .convert(rt, vec![obj], Form::Internal, false)
            .await
            .map_err(Error::on_write)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// `obj` (handled) in the form written to the store.
    pub async fn to_storage(&self, rt: &ResourceType, obj: Value) -> crate::Result<Value> {
        let mut out = self
            .convert(rt, vec![obj], Form::Storage, false)
            .await
            .map_err(Error::on_write)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// Converts `objects` of `rt` to `form`; `list` says they are the items of a list (for
    /// upstream's messages).
    async fn convert(
        &self,
        rt: &ResourceType,
        objects: Vec<Value>,
        form: Form,
        list: bool,
    ) -> Result<Vec<Value>, Error> {
        if is_events_api(rt) {
            return Ok(objects.into_iter().map(|o| event(rt, o, form)).collect());
        }
        if rt.builtin {
            if rt.storage_version.is_none() {
                return Ok(objects);
            }
            return objects
                .into_iter()
                .map(|o| builtin_view(rt, o, form))
                .collect();
        }
        let custom = self.custom(rt);
        let version = match (form, &custom) {
            (Form::Storage, Some(c)) => c.storage.as_str(),
            (Form::Storage, None) => rt.storage_version.as_deref().unwrap_or(&rt.version),
            _ => rt.version.as_str(),
        };
        let desired = format!("{}/{version}", rt.group);
        match custom.as_deref().map(|c| &c.strategy) {
            Some(Strategy::Webhook {
                client,
                review_versions,
            }) => {
                let call = WebhookCall {
                    caller: &*self.caller,
                    client,
                    review_versions,
                    desired: &desired,
                };
                call.convert(rt, objects, list).await
            }
            _ => Ok(objects
                .into_iter()
                .map(|mut o| {
                    if let Some(map) = o.as_object_mut() {
                        map.insert("apiVersion".into(), json!(desired));
                    }
                    o
                })
                .collect()),
        }
    }
}

/// An object of a built-in version served as a view of its storage version (so far only
/// `autoscaling/v1` HorizontalPodAutoscalers) in `form`.
fn builtin_view(rt: &ResourceType, obj: Value, form: Form) -> Result<Value, Error> {
    let served = api_version_of(&obj) == rt.api_version();
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("autoscaling", "HorizontalPodAutoscaler") if obj.is_object() => match form {
            Form::Served if !served => Ok(autoscaling::hpa_to_v1(&obj)),
            Form::Internal | Form::Storage if served => {
                autoscaling::hpa_from_v1(&obj).map_err(Error::Decode)
            }
            _ => Ok(obj),
        },
        _ => Ok(obj),
    }
}

/// An Event in `form`: the new API's fields when served, the core ones otherwise.
fn event(rt: &ResourceType, obj: Value, form: Form) -> Value {
    let core = form != Form::Served;
    if !obj.is_object() || (api_version_of(&obj) == "v1") == core {
        return obj;
    }
    if !core {
        return rename(
            obj,
            EVENT_FIELDS.iter().map(|(new, core)| (*core, *new)),
            &rt.api_version(),
        );
    }
    let mut out = rename(obj, EVENT_FIELDS.iter().copied(), "v1");
    // Core Events require a source component for old readers; upstream fills it from
    // reportingController when converting.
    if let Some(map) = out.as_object_mut()
        && !map.contains_key("source")
        && let Some(component) = map.get("reportingComponent").cloned()
    {
        map.insert("source".into(), json!({"component": component}));
    }
    out
}

fn rename(
    obj: Value,
    pairs: impl Iterator<Item = (&'static str, &'static str)>,
    api_version: &str,
) -> Value {
    let Value::Object(mut map) = obj else {
        return obj;
    };
    for (from, to) in pairs {
        if let Some(v) = map.remove(from) {
            map.insert(to.to_string(), v);
        }
    }
    map.insert("apiVersion".into(), json!(api_version));
    Value::Object(map)
}

/// One conversion through a CRD's webhook.
struct WebhookCall<'a> {
    caller: &'a dyn Caller,
    client: &'a ClientConfig,
    review_versions: &'a [String],
    /// `group/version` the objects are converted to.
    desired: &'a str,
}

impl WebhookCall<'_> {
    /// Converts the objects not already in the desired version, in one review.
    async fn convert(
        &self,
        rt: &ResourceType,
        mut objects: Vec<Value>,
        list: bool,
    ) -> Result<Vec<Value>, Error> {
        let pending: Vec<usize> = (0..objects.len())
            .filter(|i| objects[*i].is_object() && api_version_of(&objects[*i]) != self.desired)
            .collect();
        let Some(first) = pending.first() else {
            return Ok(objects);
        };
        // Upstream names what it was asked to convert: the object, or the list.
        let gvk = if list {
            format!("{}, Kind={}List", self.desired, rt.kind)
        } else {
            let o = &objects[*first];
            format!("{}, Kind={}", api_version_of(o), kind_of(o))
        };
        let review_version = self
            .review_versions
            .iter()
            .find_map(|v| REVIEW_VERSIONS.iter().find(|k| **k == v.as_str()))
            .ok_or(Error::NoReviewVersion)?;
        let uid = uuid::Uuid::new_v4().to_string();
        let sent: Vec<&Value> = pending.iter().map(|i| &objects[*i]).collect();
        let review = json!({
            "apiVersion": format!("apiextensions.k8s.io/{review_version}"),
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": self.desired, "objects": sent},
        });
        let answer = self
            .caller
            .call(self.client, WEBHOOK_TIMEOUT, &review)
            .await
            .and_then(|a| converted_objects(review_version, &uid, a))
            .map_err(|why| Error::Call {
                gvk: gvk.clone(),
                why,
            })?;
        if answer.len() != pending.len() {
            return Err(Error::Count {
                gvk,
                got: answer.len(),
                expected: pending.len(),
            });
        }
        for (n, (converted, i)) in answer.into_iter().zip(pending).enumerate() {
            // Upstream numbers a list's objects from 1 in these messages (it counts the object
            // before checking it), and a single object's type from index 0.
            let (typed, same, meta_at) = if list {
                let at = format!("converted object at index {}", n + 1);
                (at.clone(), at, format!(" in object at index {}", n + 1))
            } else {
                (
                    "object at index 0".to_string(),
                    "object".to_string(),
                    String::new(),
                )
            };
            let invalid = |what: String, why: String| Error::Invalid {
                gvk: gvk.clone(),
                what,
                why,
            };
            let original = &objects[i];
            check_type(original, &converted, self.desired).map_err(|why| invalid(typed, why))?;
            check_identity(original, &converted).map_err(|why| invalid(same, why))?;
            let restored =
                restore_metadata(original, converted).map_err(|why| Error::Metadata {
                    gvk: gvk.clone(),
                    at: meta_at,
                    why,
                })?;
            objects[i] = restored;
        }
        Ok(objects)
    }
}

/// The `convertedObjects` of a ConversionReview answer (upstream's
/// `getConvertedObjectsFromResponse`); `Err` says why there are none. A v1beta1 answer's kind
/// and uid are not checked, as upstream.
fn converted_objects(review_version: &str, uid: &str, answer: Value) -> Result<Vec<Value>, String> {
    if review_version == "v1" {
        let (api_version, kind) = (api_version_of(&answer), kind_of(&answer));
        if (api_version, kind) != ("apiextensions.k8s.io/v1", "ConversionReview") {
            return Err(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {api_version}, Kind={kind}"
            ));
        }
    }
    let Some(Value::Object(mut response)) = answer.get("response").cloned() else {
        return Err("no response provided".into());
    };
    if review_version == "v1" {
        let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
        if got != uid {
            return Err(format!("expected response.uid={uid:?}, got {got:?}"));
        }
    }
    let result = response.get("result").cloned().unwrap_or_default();
    let status = result["status"].as_str().unwrap_or("");
    if status != "Success" {
        return Err(match result["message"].as_str() {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => format!("response.result.status was '{status}', not 'Success'"),
        });
    }
    match response.remove("convertedObjects") {
        Some(Value::Array(objects)) => Ok(objects),
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(_) => Err("response.convertedObjects must be a list".into()),
    }
}

/// Go's name for a JSON value's type, as upstream's `%T` of decoded JSON prints it.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// A converted object is an object in the desired version, of the original's kind.
fn check_type(original: &Value, converted: &Value, desired: &str) -> Result<(), String> {
    if !converted.is_object() {
        return Err(format!("expected an object, got {}", go_type(converted)));
    }
    let got = api_version_of(converted);
    if got != desired {
        return Err(format!(
            "invalid groupVersion (expected {desired}, received {got})"
        ));
    }
    let (want, got) = (kind_of(original), kind_of(converted));
    if want != got {
        return Err(format!("invalid kind (expected {want}, received {got})"));
    }
    Ok(())
}

/// A converted object keeps the original's name, namespace and uid (upstream's
/// `validateConvertedObject`).
fn check_identity(original: &Value, converted: &Value) -> Result<(), String> {
    for (field, label) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
        let meta = |o: &Value| {
            o.pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (want, got) = (meta(original), meta(converted));
        if want != got {
            return Err(format!("must have the same {label}: {want} != {got}"));
        }
    }
    Ok(())
}

/// The converted object with the original's metadata, but the converted labels and
/// annotations (upstream's `restoreObjectMeta`).
fn restore_metadata(original: &Value, mut converted: Value) -> Result<Value, String> {
    let answered = match converted.get("metadata") {
        None => return Err("missing metadata in converted object".into()),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            ));
        }
    };
    let mut meta = match original.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    for field in ["labels", "annotations"] {
        let answer = match answered.get(field) {
            None | Some(Value::Null) => {
                meta.remove(field);
                continue;
            }
            Some(Value::Object(a)) => a,
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(other)
                ));
            }
        };
        if let Some((k, v)) = answer.iter().find(|(_, v)| !v.is_string()) {
            return Err(format!(
                "metadata.{field}[{k}] must be a string, but is {} in converted object",
                go_type(v)
            ));
        }
        let answer = Value::Object(answer.clone());
        if meta.get(field) != Some(&answer) {
            // Upstream's path for annotations reads `metadata.annotation`.
            let errs = if field == "labels" {
                validate_labels(&answer, &FieldPath::new("metadata").child("labels"))
            } else {
                validate_annotations(&answer, &FieldPath::new("metadata").child("annotation"))
            };
            match errs.len() {
                0 => {}
                1 => return Err(errs[0].to_string()),
                _ => {
                    let all: Vec<String> = errs.iter().map(ToString::to_string).collect();
                    return Err(format!("[{}]", all.join(", ")));
                }
            }
        }
        meta.insert(field.to_string(), answer);
    }
    converted["metadata"] = Value::Object(meta);
    Ok(converted)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::webhook_client::Endpoint;
    use async_trait::async_trait;
    use skiff_apimachinery::catalog::{CRUD, lookup};
    use std::sync::Mutex;

    /// A caller for tests that expect no webhook call.
    struct NoWebhooks;

    #[async_trait]
    impl Caller for NoWebhooks {
        async fn call(
            &self,
            _client: &ClientConfig,
            _timeout: Duration,
            _review: &Value,
        ) -> Result<Value, String> {
            Err("no webhooks in this test".into())
        }
    }

    /// A converter with no custom resources (built-in kinds and Events only).
    pub fn converter() -> Arc<Converter> {
        Arc::new(Converter::new(Arc::new(NoWebhooks)))
    }

    /// A conversion webhook between v1 `spec.cronSpec` and v2 `spec.schedule`, answering as
    /// told by `how`; records the reviews it was sent.
    #[derive(Default)]
    struct CronTabs {
        reviews: Mutex<Vec<Value>>,
        how: Mutex<&'static str>,
    }

    #[async_trait]
    impl Caller for CronTabs {
        async fn call(
            &self,
            _client: &ClientConfig,
            timeout: Duration,
            review: &Value,
        ) -> Result<Value, String> {
            assert_eq!(timeout, Duration::from_secs(30));
            self.reviews.lock().unwrap().push(review.clone());
            let how = *self.how.lock().unwrap();
            if how == "down" {
                return Err("Post \"https://127.0.0.1:1/convert?timeout=30s\": dial tcp 127.0.0.1:1: connect: connection refused".into());
            }
            let request = &review["request"];
            let desired = request["desiredAPIVersion"].as_str().unwrap();
            let mut converted: Vec<Value> = request["objects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    let mut o = o.clone();
                    let spec = o["spec"].as_object_mut().unwrap();
                    if desired.ends_with("/v2") {
                        let v = spec.remove("cronSpec").unwrap_or_default();
                        spec.insert("schedule".into(), v);
                    } else {
                        let v = spec.remove("schedule").unwrap_or_default();
                        spec.insert("cronSpec".into(), v);
                    }
                    o["apiVersion"] = json!(desired);
                    o["metadata"]["labels"] = json!({"converted": "yes"});
                    o["metadata"]["generation"] = json!(99);
                    o
                })
                .collect();
            let mut result = json!({"status": "Success"});
            match how {
                "refuse" => result = json!({"status": "Failure", "message": "cronSpec is bad"}),
                "fewer" => {
                    converted.pop();
                }
                "rename" => converted[0]["metadata"]["name"] = json!("other"),
                "version" => converted[0]["apiVersion"] = json!("stable.example.com/v3"),
                _ => {}
            }
            let uid = if how == "uid" {
                json!("wrong")
            } else {
                request["uid"].clone()
            };
            Ok(
                json!({"apiVersion": review["apiVersion"], "kind": "ConversionReview",
                      "response": {"uid": uid, "result": result,
                                   "convertedObjects": converted}}),
            )
        }
    }

    fn crontabs(version: &str) -> ResourceType {
        ResourceType {
            group: "stable.example.com".into(),
            version: version.into(),
            kind: "CronTab".into(),
            plural: "crontabs".into(),
            singular: "crontab".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            verbs: CRUD.iter().map(|v| v.to_string()).collect(),
            subresources: vec![],
            builtin: false,
            storage_version: (version != "v2").then(|| "v2".into()),
        }
    }

    fn webhook_converter(review_versions: &[&str]) -> (Arc<CronTabs>, Converter) {
        let hook = Arc::new(CronTabs::default());
        let converter = Converter::new(hook.clone());
        converter.set(
            "stable.example.com",
            "crontabs",
            Custom {
                storage: "v2".into(),
                versions: 2,
                strategy: Strategy::Webhook {
                    client: ClientConfig {
                        endpoint: Endpoint::Url("https://127.0.0.1:1/convert".into()),
                        ca_bundle: None,
                    },
                    review_versions: review_versions.iter().map(|v| v.to_string()).collect(),
                },
            },
        );
        (hook, converter)
    }

    fn v1(name: &str) -> Value {
        json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
               "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                            "generation": 1, "resourceVersion": "7"},
               "spec": {"cronSpec": "* * * * */5"}})
    }

    #[tokio::test]
    async fn a_new_api_event_round_trips_through_the_core_form() {
        let rt = lookup("events.k8s.io", "v1", "events").unwrap();
        let c = converter();
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                         "metadata": {"name": "e1"}, "regarding": {"kind": "Pod", "name": "p"},
                         "note": "Pulled image", "reason": "Pulled",
                         "reportingController": "skiff/kubelet", "type": "Normal"});
        let core = c.to_internal(rt, new.clone()).await.unwrap();
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "Pulled image");
        assert_eq!(core["source"]["component"], "skiff/kubelet");
        assert_eq!(c.to_storage(rt, core.clone()).await.unwrap(), core);
        let back = c.to_external(rt, core).await.unwrap();
        assert_eq!(back["regarding"], new["regarding"]);
        assert_eq!(back["note"], new["note"]);
        assert_eq!(back["apiVersion"], "events.k8s.io/v1");
        assert_eq!(c.to_external(rt, back.clone()).await.unwrap(), back);
    }

    #[tokio::test]
    async fn a_v1_autoscaler_is_handled_and_stored_in_v2_and_served_back_in_v1() {
        let rt = lookup("autoscaling", "v1", "horizontalpodautoscalers").unwrap();
        let c = converter();
        assert!(c.needed(rt));
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                        "metadata": {"name": "web"},
                        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                                 "maxReplicas": 3, "targetCPUUtilizationPercentage": 40}});
        let internal = c.to_internal(rt, v1.clone()).await.unwrap();
        assert_eq!(internal["apiVersion"], "autoscaling/v2");
        assert_eq!(
            internal["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            40
        );
        let stored = c.to_storage(rt, internal.clone()).await.unwrap();
        assert_eq!(stored, internal);
        assert_eq!(c.to_external(rt, stored).await.unwrap(), v1);

        let mut broken = v1;
        broken["metadata"]["annotations"] =
            json!({autoscaling::METRIC_SPECS_ANNOTATION: "not json"});
        let err = c.to_internal(rt, broken).await.unwrap_err();
        assert_eq!(err.code, 400, "{err:?}");
    }

    #[tokio::test]
    async fn built_in_resources_pass_through() {
        let rt = lookup("", "v1", "events").unwrap();
        let obj = json!({"message": "m"});
        let c = converter();
        assert!(!c.needed(rt));
        assert_eq!(c.to_external(rt, obj.clone()).await.unwrap(), obj);
    }

    #[tokio::test]
    async fn strategy_none_only_changes_the_api_version() {
        let c = converter();
        c.set(
            "stable.example.com",
            "crontabs",
            Custom {
                storage: "v2".into(),
                versions: 2,
                strategy: Strategy::None,
            },
        );
        let rt = crontabs("v1");
        assert!(c.needed(&rt));
        let stored = c.to_storage(&rt, v1("a")).await.unwrap();
        assert_eq!(stored["apiVersion"], "stable.example.com/v2");
        assert_eq!(stored["spec"], v1("a")["spec"]);
        let served = c.to_external(&rt, stored).await.unwrap();
        assert_eq!(served, v1("a"));
    }

    #[tokio::test]
    async fn a_webhook_converts_to_the_storage_version_and_back() {
        let (hook, c) = webhook_converter(&["v1"]);
        let rt = crontabs("v1");
        let stored = c.to_storage(&rt, v1("a")).await.unwrap();
        assert_eq!(stored["apiVersion"], "stable.example.com/v2");
        assert_eq!(stored["spec"], json!({"schedule": "* * * * */5"}));
        // Labels from the webhook are kept; other metadata is the original's.
        assert_eq!(stored["metadata"]["labels"], json!({"converted": "yes"}));
        assert_eq!(stored["metadata"]["generation"], 1);
        assert_eq!(stored["metadata"]["resourceVersion"], "7");
        let review = hook.reviews.lock().unwrap()[0].clone();
        assert_eq!(review["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(review["kind"], "ConversionReview");
        assert_eq!(
            review["request"]["desiredAPIVersion"],
            "stable.example.com/v2"
        );
        let back = c.to_external(&rt, stored).await.unwrap();
        assert_eq!(back["spec"], json!({"cronSpec": "* * * * */5"}));
        assert_eq!(back["apiVersion"], "stable.example.com/v1");
    }

    #[tokio::test]
    async fn a_list_converts_in_one_review_of_only_the_objects_in_another_version() {
        let (hook, c) = webhook_converter(&["v1beta1", "v1"]);
        let rt = crontabs("v1");
        let stored = c.to_storage(&rt, v1("b")).await.unwrap();
        hook.reviews.lock().unwrap().clear();
        let out = c
            .to_external_all(&rt, vec![v1("a"), stored, v1("c")])
            .await
            .unwrap();
        let reviews = hook.reviews.lock().unwrap().clone();
        assert_eq!(reviews.len(), 1);
        assert_eq!(reviews[0]["apiVersion"], "apiextensions.k8s.io/v1beta1");
        let sent = reviews[0]["request"]["objects"].as_array().unwrap();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0]["metadata"]["name"], "b");
        let names: Vec<&str> = out
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(out.iter().all(|o| o["spec"]["cronSpec"] == "* * * * */5"));
        // Nothing to convert: no call.
        c.to_external_all(&rt, vec![v1("a")]).await.unwrap();
        assert_eq!(hook.reviews.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn failures_are_statuses_with_upstreams_message() {
        let (hook, c) = webhook_converter(&["v1"]);
        let rt = crontabs("v1");
        let cases = [
            (
                "down",
                "conversion webhook for stable.example.com/v1, Kind=CronTab failed: Post \"https://127.0.0.1:1/convert?timeout=30s\": dial tcp 127.0.0.1:1: connect: connection refused",
            ),
            (
                "refuse",
                "conversion webhook for stable.example.com/v1, Kind=CronTab failed: cronSpec is bad",
            ),
            (
                "uid",
                "conversion webhook for stable.example.com/v1, Kind=CronTab failed: expected response.uid=",
            ),
            (
                "fewer",
                "conversion webhook for stable.example.com/v1, Kind=CronTab returned 0 objects, expected 1",
            ),
            (
                "rename",
                "conversion webhook for stable.example.com/v1, Kind=CronTab returned invalid object: must have the same name: a != other",
            ),
            (
                "version",
                "conversion webhook for stable.example.com/v1, Kind=CronTab returned invalid object at index 0: invalid groupVersion (expected stable.example.com/v2, received stable.example.com/v3)",
            ),
        ];
        for (how, message) in cases {
            *hook.how.lock().unwrap() = how;
            let err = c.to_storage(&rt, v1("a")).await.unwrap_err();
            assert_eq!((err.code, err.reason), (500, "InternalError"), "{how}");
            assert!(
                err.message
                    .starts_with(&format!("Internal error occurred: {message}")),
                "{how}: {}",
                err.message
            );
        }
        *hook.how.lock().unwrap() = "refuse";
        let stored = json!({"apiVersion": "stable.example.com/v2", "kind": "CronTab",
                            "metadata": {"name": "a"}, "spec": {"schedule": "x"}});
        let err = c.to_external(&rt, stored.clone()).await.unwrap_err();
        assert_eq!((err.code, err.reason), (500, ""));
        assert_eq!(
            err.message,
            "conversion webhook for stable.example.com/v2, Kind=CronTab failed: cronSpec is bad"
        );
        let err = c
            .to_external_all(&rt, vec![stored.clone()])
            .await
            .unwrap_err();
        assert_eq!(
            err.message,
            "conversion webhook for stable.example.com/v1, Kind=CronTabList failed: cronSpec is bad"
        );
        *hook.how.lock().unwrap() = "rename";
        let err = c.to_external_all(&rt, vec![stored]).await.unwrap_err();
        assert_eq!(
            err.message,
            "conversion webhook for stable.example.com/v1, Kind=CronTabList returned invalid converted object at index 1: must have the same name: a != other"
        );
    }

    #[tokio::test]
    async fn a_webhook_speaking_no_known_review_version_is_not_called() {
        let (hook, c) = webhook_converter(&["v2"]);
        let err = c.to_storage(&crontabs("v1"), v1("a")).await.unwrap_err();
        assert_eq!(
            err.message,
            "Internal error occurred: no supported conversion review versions"
        );
        assert!(hook.reviews.lock().unwrap().is_empty());
    }

    #[test]
    fn webhook_metadata_may_change_only_labels_and_annotations_and_only_validly() {
        let original = v1("a");
        let mut converted = original.clone();
        converted["metadata"]["annotations"] = json!({"a": "b"});
        converted["metadata"]["finalizers"] = json!(["x"]);
        let out = restore_metadata(&original, converted.clone()).unwrap();
        assert_eq!(out["metadata"]["annotations"], json!({"a": "b"}));
        assert!(out["metadata"].get("finalizers").is_none());
        converted["metadata"]["labels"] = json!({"n": 1});
        assert_eq!(
            restore_metadata(&original, converted.clone()).unwrap_err(),
            "metadata.labels[n] must be a string, but is int64 in converted object"
        );
        converted["metadata"]["labels"] = json!({"bad key!": "v"});
        assert!(
            restore_metadata(&original, converted.clone())
                .unwrap_err()
                .starts_with("metadata.labels: Invalid value: \"bad key!\"")
        );
        converted.as_object_mut().unwrap().remove("metadata");
        assert_eq!(
            restore_metadata(&original, converted).unwrap_err(),
            "missing metadata in converted object"
        );
    }
}
