//! The egress policies in force: the host's, and each tenant's.

use std::collections::HashMap;
use std::sync::RwLock;

use weft_core::egress::{Policy, Rule};

/// What bounds each tenant's outgoing HTTP (steps' requests and webhook
/// deliveries):
///
/// 1. the tenant's own policy, set with its quota, if it has one;
/// 2. else the host's (`--egress-allow`), if set;
/// 3. else, for the host's own tenant `default`, nothing but the step's
///    grants; for any other tenant, public addresses only.
#[derive(Debug, Default)]
pub struct EgressPolicies {
    host: Option<Vec<Rule>>,
    tenants: RwLock<HashMap<String, Vec<Rule>>>,
}

impl EgressPolicies {
    /// Policies under the host's `rules`, if any.
    pub fn new(host: Option<Vec<Rule>>) -> Self {
        Self {
            host,
            tenants: RwLock::default(),
        }
    }

    /// Sets (or, with `None`, lifts) `tenant`'s own policy.
    pub fn set_tenant(&self, tenant: &str, rules: Option<Vec<Rule>>) {
        let mut tenants = weft_core::write(&self.tenants);
        match rules {
            Some(rules) => tenants.insert(tenant.to_owned(), rules),
            None => tenants.remove(tenant),
        };
    }

    /// The policy that bounds `tenant`.
    pub fn policy(&self, tenant: &str) -> Policy {
        if let Some(rules) = weft_core::read(&self.tenants).get(tenant) {
            return Policy::Rules(rules.clone());
        }
        match &self.host {
            Some(rules) => Policy::Rules(rules.clone()),
            None if tenant == weft_core::tenant::DEFAULT => Policy::Unbounded,
            None => Policy::public_only(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_policy_comes_first_then_the_hosts_then_the_default() {
        let rule = |t: &str| Rule::parse(t, None).unwrap();
        let open = EgressPolicies::new(None);
        assert_eq!(open.policy("default"), Policy::Unbounded);
        assert_eq!(open.policy("acme"), Policy::public_only());
        open.set_tenant("acme", Some(vec![rule("https://a.org")]));
        assert_eq!(
            open.policy("acme"),
            Policy::Rules(vec![rule("https://a.org")])
        );
        open.set_tenant("acme", None);
        assert_eq!(open.policy("acme"), Policy::public_only());
        let host = EgressPolicies::new(Some(vec![rule("https://b.org")]));
        assert_eq!(
            host.policy("default"),
            Policy::Rules(vec![rule("https://b.org")])
        );
    }
}
