//! The tenant's secrets that the step's workflow names in `secrets:`.
//! Values never reach the run's record: a value the step logs, returns or
//! puts in an error is replaced by `[secret NAME]`.

use crate::__private::bindings::weft::plugin::secrets;

/// The value of secret `name`. Fails, saying which, if the step is not
/// granted it or the tenant has not set it.
pub fn get(name: &str) -> Result<String, String> {
    secrets::get(name)
}
