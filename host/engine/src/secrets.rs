//! Tenants' secrets, sealed at rest with a key the store does not hold.
//!
//! A value is sealed with ChaCha20-Poly1305 (ring) under the host's current
//! key, with a fresh random nonce, and with the tenant and the name as
//! associated data: a sealed value moved to another tenant or name does
//! not open. What is stored is `1 | key id (8 bytes) | nonce (12) |
//! ciphertext | tag (16)`; the key id is the start of the key's SHA-256, so
//! a value sealed under an earlier key opens as long as that key is given
//! as a previous key, and [`Vault::reseal`] moves it to the current one.
//!
//! Keys are 32 bytes written as 64 hex digits, in a file
//! (`--secrets-key-file`, `WEFT_SECRETS_KEY_FILE`) or in `WEFT_SECRETS_KEY`.

use std::sync::Arc;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest as _, Sha256};
use weft_store::{SecretRecord, Store, StoreError};

const FORMAT: u8 = 1;
const KEY_ID: usize = 8;

/// Why a secret cannot be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// A key is not 64 hex digits.
    #[error("a secrets key must be 32 bytes written as 64 hex digits: {0}")]
    BadKey(String),
    /// No key is configured.
    #[error(
        "no secrets key is configured: give one with --secrets-key-file or \
         WEFT_SECRETS_KEY_FILE (64 hex digits; `weft secrets new-key` makes one)"
    )]
    NoKey,
    /// The value was sealed under a key this host was not given.
    #[error(
        "secret `{name}` was sealed under a key this host does not have \
         (key id {key_id}); give that key as a previous key"
    )]
    UnknownKey {
        /// The secret.
        name: String,
        /// The id of the key it was sealed under.
        key_id: String,
    },
    /// The sealed bytes do not open: damaged, or moved from another
    /// tenant or name.
    #[error("secret `{0}` does not open: its stored form is damaged or was moved")]
    Damaged(String),
    /// The secret is not granted to the component that asks for it.
    #[error(
        "secret `{name}` is not granted to plugin `{plugin}@{digest}`; a tenant owner \
         grants that build with `weft secrets grant {name} --plugin {plugin}@{digest}`"
    )]
    NotGranted {
        /// The secret.
        name: String,
        /// The plugin's name, as the tenant writes it.
        plugin: String,
        /// The component's digest.
        digest: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One 32-byte key.
struct Key {
    id: [u8; KEY_ID],
    key: LessSafeKey,
}

impl Key {
    fn from_hex(text: &str) -> Result<Self, SecretError> {
        let text = text.trim();
        if !text.is_ascii() {
            return Err(SecretError::BadKey("not hex".to_owned()));
        }
        if text.len() != 64 {
            return Err(SecretError::BadKey(format!("{} characters", text.len())));
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
                .map_err(|_| SecretError::BadKey("not hex".to_owned()))?;
        }
        let digest = Sha256::digest(bytes);
        let mut id = [0u8; KEY_ID];
        id.copy_from_slice(&digest[..KEY_ID]);
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes)
            .map_err(|_| SecretError::BadKey("rejected".to_owned()))?;
        Ok(Self {
            id,
            key: LessSafeKey::new(key),
        })
    }
}

/// The keys a host seals and opens secrets with: the current one, and
/// earlier ones that still open what they sealed.
pub struct SecretKeys {
    current: Key,
    previous: Vec<Key>,
    random: SystemRandom,
}

impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKeys")
            .field("current", &hex(&self.current.id))
            .field("previous", &self.previous.len())
            .finish()
    }
}

impl PartialEq for SecretKeys {
    fn eq(&self, other: &Self) -> bool {
        self.current.id == other.current.id
            && self
                .previous
                .iter()
                .map(|k| k.id)
                .eq(other.previous.iter().map(|k| k.id))
    }
}

impl Eq for SecretKeys {}

impl SecretKeys {
    /// Keys from hex text: `current`, and `previous` ones for values sealed
    /// before a rotation.
    pub fn from_hex(current: &str, previous: &[String]) -> Result<Self, SecretError> {
        Ok(Self {
            current: Key::from_hex(current)?,
            previous: previous
                .iter()
                .map(|k| Key::from_hex(k))
                .collect::<Result<_, _>>()?,
            random: SystemRandom::new(),
        })
    }

    /// A fresh random key, as 64 hex digits.
    pub fn generate() -> Result<String, SecretError> {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| SecretError::BadKey("no randomness".to_owned()))?;
        Ok(hex(&bytes))
    }

    /// The id of the current key, in hex.
    pub fn current_id(&self) -> String {
        hex(&self.current.id)
    }

    fn seal(&self, tenant: &str, name: &str, value: &str) -> Result<Vec<u8>, SecretError> {
        self.seal_as(&aad(tenant, name), name, value)
    }

    /// `value` sealed under the current key with associated data `aad`
    /// (what it is sealed as: a sealed value opens only as that); `name`
    /// names it in errors.
    fn seal_as(&self, aad: &[u8], name: &str, value: &str) -> Result<Vec<u8>, SecretError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| SecretError::BadKey("no randomness".to_owned()))?;
        let mut data = value.as_bytes().to_vec();
        self.current
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut data,
            )
            .map_err(|_| SecretError::Damaged(name.to_owned()))?;
        let mut sealed = Vec::with_capacity(1 + KEY_ID + NONCE_LEN + data.len());
        sealed.push(FORMAT);
        sealed.extend_from_slice(&self.current.id);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&data);
        Ok(sealed)
    }

    fn open(&self, tenant: &str, name: &str, sealed: &[u8]) -> Result<String, SecretError> {
        self.open_as(&aad(tenant, name), name, sealed)
    }

    /// What [`SecretKeys::seal_as`] sealed with `aad`.
    fn open_as(&self, aad: &[u8], name: &str, sealed: &[u8]) -> Result<String, SecretError> {
        let damaged = || SecretError::Damaged(name.to_owned());
        if sealed.len() < 1 + KEY_ID + NONCE_LEN || sealed[0] != FORMAT {
            return Err(damaged());
        }
        let id = &sealed[1..1 + KEY_ID];
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
            .ok_or_else(|| SecretError::UnknownKey {
                name: name.to_owned(),
                key_id: hex(id),
            })?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&sealed[1 + KEY_ID..1 + KEY_ID + NONCE_LEN]);
        let mut data = sealed[1 + KEY_ID + NONCE_LEN..].to_vec();
        let plain = key
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut data,
            )
            .map_err(|_| damaged())?;
        String::from_utf8(plain.to_vec()).map_err(|_| damaged())
    }
}

fn aad(tenant: &str, name: &str) -> Vec<u8> {
    format!("weft-secret\0{tenant}\0{name}").into_bytes()
}

/// What a webhook subscription's signing key is sealed as: another
/// purpose than a tenant's secret, so that neither opens as the other.
fn webhook_aad(tenant: &str, key: &str) -> Vec<u8> {
    format!("weft-webhook\0{tenant}\0{key}").into_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Seals and opens tenants' secrets in the store.
#[derive(Debug, Clone)]
pub struct Vault {
    store: Arc<dyn Store>,
    keys: Option<Arc<SecretKeys>>,
}

impl Vault {
    /// A vault over `store`; without `keys`, secrets can be listed and
    /// deleted but not set or read.
    pub fn new(store: Arc<dyn Store>, keys: Option<Arc<SecretKeys>>) -> Self {
        Self { store, keys }
    }

    fn keys(&self) -> Result<&SecretKeys, SecretError> {
        self.keys.as_deref().ok_or(SecretError::NoKey)
    }

    /// The record that stores `value` as `tenant`'s secret `name`, sealed.
    pub fn seal(
        &self,
        tenant: &str,
        name: &str,
        value: &str,
        now: weft_core::Timestamp,
    ) -> Result<SecretRecord, SecretError> {
        Ok(SecretRecord {
            name: name.to_owned(),
            sealed: self.keys()?.seal(tenant, name, value)?,
            updated_at: now,
            grants: Vec::new(),
        })
    }

    /// `tenant`'s secret `name`, opened for a step of `plugin` (its name
    /// and component digest); `None` if it has none by that name, and
    /// [`SecretError::NotGranted`] unless it is granted to that component.
    pub fn get(
        &self,
        tenant: &str,
        name: &str,
        plugin: (&str, &str),
    ) -> Result<Option<String>, SecretError> {
        let Some(record) = self.store.secret(tenant, name)? else {
            return Ok(None);
        };
        let (plugin, digest) = plugin;
        if !record.granted_to(digest) {
            return Err(SecretError::NotGranted {
                name: name.to_owned(),
                plugin: plugin.to_owned(),
                digest: digest.to_owned(),
            });
        }
        self.keys()?.open(tenant, name, &record.sealed).map(Some)
    }

    /// The signing key `secret` of `tenant`'s webhook subscription `key`,
    /// sealed to be stored; `None` when the host has no secrets key (it
    /// is then stored as it is).
    pub fn seal_webhook(
        &self,
        tenant: &str,
        key: &str,
        secret: &str,
    ) -> Result<Option<Vec<u8>>, SecretError> {
        match &self.keys {
            None => Ok(None),
            Some(keys) => keys
                .seal_as(&webhook_aad(tenant, key), key, secret)
                .map(Some),
        }
    }

    /// The signing key [`Vault::seal_webhook`] sealed.
    pub fn open_webhook(
        &self,
        tenant: &str,
        key: &str,
        sealed: &[u8],
    ) -> Result<String, SecretError> {
        self.keys()?.open_as(&webhook_aad(tenant, key), key, sealed)
    }

    /// The signing key of `tenant`'s webhook subscription `key` sealed
    /// again under the current key, if it is stored in the clear
    /// (`secret`, with no `sealed`) or under an earlier key: for a
    /// rotation. `None` when there is nothing to do.
    pub fn reseal_webhook(
        &self,
        tenant: &str,
        key: &str,
        secret: &str,
        sealed: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, SecretError> {
        let keys = self.keys()?;
        let aad = webhook_aad(tenant, key);
        let plain = match sealed {
            Some(sealed) if sealed.get(1..1 + KEY_ID) == Some(&keys.current.id[..]) => {
                return Ok(None);
            }
            Some(sealed) => keys.open_as(&aad, key, sealed)?,
            None if secret.is_empty() => return Ok(None),
            None => secret.to_owned(),
        };
        keys.seal_as(&aad, key, &plain).map(Some)
    }

    /// `record` sealed again under the current key, if an earlier key
    /// sealed it: for a rotation.
    pub fn reseal(
        &self,
        tenant: &str,
        record: &SecretRecord,
    ) -> Result<Option<SecretRecord>, SecretError> {
        let keys = self.keys()?;
        if record.sealed.get(1..1 + KEY_ID) == Some(&keys.current.id[..]) {
            return Ok(None);
        }
        let value = keys.open(tenant, &record.name, &record.sealed)?;
        Ok(Some(SecretRecord {
            name: record.name.clone(),
            sealed: keys.seal(tenant, &record.name, &value)?,
            updated_at: record.updated_at,
            grants: record.grants.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const B: &str = "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn values_open_only_where_they_were_sealed() {
        let keys = SecretKeys::from_hex(A, &[]).unwrap();
        let sealed = keys.seal("acme", "KEY", "sk_live_1").unwrap();
        assert!(!sealed.windows(9).any(|w| w == b"sk_live_1"));
        assert_eq!(keys.open("acme", "KEY", &sealed).unwrap(), "sk_live_1");
        assert!(matches!(
            keys.open("other", "KEY", &sealed),
            Err(SecretError::Damaged(_))
        ));
        assert!(matches!(
            keys.open("acme", "KEY2", &sealed),
            Err(SecretError::Damaged(_))
        ));
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            keys.open("acme", "KEY", &flipped),
            Err(SecretError::Damaged(_))
        ));
        // Two seals of one value differ (fresh nonces).
        assert_ne!(sealed, keys.seal("acme", "KEY", "sk_live_1").unwrap());
    }

    #[test]
    fn a_webhooks_key_opens_only_as_that_webhooks() {
        let keys = SecretKeys::from_hex(A, &[]).unwrap();
        let hook = "acme:events/hook";
        let sealed = keys
            .seal_as(&webhook_aad("acme", hook), hook, "s3cret")
            .unwrap();
        assert_eq!(
            keys.open_as(&webhook_aad("acme", hook), hook, &sealed)
                .unwrap(),
            "s3cret"
        );
        // Not as a tenant's secret of that name, nor as another webhook's.
        assert!(keys.open("acme", hook, &sealed).is_err());
        assert!(
            keys.open_as(&webhook_aad("acme", "acme:events/other"), hook, &sealed)
                .is_err()
        );
    }

    #[test]
    fn a_rotated_key_still_opens_what_it_sealed() {
        let old = SecretKeys::from_hex(A, &[]).unwrap();
        let sealed = old.seal("acme", "KEY", "v").unwrap();
        let new = SecretKeys::from_hex(B, &[]).unwrap();
        assert!(matches!(
            new.open("acme", "KEY", &sealed),
            Err(SecretError::UnknownKey { .. })
        ));
        let rotated = SecretKeys::from_hex(B, &[A.to_owned()]).unwrap();
        assert_eq!(rotated.open("acme", "KEY", &sealed).unwrap(), "v");
    }

    #[test]
    fn keys_are_checked() {
        assert!(matches!(
            SecretKeys::from_hex("abc", &[]),
            Err(SecretError::BadKey(_))
        ));
        assert!(matches!(
            SecretKeys::from_hex(&"zz".repeat(32), &[]),
            Err(SecretError::BadKey(_))
        ));
        let fresh = SecretKeys::generate().unwrap();
        assert_eq!(fresh.len(), 64);
        assert!(SecretKeys::from_hex(&fresh, &[]).is_ok());
        assert!(!format!("{:?}", SecretKeys::from_hex(A, &[]).unwrap()).contains(A));
    }
}
