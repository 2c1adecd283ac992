//! The names people choose: step and workflow ids, plugin names, channel
//! and subscription names. One check each, used wherever such a name is
//! read.

/// Ids and plugin names are what expressions and `uses:` name, so they keep
/// to letters, digits, `_` and `-`, start with a letter or `_`, and are at
/// most 128 bytes.
pub fn check_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    match chars.next() {
        None => return Err("must not be empty".to_owned()),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
            return Err(format!("`{id}` must start with a letter or `_`"));
        }
        Some(_) => {}
    }
    if let Some(bad) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!(
            "`{id}` has `{bad}`; use letters, digits, `_` and `-`"
        ));
    }
    if id.len() > 128 {
        return Err("is longer than 128 characters".to_owned());
    }
    Ok(())
}

/// The channel on which the host tells of each of a tenant's runs that
/// ends (succeeded, failed, timed out or cancelled): one message per run,
/// committed in the transaction that ends it, and only while the channel
/// has a subscription. A tenant subscribes to it like to any channel.
pub const RUNS_ENDED: &str = "weft.runs.ended";

/// Channels whose names start with this are the host's: runs and clients
/// may subscribe to them, but only the host emits to them.
pub const HOST_CHANNELS: &str = "weft.";

/// Checks the name of a channel a run or client emits to (`what` says
/// where it was read): a channel name ([`check_name`]) outside the host's
/// own channels.
pub fn check_emit(what: &str, channel: &str) -> Result<(), String> {
    check_name(what, channel)?;
    if channel.starts_with(HOST_CHANNELS) {
        return Err(format!(
            "{what} `{channel}` is the host's (names starting with `{HOST_CHANNELS}` are reserved); \
             subscribe to it, but emit elsewhere"
        ));
    }
    Ok(())
}

/// The longest channel or subscription name.
pub const MAX_NAME: usize = 128;

/// Checks a channel or subscription name: 1 to 128 letters, digits, `_`,
/// `-` and `.`.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "{what} `{name}` must be 1 to {MAX_NAME} characters long"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "{what} `{name}` has `{bad}`; use letters, digits, `_`, `-` and `.`"
        ));
    }
    Ok(())
}
