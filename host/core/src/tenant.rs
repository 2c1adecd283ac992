//! Tenants: every workflow, run, channel, subscription, schedule, key
//! space, idempotency key and plugin belongs to one.
//!
//! A tenant's objects are kept under *qualified* names: `acme:order` is
//! workflow `order` of tenant `acme`. The tenant `default` keeps bare
//! names, so a store written before tenants existed reads as tenant
//! `default`'s. The separator `:` is in no id, channel or plugin name
//! people may choose (see [`crate::names`]), so a qualified name can
//! never be written by hand, and a name with `:` in a request names
//! nothing.

/// The tenant of a host without tokens, and of every name without a
/// tenant part.
pub const DEFAULT: &str = "default";

/// Between a tenant and a name.
pub const SEPARATOR: char = ':';

/// Checks a tenant's name: an id (letters, digits, `_` and `-`, starting
/// with a letter or `_`) of at most 64 bytes.
pub fn check(tenant: &str) -> Result<(), String> {
    crate::names::check_id(tenant)?;
    if tenant.len() > 64 {
        return Err(format!("`{tenant}` is longer than 64 characters"));
    }
    Ok(())
}

/// `name` of `tenant` as it is stored.
pub fn qualify(tenant: &str, name: &str) -> String {
    if tenant == DEFAULT {
        name.to_owned()
    } else {
        format!("{tenant}{SEPARATOR}{name}")
    }
}

/// The tenant and the bare name of a stored name.
pub fn split(stored: &str) -> (&str, &str) {
    stored.split_once(SEPARATOR).unwrap_or((DEFAULT, stored))
}

/// The tenant a stored name belongs to.
pub fn of(stored: &str) -> &str {
    split(stored).0
}

/// A stored name's bare name, as its tenant knows it.
pub fn bare(stored: &str) -> &str {
    split(stored).1
}

/// `name` in the same tenant as the stored name `owner`: the channel a
/// run of `owner` emits to, the child workflow it starts.
pub fn sibling(owner: &str, name: &str) -> String {
    qualify(of(owner), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_bare_and_others_qualified() {
        assert_eq!(qualify(DEFAULT, "order"), "order");
        assert_eq!(qualify("acme", "order"), "acme:order");
        assert_eq!(split("acme:order"), ("acme", "order"));
        assert_eq!(split("order"), (DEFAULT, "order"));
        assert_eq!(sibling("acme:order", "ship"), "acme:ship");
        assert_eq!(sibling("order", "ship"), "ship");
        assert!(check("acme").is_ok());
        assert!(check("a:b").is_err());
        assert!(check(&"a".repeat(65)).is_err());
    }
}
