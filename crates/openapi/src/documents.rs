//! The serialized documents, built once per process, and how to answer requests for them as
//! kube-openapi does: content negotiation, ETags, and the hash in `/openapi/v3` URLs.
//!
//! Upstream behaviour kept here:
//! - `/openapi/v2` answers JSON or gnostic protobuf by `Accept` (406 otherwise), with a quoted
//!   ETag and `304 Not Modified` for a matching `If-None-Match`. Protobuf is labelled
//!   [`V2_PROTOBUF_ALT`] whichever spelling was asked for.
//! - `/openapi/v3` is an index `{"paths": {"apis/apps/v1": {"serverRelativeURL":
//!   "/openapi/v3/apis/apps/v1?hash=H"}}}` with H the hash of that document.
//! - `/openapi/v3/<gv>?hash=H` with the current H is immutable (`Cache-Control: public,
//!   immutable` and an `Expires` a year ahead, which the caller formats); a stale H is
//!   redirected (301) to the current URL; without `hash` the document is served plainly.
//!
//! Upstream's hash is the SHA-512 of the document in uppercase hex; Skiff's is a 128-bit
//! FNV-1a pair in uppercase hex. Clients treat it as opaque.
//!
//! The documents are kept gzip-compressed (1.1 MB instead of 5.3 MB resident for the life
//! of the process): a reply carries the compressed body, which the HTTP layer sends as is to a
//! client that accepts gzip (kubectl, through Go's transport) and inflates for one that does not.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::sync::{Arc, OnceLock};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::{Map, Value, json};

use crate::custom::{self, Custom};
use crate::schemas::{self, Registry, registry};
use crate::{proto, v2, v3};

/// Media type of the Swagger 2.0 document as protobuf, as kubectl asks for it (`Accept`).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The same without the `@`, which is the only spelling to answer with (`Content-Type`):
/// client-go parses the reply's media type, and `@` is not a token character, so answering
/// with [`V2_PROTOBUF`] fails every kubectl with "mime: unexpected content after media
/// subtype".
pub const V2_PROTOBUF_ALT: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
pub const JSON: &str = "application/json";

/// Bytes kept gzip-compressed.
#[derive(Debug)]
struct Gzipped(Vec<u8>);

impl Gzipped {
    /// Compresses `bytes` at gzip's fastest level: 1.1 MB for all 5.3 MB of documents (zlib's
    /// level 1 takes 22 ms for them; its default level saves 0.2 MB more for three times that).
    fn new(bytes: &[u8]) -> Gzipped {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
        // writing to a Vec cannot fail
        let _ = encoder.write_all(bytes);
        let mut gzip = encoder.finish().unwrap_or_default();
        gzip.shrink_to_fit();
        Gzipped(gzip)
    }

    /// The original bytes.
    fn inflate(&self) -> Vec<u8> {
        inflate(&self.0)
    }
}

/// The bytes `gzip` compresses (empty for an empty or corrupt stream).
fn inflate(gzip: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if !gzip.is_empty() && GzDecoder::new(gzip).read_to_end(&mut out).is_err() {
        out.clear();
    }
    out
}

/// One serialized document and the hash of its bytes.
#[derive(Debug)]
struct Served {
    doc: Gzipped,
    hash: String,
}

impl Served {
    fn new(bytes: &[u8]) -> Served {
        Served {
            doc: Gzipped::new(bytes),
            hash: hash(bytes),
        }
    }
}

/// Every OpenAPI document Skiff serves, serialized.
#[derive(Debug)]
pub struct Documents {
    /// Built when first asked for (a change of custom resources rebuilds the documents, and
    /// only old kubectl reads this one).
    v2: OnceLock<V2>,
    /// The custom resources described besides the built-in kinds.
    custom: Vec<Custom>,
    v3_index: Served,
    /// By index key (`api/v1`, `apis/apps/v1`); the built-in ones shared by every generation.
    v3: BTreeMap<String, Arc<Served>>,
}

/// The Swagger 2.0 document, as JSON and as protobuf.
#[derive(Debug)]
struct V2 {
    json: Served,
    protobuf: Gzipped,
}

impl V2 {
    fn new(registry: &Registry, group_versions: &[Map<String, Value>]) -> V2 {
        let doc = v2::document(registry, group_versions);
        V2 {
            protobuf: Gzipped::new(&proto::encode_document(&doc)),
            json: Served::new(&to_bytes(&doc)),
        }
    }
}

/// The paths of every built-in group version, by index key.
fn builtin_paths() -> Vec<(String, Map<String, Value>)> {
    schemas::served_group_versions()
        .into_iter()
        .map(|(group, version)| {
            let paths = v3::group_version_paths(registry(), &group, &version);
            (v3::index_key(&group, &version), paths)
        })
        .collect()
}

/// `custom` by the index key of its group version (`apis/example.com/v1`).
fn by_group_version(custom: &[Custom]) -> BTreeMap<String, Vec<&Custom>> {
    let mut out: BTreeMap<String, Vec<&Custom>> = BTreeMap::new();
    for c in custom {
        let key = v3::index_key(&c.resource.group, &c.resource.version);
        out.entry(key).or_default().push(c);
    }
    out
}

/// The `/openapi/v3` index of `v3`.
fn index(v3: &BTreeMap<String, Arc<Served>>) -> Served {
    let paths: Map<String, Value> = v3
        .iter()
        .map(|(key, served)| {
            let url = format!("/openapi/v3/{key}?hash={}", served.hash);
            (key.clone(), json!({"serverRelativeURL": url}))
        })
        .collect();
    Served::new(&to_bytes(&json!({ "paths": paths })))
}

/// The answer to one request for a document, for the HTTP layer to send as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    pub status: u16,
    /// Headers to set besides `Content-Length` and `Content-Encoding`; `Expires` is left to the
    /// caller (it needs the clock) and is due whenever `Cache-Control` says `immutable`.
    pub headers: Vec<(&'static str, String)>,
    /// The body, gzip-compressed; empty when there is none.
    pub gzip: &'a [u8],
}

impl Reply<'_> {
    fn empty(status: u16) -> Reply<'static> {
        Reply {
            status,
            headers: Vec::new(),
            gzip: &[],
        }
    }

    /// The body as it is without `Content-Encoding: gzip`.
    pub fn body(&self) -> Vec<u8> {
        inflate(self.gzip)
    }

    /// The value of header `name`, if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Documents {
    /// Generates and serializes every document of the built-in kinds (tens of milliseconds
    /// in release).
    pub fn build() -> Documents {
        let (keys, group_versions): (Vec<String>, Vec<Map<String, Value>>) =
            builtin_paths().into_iter().unzip();
        let v2 = V2::new(registry(), &group_versions);
        let v3: BTreeMap<String, Arc<Served>> = keys
            .into_iter()
            .zip(group_versions)
            .map(|(key, paths)| {
                let doc = v3::document(registry(), paths);
                (key, Arc::new(Served::new(&to_bytes(&doc))))
            })
            .collect();
        Documents {
            v2: OnceLock::from(v2),
            custom: Vec::new(),
            v3_index: index(&v3),
            v3,
        }
    }

    /// The built-in documents with `custom` resources added: their group versions' documents
    /// (those whose resources are unchanged since `previous` are kept from it), the index, and
    /// the Swagger 2.0 document when first asked for.
    pub fn with_custom(custom: Vec<Custom>, previous: &Documents) -> Documents {
        let before = by_group_version(&previous.custom);
        let mut v3 = Documents::global().v3.clone();
        for (key, members) in by_group_version(&custom) {
            let kept = previous
                .v3
                .get(&key)
                .filter(|_| before.get(&key) == Some(&members));
            let served = match kept {
                Some(served) => served.clone(),
                None => {
                    let registry = custom::registry(&members);
                    let mut paths = custom::group_version_paths(&registry, &members);
                    let paths = paths.remove(&key).unwrap_or_default();
                    Arc::new(Served::new(&to_bytes(&v3::document(&registry, paths))))
                }
            };
            v3.insert(key, served);
        }
        Documents {
            v2: OnceLock::new(),
            custom,
            v3_index: index(&v3),
            v3,
        }
    }

    /// The process-wide documents of the built-in kinds, built on first use.
    pub fn global() -> &'static Documents {
        static DOCUMENTS: OnceLock<Documents> = OnceLock::new();
        DOCUMENTS.get_or_init(Documents::build)
    }

    /// The Swagger 2.0 documents, built on first use.
    fn v2(&self) -> &V2 {
        self.v2.get_or_init(|| {
            let custom: Vec<&Custom> = self.custom.iter().collect();
            let registry = custom::registry(&custom);
            let mut group_versions: Vec<Map<String, Value>> =
                builtin_paths().into_iter().map(|(_, p)| p).collect();
            group_versions.extend(custom::group_version_paths(&registry, &custom).into_values());
            V2::new(&registry, &group_versions)
        })
    }

    /// The Swagger 2.0 document as JSON.
    pub fn v2_json(&self) -> Vec<u8> {
        self.v2().json.doc.inflate()
    }

    /// The Swagger 2.0 document as gnostic protobuf (`openapi.v2.Document`).
    pub fn v2_protobuf(&self) -> Vec<u8> {
        self.v2().protobuf.inflate()
    }

    /// The hash of the Swagger 2.0 document; the ETag is this in double quotes.
    pub fn v2_hash(&self) -> &str {
        &self.v2().json.hash
    }

    /// The `/openapi/v3` index.
    pub fn v3_index_json(&self) -> Vec<u8> {
        self.v3_index.doc.inflate()
    }

    /// The OpenAPI 3 document of `path` (`api/v1`, `apis/apps/v1`).
    pub fn v3_group_version(&self, path: &str) -> Option<Vec<u8>> {
        self.v3.get(path).map(|s| s.doc.inflate())
    }

    /// The hash of a group version's document, as in its `serverRelativeURL`.
    pub fn v3_hash(&self, path: &str) -> Option<&str> {
        self.v3.get(path).map(|s| s.hash.as_str())
    }

    /// The index keys of every group version served, sorted.
    pub fn v3_paths(&self) -> impl Iterator<Item = &str> {
        self.v3.keys().map(String::as_str)
    }

    /// `GET /openapi/v2` with the request's `Accept` and `If-None-Match` headers.
    pub fn serve_v2(&self, accept: Option<&str>, if_none_match: Option<&str>) -> Reply<'_> {
        let Some(format) = negotiate(accept, &[JSON, V2_PROTOBUF, V2_PROTOBUF_ALT]) else {
            return Reply::empty(406);
        };
        let v2 = self.v2();
        let (content_type, gzip) = if format == JSON {
            (JSON, &v2.json.doc)
        } else {
            (V2_PROTOBUF_ALT, &v2.protobuf)
        };
        let etag = format!("\"{}\"", v2.json.hash);
        let mut headers = vec![
            ("Content-Type", content_type.to_string()),
            ("Vary", "Accept".to_string()),
        ];
        if matches(if_none_match, &etag) {
            headers.push(("ETag", etag));
            return Reply {
                status: 304,
                headers,
                gzip: &[],
            };
        }
        headers.push(("ETag", etag));
        Reply {
            status: 200,
            headers,
            gzip: &gzip.0,
        }
    }

    /// `GET /openapi/v3`.
    pub fn serve_v3_index(&self, if_none_match: Option<&str>) -> Reply<'_> {
        let etag = format!("\"{}\"", self.v3_index.hash);
        let status = if matches(if_none_match, &etag) {
            304
        } else {
            200
        };
        Reply {
            status,
            headers: vec![("Content-Type", JSON.to_string()), ("ETag", etag)],
            gzip: if status == 200 {
                &self.v3_index.doc.0
            } else {
                &[]
            },
        }
    }

    /// `GET /openapi/v3/<path>[?hash=H]`; `path` is the index key (`apis/apps/v1`).
    pub fn serve_v3(
        &self,
        path: &str,
        hash: Option<&str>,
        accept: Option<&str>,
        if_none_match: Option<&str>,
    ) -> Reply<'_> {
        let Some(served) = self.v3.get(path.trim_matches('/')) else {
            return Reply::empty(404);
        };
        if negotiate(accept, &[JSON]).is_none() {
            return Reply::empty(406);
        }
        let etag = format!("\"{}\"", served.hash);
        let mut headers = vec![
            ("Content-Type", JSON.to_string()),
            ("Vary", "Accept".to_string()),
            ("ETag", etag.clone()),
        ];
        if let Some(hash) = hash.filter(|h| !h.is_empty()) {
            if hash != served.hash {
                let location = format!(
                    "/openapi/v3/{}?hash={}",
                    path.trim_matches('/'),
                    served.hash
                );
                return Reply {
                    status: 301,
                    headers: vec![("Location", location)],
                    gzip: &[],
                };
            }
            headers.push(("Cache-Control", "public, immutable".to_string()));
        }
        if matches(if_none_match, &etag) {
            return Reply {
                status: 304,
                headers,
                gzip: &[],
            };
        }
        Reply {
            status: 200,
            headers,
            gzip: &served.doc.0,
        }
    }
}

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Whether an `If-None-Match` header names `etag` (or is `*`).
fn matches(if_none_match: Option<&str>, etag: &str) -> bool {
    if_none_match.is_some_and(|header| {
        header
            .split(',')
            .map(str::trim)
            .any(|tag| tag == "*" || tag == etag || tag.strip_prefix("W/") == Some(etag))
    })
}

/// The first of `offered` that `accept` takes, honouring `q=0` and wildcards; a missing or
/// empty header takes the first offer.
fn negotiate(accept: Option<&str>, offered: &[&'static str]) -> Option<&'static str> {
    let accept = accept
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or("*/*");
    let mut ranges: Vec<(f32, usize, &str)> = accept
        .split(',')
        .enumerate()
        .filter_map(|(i, clause)| {
            let mut parts = clause.split(';').map(str::trim);
            let range = parts.next()?;
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q > 0.0).then_some((q, i, range))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges.iter().find_map(|(_, _, range)| {
        offered.iter().copied().find(|offer| {
            let (ty, sub) = offer.split_once('/').unwrap_or((offer, ""));
            match range.split_once('/') {
                Some(("*", "*")) => true,
                Some((t, "*")) => t.eq_ignore_ascii_case(ty),
                Some((t, s)) => t.eq_ignore_ascii_case(ty) && s.eq_ignore_ascii_case(sub),
                None => false,
            }
        })
    })
}

/// A 128-bit FNV-1a pair over `bytes`, as 32 uppercase hex digits.
fn hash(bytes: &[u8]) -> String {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x6c62_272e_07bb_0142;
    for &byte in bytes {
        a = (a ^ u64::from(byte)).wrapping_mul(PRIME);
        b = (b ^ u64::from(byte.rotate_left(3))).wrapping_mul(PRIME);
    }
    format!("{a:016X}{b:016X}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_prefers_the_clients_order_and_quality() {
        assert_eq!(negotiate(None, &[JSON, V2_PROTOBUF]), Some(JSON));
        assert_eq!(
            negotiate(Some(V2_PROTOBUF), &[JSON, V2_PROTOBUF]),
            Some(V2_PROTOBUF)
        );
        assert_eq!(
            negotiate(Some("application/json, */*"), &[JSON, V2_PROTOBUF]),
            Some(JSON)
        );
        assert_eq!(
            negotiate(
                Some(
                    "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
                ),
                &[JSON, V2_PROTOBUF]
            ),
            Some(V2_PROTOBUF)
        );
        assert_eq!(negotiate(Some("text/html"), &[JSON]), None);
        assert_eq!(negotiate(Some("application/json;q=0"), &[JSON]), None);
    }

    #[test]
    fn hashes_differ_for_different_documents() {
        assert_ne!(hash(b"a"), hash(b"b"));
        assert_eq!(hash(b"a").len(), 32);
    }

    #[test]
    fn etags_match_exact_weak_and_star() {
        assert!(matches(Some("\"X\""), "\"X\""));
        assert!(matches(Some("W/\"X\", \"Y\""), "\"X\""));
        assert!(matches(Some("*"), "\"X\""));
        assert!(!matches(Some("\"Y\""), "\"X\""));
        assert!(!matches(None, "\"X\""));
    }
}
