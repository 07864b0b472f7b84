//! POST: a new object, named or named from `generateName`, created by the registry.

use http::Response;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::read_object;
use crate::error::{ApiError, Result};
use crate::handlers::read::render;
use crate::handlers::{Body, Ctx};
use crate::registry::{self, Fields, name_of};

/// Characters of a `generateName` suffix (upstream's, without vowels and look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generated_name(base: &str) -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes[..5]
        .iter()
        .map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char)
        .collect();
    format!("{base}{suffix}")
}

pub async fn create(mut ctx: Ctx) -> Result<Response<Body>> {
    let (kind, api_version) = (ctx.rt.kind.clone(), ctx.rt.api_version());
    let mut obj = read_object(&mut ctx, &kind, &api_version).await?;
    if name_of(&obj).is_empty() {
        match obj
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
        {
            Some(base) if !base.is_empty() => {
                obj["metadata"]["name"] = json!(generated_name(base));
            }
            _ => {
                return Err(ApiError::invalid(
                    &ctx.rt.kind,
                    &ctx.rt.group,
                    "",
                    &[FieldError::required(
                        &FieldPath::new("metadata").child("name"),
                        "name or generateName is required",
                    )],
                ));
            }
        }
    }
    let created = registry::create(&ctx, obj, Fields::Record).await?;
    render(&ctx, 201, &created).await
}
