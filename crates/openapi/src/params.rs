//! Query and path parameters of the generated operations, with Skiff's own descriptions of
//! what each does (the names, locations and types are upstream's).

use serde_json::{Value, json};

/// A query parameter with a primitive type.
pub(crate) fn query(name: &str, ty: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": ty, "uniqueItems": true},
    })
}

pub(crate) fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": description,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

pub(crate) fn pretty() -> Value {
    query(
        "pretty",
        "string",
        "If 'true', the output is indented for reading.",
    )
}

pub(crate) fn dry_run() -> Value {
    query(
        "dryRun",
        "string",
        "When present, the request is processed but nothing is persisted. The only valid value is All.",
    )
}

pub(crate) fn field_manager() -> Value {
    query(
        "fieldManager",
        "string",
        "Name of the actor making the change, recorded in managedFields; at most 128 printable characters. Required for apply patches.",
    )
}

pub(crate) fn field_validation() -> Value {
    query(
        "fieldValidation",
        "string",
        "How the server treats unknown or duplicate fields in the request body (POST, PUT, PATCH): Ignore drops them silently; Warn drops them and returns a Warning header for each (the default); Strict rejects the request with BadRequest listing every unknown and duplicate field.",
    )
}

pub(crate) fn write_params() -> Vec<Value> {
    vec![dry_run(), field_manager(), field_validation()]
}

pub(crate) fn list_params() -> Vec<Value> {
    vec![
        query(
            "allowWatchBookmarks",
            "boolean",
            "Ask for BOOKMARK watch events; the server may ignore the request.",
        ),
        query(
            "continue",
            "string",
            "The continue token of the previous page of a chunked list.",
        ),
        query(
            "fieldSelector",
            "string",
            "Restrict the list to objects whose fields match this selector.",
        ),
        query(
            "labelSelector",
            "string",
            "Restrict the list to objects whose labels match this selector.",
        ),
        query(
            "limit",
            "integer",
            "The maximum number of objects to return; more are reachable through the continue token.",
        ),
        query(
            "resourceVersion",
            "string",
            "The resource version the list or watch starts from.",
        ),
        query(
            "resourceVersionMatch",
            "string",
            "How resourceVersion applies to a list: Exact or NotOlderThan.",
        ),
        query(
            "sendInitialEvents",
            "boolean",
            "Start a watch with synthetic ADDED events for the current state, ended by a bookmark.",
        ),
        query(
            "timeoutSeconds",
            "integer",
            "Time limit of the list or watch call.",
        ),
        query(
            "watch",
            "boolean",
            "Stream add, update and delete notifications instead of returning a list.",
        ),
    ]
}

pub(crate) fn delete_params() -> Vec<Value> {
    vec![
        dry_run(),
        query(
            "gracePeriodSeconds",
            "integer",
            "Seconds before the object is deleted; zero deletes at once.",
        ),
        query(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            "boolean",
            "Delete an object whose stored data cannot be read or decoded.",
        ),
        query(
            "orphanDependents",
            "boolean",
            "Deprecated: use propagationPolicy. Whether dependents are orphaned.",
        ),
        query(
            "propagationPolicy",
            "string",
            "Garbage collection of dependents: Orphan, Background or Foreground.",
        ),
    ]
}

pub(crate) fn log_params() -> Vec<Value> {
    vec![
        query(
            "container",
            "string",
            "The container whose log to return; may be omitted when the pod has one container.",
        ),
        query("follow", "boolean", "Stream the log as it grows."),
        query(
            "insecureSkipTLSVerifyBackend",
            "boolean",
            "Do not verify the kubelet's serving certificate when fetching the log.",
        ),
        query("limitBytes", "integer", "Stop after this many bytes."),
        query(
            "previous",
            "boolean",
            "Return the log of the previous, terminated instance of the container.",
        ),
        query(
            "sinceSeconds",
            "integer",
            "Only lines newer than this many seconds.",
        ),
        query(
            "stream",
            "string",
            "Which stream to return: All, Stdout or Stderr.",
        ),
        query(
            "tailLines",
            "integer",
            "Only this many lines from the end of the log.",
        ),
        query(
            "timestamps",
            "boolean",
            "Prefix every line with an RFC3339 timestamp.",
        ),
    ]
}

pub(crate) fn connect_params(subresource: &str) -> Vec<Value> {
    match subresource {
        "portforward" => vec![query("ports", "integer", "Ports of the pod to forward.")],
        _ => {
            let mut params = vec![query(
                "container",
                "string",
                "The container to connect to; may be omitted when the pod has one container.",
            )];
            if subresource == "exec" {
                params.push(query(
                    "command",
                    "string",
                    "The command to run, one argument per parameter.",
                ));
            }
            params.extend([
                query(
                    "stderr",
                    "boolean",
                    "Stream the container's standard error.",
                ),
                query("stdin", "boolean", "Pass standard input to the container."),
                query(
                    "stdout",
                    "boolean",
                    "Stream the container's standard output.",
                ),
                query("tty", "boolean", "Allocate a terminal."),
            ]);
            params
        }
    }
}
