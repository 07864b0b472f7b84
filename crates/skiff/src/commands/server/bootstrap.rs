//! The secrets every server of an HA control plane shares (k3s's "bootstrap data"): the cluster
//! CA and the service account signing key, kept in the datastore under [`KEY`], sealed with
//! AES-256-GCM under a key that PBKDF2-HMAC-SHA256 derives from the server token. The first
//! server writes them (a transaction that only succeeds while the key is absent); every later
//! one, and every restart, reads them into its own `tls/` directory before its API server
//! starts, so that all of them sign and trust the same certificates and tokens.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

use anyhow::Context as _;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use skiff_apiserver::pki::Pki;
use skiff_apiserver::tokens::{DEFAULT_ISSUER, TokenIssuer};

/// Where the sealed data lives in etcd: outside `/registry`, which the API server owns.
pub const KEY: &str = "/skiff/bootstrap";

/// The files under `tls/` the servers share (the service account's public key is derived).
const FILES: [&str; 3] = ["ca.crt", "ca.key", "service-account.key"];

/// Marks the sealed format: version, then salt, nonce and ciphertext with its tag.
const MAGIC: &[u8] = b"skiff-bootstrap-v1";
const SALT_LEN: usize = 16;
/// OWASP's 2023 floor for PBKDF2-HMAC-SHA256 is 600,000; the token is a random secret, not a
/// password, so fewer rounds keep a server's start short without weakening it in practice.
const ROUNDS: NonZeroU32 = NonZeroU32::new(100_000).expect("nonzero");

/// What [`sync`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// This server was the first: it stored its CA and signing key.
    Stored,
    /// Another server (or this one, earlier) had stored them: this one now uses them.
    Loaded,
}

/// Makes `tls_dir` hold the cluster's shared CA and signing key: loaded from etcd if a server
/// stored them, else created here (or kept, if this directory has them) and stored.
pub async fn sync(endpoints: &[String], token: &str, tls_dir: &Path) -> anyhow::Result<Outcome> {
    let mut etcd = etcd_client::Client::connect(endpoints, None)
        .await
        .with_context(|| format!("connecting to etcd at {}", endpoints.join(",")))?;
    if let Some(sealed) = get(&mut etcd).await? {
        write_files(tls_dir, &open(token, &sealed)?)?;
        return Ok(Outcome::Loaded);
    }
    Pki::ensure(tls_dir, &[]).context("creating the cluster CA")?;
    TokenIssuer::ensure(tls_dir, DEFAULT_ISSUER).context("creating the signing key")?;
    let ours = read_files(tls_dir)?;
    let txn = Txn::new()
        .when([Compare::create_revision(KEY, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(KEY, seal(token, &ours)?, None)]);
    let stored = etcd
        .txn(txn)
        .await
        .with_context(|| format!("storing {KEY} in etcd"))?
        .succeeded();
    if stored {
        return Ok(Outcome::Stored);
    }
    // another server stored its own first: use those
    let sealed = get(&mut etcd)
        .await?
        .with_context(|| format!("{KEY} vanished from etcd"))?;
    write_files(tls_dir, &open(token, &sealed)?)?;
    Ok(Outcome::Loaded)
}

async fn get(etcd: &mut etcd_client::Client) -> anyhow::Result<Option<Vec<u8>>> {
    let response = etcd
        .get(KEY, None)
        .await
        .with_context(|| format!("reading {KEY} from etcd"))?;
    Ok(response.kvs().first().map(|kv| kv.value().to_vec()))
}

fn read_files(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    FILES
        .iter()
        .map(|name| {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok((name.to_string(), text))
        })
        .collect()
}

fn write_files(dir: &Path, files: &BTreeMap<String, String>) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for name in FILES {
        let text = files
            .get(name)
            .with_context(|| format!("the bootstrap data has no {name}"))?;
        let path = dir.join(name);
        let tmp = path.with_extension("tmp");
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn derive_key(token: &str, salt: &[u8]) -> LessSafeKey {
    let mut key = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        ROUNDS,
        salt,
        token.as_bytes(),
        &mut key,
    );
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).expect("a 32-byte key"))
}

/// The files as JSON, sealed: [`MAGIC`], a random salt, a random nonce, the ciphertext and tag.
pub fn seal(token: &str, files: &BTreeMap<String, String>) -> anyhow::Result<Vec<u8>> {
    let rng = SystemRandom::new();
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut salt)
        .and_then(|()| rng.fill(&mut nonce))
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    let mut data = serde_json::to_vec(files)?;
    derive_key(token, &salt)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(MAGIC),
            &mut data,
        )
        .map_err(|_| anyhow::anyhow!("sealing the bootstrap data failed"))?;
    Ok([MAGIC, &salt, &nonce, &data].concat())
}

/// The files [`seal`] sealed, if `token` is the one it was sealed with.
pub fn open(token: &str, sealed: &[u8]) -> anyhow::Result<BTreeMap<String, String>> {
    let malformed = || anyhow::anyhow!("{KEY} in etcd is not sealed bootstrap data");
    let rest = sealed.strip_prefix(MAGIC).ok_or_else(malformed)?;
    if rest.len() < SALT_LEN + NONCE_LEN {
        return Err(malformed());
    }
    let (salt, rest) = rest.split_at(SALT_LEN);
    let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| malformed())?;
    let mut data = ciphertext.to_vec();
    let plain = derive_key(token, salt)
        .open_in_place(nonce, Aad::from(MAGIC), &mut data)
        .map_err(|_| {
            super::super::UsageError(format!(
                "--token does not open {KEY} in etcd: it is not the token the cluster was created with"
            ))
        })?;
    Ok(serde_json::from_slice(plain)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> BTreeMap<String, String> {
        FILES
            .iter()
            .map(|f| (f.to_string(), format!("pem of {f}")))
            .collect()
    }

    #[test]
    fn sealed_data_opens_with_its_token_only() {
        let sealed = seal("s3cret", &files()).unwrap();
        assert!(!String::from_utf8_lossy(&sealed).contains("pem of"));
        assert_eq!(open("s3cret", &sealed).unwrap(), files());
        let wrong = open("other", &sealed).unwrap_err();
        assert!(wrong.to_string().contains("--token"), "{wrong}");
    }

    #[test]
    fn tampered_or_foreign_data_does_not_open() {
        let mut sealed = seal("s3cret", &files()).unwrap();
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert!(open("s3cret", &sealed).is_err());
        assert!(open("s3cret", b"{\"ca.crt\":\"x\"}").is_err());
    }

    #[test]
    fn loaded_files_replace_the_directory_s_own() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), &files()).unwrap();
        assert_eq!(read_files(dir.path()).unwrap(), files());
    }
}
