//! The `secrets` capability: the tenant's secrets that a step's workflow
//! names, decrypted by the engine for one call, and the redaction that keeps
//! their values out of what the call leaves behind.

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::bindings;
use super::sandbox::StepState;

/// The secrets a call may read: each name its step is granted, with the
/// tenant's value if one is set. `Debug` shows names, never values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(BTreeMap<String, Option<String>>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Secrets {
    /// Grants `name`, with its value if the tenant set one.
    pub fn grant(&mut self, name: impl Into<String>, value: Option<String>) {
        self.0.insert(name.into(), value);
    }

    /// Whether no secret is granted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Replaces every value in text with `[secret NAME]`.
    pub(crate) fn redactor(&self) -> Redactor {
        let mut pairs: Vec<(String, String)> = self
            .0
            .iter()
            .filter_map(|(name, value)| Some((name, value.as_ref()?)))
            .filter(|(_, value)| !value.is_empty())
            .flat_map(|(name, value)| {
                let mark = format!("[secret {name}]");
                // As written, and as it appears inside a JSON string.
                let escaped = serde_json::to_string(value)
                    .ok()
                    .and_then(|s| s.get(1..s.len() - 1).map(str::to_owned))
                    .filter(|e| e != value);
                std::iter::once((value.clone(), mark.clone())).chain(escaped.map(|e| (e, mark)))
            })
            .collect();
        // The longest first, so that a value that contains another is
        // replaced whole.
        pairs.sort_by_key(|pair| std::cmp::Reverse(pair.0.len()));
        Redactor(Arc::new(pairs))
    }
}

/// Replaces secret values in text.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor(Arc<Vec<(String, String)>>);

impl Redactor {
    /// `text` with every secret value replaced.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (value, mark) in self.0.iter() {
            if text.contains(value.as_str()) {
                text = text.replace(value.as_str(), mark);
            }
        }
        text
    }

    /// `value` with every secret value replaced inside its strings (keys
    /// included); numbers, booleans and the JSON around them are left as
    /// they are.
    pub(crate) fn redact_value(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        match value {
            Value::String(text) => {
                if self
                    .0
                    .iter()
                    .any(|(secret, _)| text.contains(secret.as_str()))
                {
                    *text = self.redact(text);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_value(item)),
            Value::Object(fields) => {
                let taken = std::mem::take(fields);
                for (key, mut item) in taken {
                    self.redact_value(&mut item);
                    fields.insert(self.redact(&key), item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Whether there is anything to redact.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Links `weft:plugin/secrets` (0.2 and later) into `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    bindings::v2::weft::plugin::secrets::add_to_linker::<StepState, HasSelf<StepState>>(
        linker,
        |s| s,
    )?;
    bindings::v3::weft::plugin::secrets::add_to_linker::<StepState, HasSelf<StepState>>(
        linker,
        |s| s,
    )
}

impl bindings::v2::weft::plugin::secrets::Host for StepState {
    fn get(&mut self, name: String) -> Result<String, String> {
        self.secret(&name)
    }
}

impl bindings::v3::weft::plugin::secrets::Host for StepState {
    fn get(&mut self, name: String) -> Result<String, String> {
        self.secret(&name)
    }
}

impl StepState {
    /// The value of the secret `name`, if the step is granted it and it is
    /// set.
    fn secret(&self, name: &str) -> Result<String, String> {
        match self.secrets.0.get(name) {
            Some(Some(value)) => Ok(value.clone()),
            Some(None) => Err(format!(
                "the secret `{name}` is not set for this tenant (`weft secrets set {name}`)"
            )),
            None => Err(format!(
                "the step is not granted the secret `{name}` (`secrets: [{name}]` in the workflow)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_redacted_whole_and_inside_json() {
        let mut secrets = Secrets::default();
        secrets.grant("KEY", Some("sk_live_123".to_owned()));
        secrets.grant("QUOTED", Some("a\"b\\c".to_owned()));
        secrets.grant("UNSET", None);
        let redactor = secrets.redactor();
        assert_eq!(
            redactor.redact("key=sk_live_123, again sk_live_123"),
            "key=[secret KEY], again [secret KEY]"
        );
        let json = serde_json::json!({ "q": "a\"b\\c" }).to_string();
        assert_eq!(redactor.redact(&json), r#"{"q":"[secret QUOTED]"}"#);
        // In a JSON value, only strings change: a secret that looks like a
        // number leaves numbers alone.
        let mut pin = Secrets::default();
        pin.grant("PIN", Some("1234".to_owned()));
        let mut value = serde_json::json!({ "n": 1234, "text": "pin 1234", "1234": true });
        pin.redactor().redact_value(&mut value);
        assert_eq!(
            value,
            serde_json::json!({ "n": 1234, "text": "pin [secret PIN]", "[secret PIN]": true })
        );
        assert_eq!(format!("{secrets:?}"), r#"{"KEY", "QUOTED", "UNSET"}"#);
    }
}
