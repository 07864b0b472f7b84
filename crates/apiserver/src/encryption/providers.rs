//! The EncryptionConfiguration providers and their stored formats, as upstream writes them so a
//! store can move between the two: `aesgcm` (random 12-byte nonce, then AES-GCM sealed with the
//! store key as additional data), `aescbc` (random 16-byte IV, then AES-CBC with PKCS#7
//! padding), `secretbox` (random 24-byte nonce, then XSalsa20-Poly1305), each after the prefix
//! `k8s:enc:<provider>:v1:<key name>:`; `identity` stores plaintext.

use aes_gcm::AesGcm;
use aes_gcm::aead::consts::U12;
use aes_gcm::aead::rand_core::RngCore;
use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload};
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};

use super::{Error, Result};

/// Every encrypted value starts with this.
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

/// An AES-GCM key of one of the three AES sizes (public only as part of [`Provider`]).
pub enum Gcm {
    A128(AesGcm<aes::Aes128, U12>),
    A192(AesGcm<aes::Aes192, U12>),
    A256(AesGcm<aes::Aes256, U12>),
}

impl Gcm {
    fn new(key: &[u8]) -> Self {
        match key.len() {
            16 => Gcm::A128(AesGcm::new_from_slice(key).expect("16-byte key")),
            24 => Gcm::A192(AesGcm::new_from_slice(key).expect("24-byte key")),
            _ => Gcm::A256(AesGcm::new_from_slice(key).expect("32-byte key")),
        }
    }

    fn seal(&self, nonce: &[u8], payload: Payload<'_, '_>) -> Option<Vec<u8>> {
        let nonce = aes_gcm::Nonce::<U12>::from_slice(nonce);
        match self {
            Gcm::A128(c) => c.encrypt(nonce, payload),
            Gcm::A192(c) => c.encrypt(nonce, payload),
            Gcm::A256(c) => c.encrypt(nonce, payload),
        }
        .ok()
    }

    fn open(&self, nonce: &[u8], payload: Payload<'_, '_>) -> Option<Vec<u8>> {
        let nonce = aes_gcm::Nonce::<U12>::from_slice(nonce);
        match self {
            Gcm::A128(c) => c.decrypt(nonce, payload),
            Gcm::A192(c) => c.decrypt(nonce, payload),
            Gcm::A256(c) => c.decrypt(nonce, payload),
        }
        .ok()
    }
}

/// One named key of a provider, with its prefix.
pub struct Key<C> {
    prefix: Vec<u8>,
    cipher: C,
}

/// One configured provider (its keys in order: the first encrypts, all decrypt).
pub enum Provider {
    Identity,
    AesGcm(Vec<Key<Gcm>>),
    AesCbc(Vec<Key<Vec<u8>>>),
    Secretbox(Vec<Key<crypto_secretbox::XSalsa20Poly1305>>),
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the keys
        f.write_str(match self {
            Provider::Identity => "identity",
            Provider::AesGcm(_) => "aesgcm",
            Provider::AesCbc(_) => "aescbc",
            Provider::Secretbox(_) => "secretbox",
        })
    }
}

fn prefix(provider: &str, name: &str) -> Vec<u8> {
    format!("k8s:enc:{provider}:v1:{name}:").into_bytes()
}

fn random<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    OsRng.fill_bytes(&mut out);
    out
}

fn failed(provider: &str, name_prefix: &[u8]) -> Error {
    let name = String::from_utf8_lossy(name_prefix);
    let name = name.trim_end_matches(':').rsplit(':').next().unwrap_or("");
    Error::Transform(format!(
        "{provider}: decrypting with key {name:?} failed: the value was not written with this key or was tampered with"
    ))
}

impl Provider {
    pub(super) fn aes_gcm(keys: Vec<(String, Vec<u8>)>) -> Self {
        Provider::AesGcm(
            keys.into_iter()
                .map(|(n, k)| Key {
                    prefix: prefix("aesgcm", &n),
                    cipher: Gcm::new(&k),
                })
                .collect(),
        )
    }

    pub(super) fn aes_cbc(keys: Vec<(String, Vec<u8>)>) -> Self {
        Provider::AesCbc(
            keys.into_iter()
                .map(|(n, k)| Key {
                    prefix: prefix("aescbc", &n),
                    cipher: k,
                })
                .collect(),
        )
    }

    pub(super) fn secretbox(keys: Vec<(String, Vec<u8>)>) -> Self {
        Provider::Secretbox(
            keys.into_iter()
                .map(|(n, k)| Key {
                    prefix: prefix("secretbox", &n),
                    cipher: crypto_secretbox::XSalsa20Poly1305::new_from_slice(&k)
                        .expect("32-byte key"),
                })
                .collect(),
        )
    }

    /// The stored form of `plain` with this provider's first key; `key` is the store key.
    pub fn encrypt(&self, key: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let sealing = |what: &str| Error::Transform(format!("{what}: encrypting failed"));
        match self {
            Provider::Identity => Ok(plain.to_vec()),
            Provider::AesGcm(keys) => {
                let k = &keys[0];
                let nonce = random::<12>();
                let sealed = k
                    .cipher
                    .seal(
                        &nonce,
                        Payload {
                            msg: plain,
                            aad: key,
                        },
                    )
                    .ok_or_else(|| sealing("aesgcm"))?;
                Ok([&k.prefix[..], &nonce, &sealed].concat())
            }
            Provider::AesCbc(keys) => {
                let k = &keys[0];
                let iv = random::<16>();
                let sealed = match k.cipher.len() {
                    16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(&k.cipher, &iv)
                        .map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(plain)),
                    24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(&k.cipher, &iv)
                        .map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(plain)),
                    _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(&k.cipher, &iv)
                        .map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(plain)),
                }
                .map_err(|_| sealing("aescbc"))?;
                Ok([&k.prefix[..], &iv, &sealed].concat())
            }
            Provider::Secretbox(keys) => {
                let k = &keys[0];
                let nonce = random::<24>();
                let sealed = k
                    .cipher
                    .encrypt(crypto_secretbox::Nonce::from_slice(&nonce), plain)
                    .map_err(|_| sealing("secretbox"))?;
                Ok([&k.prefix[..], &nonce, &sealed].concat())
            }
        }
    }

    /// `None` when no key of this provider wrote `stored` (by prefix); otherwise the plaintext
    /// and whether a key other than the first wrote it, or why the key that claims it cannot
    /// open it.
    pub fn try_decrypt(&self, key: &[u8], stored: &[u8]) -> Option<Result<(Vec<u8>, bool)>> {
        let (plain, first) = match self.open(key, stored)? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok((plain, !first)))
    }

    /// As [`Provider::try_decrypt`], with whether the first key opened it.
    fn open(&self, key: &[u8], stored: &[u8]) -> Option<Result<(Vec<u8>, bool)>> {
        match self {
            Provider::Identity => {
                (!stored.starts_with(ENCRYPTED_PREFIX)).then(|| Ok((stored.to_vec(), true)))
            }
            Provider::AesGcm(keys) => {
                let (k, rest, first) = claim(keys, stored)?;
                Some(
                    (rest.len() >= 12)
                        .then(|| {
                            k.cipher.open(
                                &rest[..12],
                                Payload {
                                    msg: &rest[12..],
                                    aad: key,
                                },
                            )
                        })
                        .flatten()
                        .map(|p| (p, first))
                        .ok_or_else(|| failed("aesgcm", &k.prefix)),
                )
            }
            Provider::AesCbc(keys) => {
                let (k, rest, first) = claim(keys, stored)?;
                if rest.len() < 16 {
                    return Some(Err(failed("aescbc", &k.prefix)));
                }
                let (iv, ct) = rest.split_at(16);
                let plain = match k.cipher.len() {
                    16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(&k.cipher, iv)
                        .ok()
                        .and_then(|c| c.decrypt_padded_vec_mut::<Pkcs7>(ct).ok()),
                    24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(&k.cipher, iv)
                        .ok()
                        .and_then(|c| c.decrypt_padded_vec_mut::<Pkcs7>(ct).ok()),
                    _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(&k.cipher, iv)
                        .ok()
                        .and_then(|c| c.decrypt_padded_vec_mut::<Pkcs7>(ct).ok()),
                };
                Some(
                    plain
                        .map(|p| (p, first))
                        .ok_or_else(|| failed("aescbc", &k.prefix)),
                )
            }
            Provider::Secretbox(keys) => {
                let (k, rest, first) = claim(keys, stored)?;
                Some(
                    (rest.len() >= 24)
                        .then(|| {
                            k.cipher
                                .decrypt(
                                    crypto_secretbox::Nonce::from_slice(&rest[..24]),
                                    &rest[24..],
                                )
                                .ok()
                        })
                        .flatten()
                        .map(|p| (p, first))
                        .ok_or_else(|| failed("secretbox", &k.prefix)),
                )
            }
        }
    }
}

/// The key whose prefix `stored` carries, the bytes after it, and whether it is the first key.
fn claim<'a, C>(keys: &'a [Key<C>], stored: &'a [u8]) -> Option<(&'a Key<C>, &'a [u8], bool)> {
    keys.iter().enumerate().find_map(|(i, k)| {
        stored
            .strip_prefix(&k.prefix[..])
            .map(|rest| (k, rest, i == 0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<(String, Vec<u8>)> {
        vec![("k1".into(), vec![7u8; n]), ("k0".into(), vec![9u8; n])]
    }

    #[test]
    fn every_provider_and_key_size_round_trips() {
        let mut all = vec![Provider::secretbox(keys(32))];
        for n in [16, 24, 32] {
            all.push(Provider::aes_gcm(keys(n)));
            all.push(Provider::aes_cbc(keys(n)));
        }
        for p in &all {
            let sealed = p.encrypt(b"/registry/k", b"hello world").unwrap();
            assert!(sealed.starts_with(format!("k8s:enc:{p:?}:v1:k1:").as_bytes()));
            let (plain, stale) = p.try_decrypt(b"/registry/k", &sealed).unwrap().unwrap();
            assert_eq!(plain, b"hello world", "{p:?}");
            assert!(!stale, "{p:?}: written with the first key");
            assert_ne!(
                p.encrypt(b"/registry/k", b"hello world").unwrap(),
                sealed,
                "{p:?} uses a fresh nonce each write"
            );
        }
    }

    #[test]
    fn a_value_written_with_a_later_key_reads_as_stale() {
        let mut later = keys(32);
        later.reverse();
        let old = Provider::aes_gcm(later).encrypt(b"k", b"x").unwrap();
        let (plain, stale) = Provider::aes_gcm(keys(32))
            .try_decrypt(b"k", &old)
            .unwrap()
            .unwrap();
        assert_eq!((plain.as_slice(), stale), (&b"x"[..], true));
    }

    #[test]
    fn tampered_values_and_moved_values_fail_to_decrypt() {
        let p = Provider::aes_gcm(keys(32));
        let mut sealed = p.encrypt(b"/registry/a", b"x").unwrap();
        // aesgcm authenticates the store key: a value copied to another key does not open
        assert!(p.try_decrypt(b"/registry/b", &sealed).unwrap().is_err());
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert!(p.try_decrypt(b"/registry/a", &sealed).unwrap().is_err());
        // truncated to the prefix only
        assert!(
            p.try_decrypt(b"/registry/a", b"k8s:enc:aesgcm:v1:k1:")
                .unwrap()
                .is_err()
        );
        let cbc = Provider::aes_cbc(keys(32));
        assert!(
            cbc.try_decrypt(b"k", b"k8s:enc:aescbc:v1:k1:short")
                .unwrap()
                .is_err()
        );
        // another provider's or an unknown key's value is not claimed
        assert!(cbc.try_decrypt(b"k", &sealed).is_none());
        assert!(
            p.try_decrypt(b"k", b"k8s:enc:aesgcm:v1:gone:xxxx")
                .is_none()
        );
        assert!(Provider::Identity.try_decrypt(b"k", &sealed).is_none());
    }
}
