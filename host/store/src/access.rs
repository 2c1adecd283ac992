//! Who may do what: tenants with their quotas, API tokens with their
//! roles, and the audit log of what changed a tenant.
//!
//! A token's secret is never stored: a token reads `weft_<id>_<secret>`,
//! and its row, under `<id>`, keeps the SHA-256 of the whole token. A
//! token is revoked by stamping its row; rows are never removed, so
//! "a token exists" only ever turns from false to true.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use weft_core::clock::Timestamp;

/// A tenant: a namespace of workflows, runs, channels, key spaces and
/// plugins, held to its quota.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// Its name.
    pub name: String,
    /// When it was added.
    pub created_at: Timestamp,
    /// Its limits; `None` fields are unlimited.
    #[serde(default)]
    pub quota: Quota,
}

/// A tenant's limits. Each `None` is unlimited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Runs started per second over the API, as a token bucket that holds
    /// one second's worth: a start beyond it is refused with `429
    /// quota_exceeded` and `Retry-After`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_per_second: Option<u32>,
    /// Deployments per second over the API (workflow deployments, plugin
    /// uploads and snapshot publishes together, each of which parses or
    /// compiles what it is sent), as a token bucket that holds one
    /// second's worth: beyond it, `429 quota_exceeded` with `Retry-After`,
    /// before what was sent is parsed or compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploys_per_second: Option<u32>,
    /// Plugins (versions) the tenant may keep in the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugins: Option<u32>,
    /// The largest plugin component, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugin_bytes: Option<u64>,
    /// Subscriptions (SSE and webhook) the tenant may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_subscriptions: Option<u32>,
    /// Runs resident (in progress in memory) at once on each host; beyond
    /// it, the tenant's runs are parked, never dropped, and start in turn
    /// as its runs end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resident: Option<u32>,
    /// The tenant's share of each host's turns, against 1 for a tenant
    /// without one: how many of its items of work, and of its parked runs,
    /// are taken in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// The longest a step's call may run, in milliseconds: a deployment
    /// whose step asks for longer is refused, and a step's default is cut
    /// to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_step_timeout_ms: Option<u64>,
    /// The most memory a step's call may have, in bytes: a deployment
    /// whose step asks for more is refused, and a step's default is cut to
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_step_memory: Option<u64>,
    /// Guest time the tenant's calls may take per minute on each host, in
    /// milliseconds (measured as each call's time on its thread). Once it
    /// is spent, a step due waits, on a timer, for the next minute; its
    /// record says `cpu_quota`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_ms_per_minute: Option<u64>,
    /// The bytes the tenant's runs may keep in the store: run inputs,
    /// step records (outputs, errors, logs), key-value values, messages
    /// and child starts, as [`Charge`](crate::Charge)s count them. A start
    /// or a step result that would go over it is refused with
    /// `storage_quota`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stored_bytes: Option<u64>,
    /// Timers the tenant's runs may have pending at once (`sleep` and
    /// `await` timeouts, retry delays, run deadlines): a step that would
    /// set a `sleep` or an `await` timeout past it fails with
    /// `timer_quota`. Deadlines and retry delays are counted, never
    /// refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_timers: Option<u64>,
    /// Rows of the audit log kept for the tenant: past it, its oldest
    /// are deleted as new ones are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_audit_rows: Option<u64>,
    /// Workflow revisions the tenant may keep (each deployment that
    /// changes a definition is one, kept until the workflow's tenant is
    /// removed): a deployment past it is refused with `429
    /// quota_exceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_revisions: Option<u32>,
    /// Bytes of snapshot revisions the tenant may keep (each kept
    /// revision's file): a publish that would go past it is refused with
    /// `507 storage_quota` as its body comes in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshot_bytes: Option<u64>,
    /// Where the tenant's steps and webhooks may send HTTP requests: every
    /// grant of its workflows, and every request, must match one of these
    /// rules (see `weft_core::egress`). Unset: the host's policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<weft_core::egress::Rule>>,
    /// How long the tenant's ended runs and settled messages are kept
    /// when their workflow does not say (`retain:`): a duration such as
    /// `7d`, or `forever`. Unset: the host's `--retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain: Option<String>,
}

impl Quota {
    /// What a tenant added without a quota gets: bounds on everything it
    /// can make a host hold, generous for one tenant's ordinary work, so
    /// that a tenant nobody thought to limit cannot take the host from the
    /// others. Tenant `default`, the host's own, has none unless set. An
    /// admin changes them with `weft tenants quota` (a field left out is
    /// lifted).
    pub fn tenant_default() -> Self {
        Self {
            starts_per_second: Some(200),
            deploys_per_second: Some(10),
            max_plugins: Some(100),
            max_plugin_bytes: Some(64 << 20),
            max_subscriptions: Some(100),
            max_resident: Some(2_000),
            weight: None,
            max_step_timeout_ms: Some(15 * 60 * 1000),
            max_step_memory: Some(512 << 20),
            guest_ms_per_minute: None,
            max_stored_bytes: Some(10 << 30),
            max_timers: Some(100_000),
            max_audit_rows: Some(100_000),
            max_revisions: Some(1_000),
            max_snapshot_bytes: Some(4 << 30),
            egress: None,
            retain: None,
        }
    }
}

/// What a token may do. Each role has the rights of those listed after
/// it that it names: `owner` has `deployer`'s and `operator`'s, both of
/// which have `reader`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads its tenant's objects, and follows its channels (SSE).
    Reader,
    /// `reader`, and starts, cancels and answers runs, acks and resends
    /// deliveries.
    Operator,
    /// `reader`, and deploys workflows and plugins, and manages schedules
    /// and subscriptions.
    Deployer,
    /// Everything in its tenant: tokens, the audit log, its quota and
    /// usage.
    Owner,
    /// Everything in every tenant: tenants, quotas, shared plugins.
    Admin,
}

/// What a request needs, checked against a [`Role`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Read objects.
    Read,
    /// Start, cancel, answer; ack and resend.
    Operate,
    /// Deploy; schedules and subscriptions.
    Deploy,
    /// Tokens, audit, quota view.
    Own,
    /// Tenants, quotas, shared plugins.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 5] = [
        Role::Reader,
        Role::Operator,
        Role::Deployer,
        Role::Owner,
        Role::Admin,
    ];

    /// Whether this role has `right`.
    pub fn grants(self, right: Right) -> bool {
        match right {
            Right::Read => true,
            Right::Operate => matches!(self, Role::Operator | Role::Owner | Role::Admin),
            Right::Deploy => matches!(self, Role::Deployer | Role::Owner | Role::Admin),
            Right::Own => matches!(self, Role::Owner | Role::Admin),
            Right::Admin => self == Role::Admin,
        }
    }

    /// Its name, as written.
    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Operator => "operator",
            Role::Deployer => "deployer",
            Role::Owner => "owner",
            Role::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == text)
            .ok_or_else(|| {
                format!("`{text}` is not a role; use admin, owner, deployer, operator or reader")
            })
    }
}

/// An API token's row. The token itself is shown once, when it is made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Its public id, the `<id>` of `weft_<id>_<secret>`.
    pub id: String,
    /// `sha256:<hex>` of the whole token.
    pub hash: String,
    /// The tenant it acts in.
    pub tenant: String,
    /// What it may do there.
    pub role: Role,
    /// A note for people, such as who holds it.
    #[serde(default)]
    pub label: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it stops working by itself.
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
    /// When it was revoked.
    #[serde(default)]
    pub revoked_at: Option<Timestamp>,
    /// Who made it: a token's id, or `local`.
    #[serde(default)]
    pub created_by: String,
}

/// One change to a tenant, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When.
    pub at: Timestamp,
    /// The tenant changed.
    pub tenant: String,
    /// Who: a token's id, or `local` for a request without a token.
    pub actor: String,
    /// What, such as `workflow.deploy` or `token.revoke`.
    pub action: String,
    /// What it was done to, such as a workflow's id or a token's id.
    pub object: String,
    /// More, where there is more to say.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

/// A tenant's secret as stored: its value sealed with a key the store
/// does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretRecord {
    /// The secret's name.
    pub name: String,
    /// The sealed value: key id, nonce, ciphertext and tag.
    pub sealed: Vec<u8>,
    /// When it was last set.
    pub updated_at: Timestamp,
    /// The plugins (exact components) whose steps may read it. A step of
    /// any other component is refused the secret, so a tenant's deployer
    /// cannot read it through a plugin of its own. Setting a secret again
    /// keeps its grants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<SecretGrant>,
}

/// A plugin granted a secret: its name and the digest of the component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretGrant {
    /// The plugin's name, as the component describes itself (the same for
    /// a tenant's own plugin and a shared one: the digest tells them
    /// apart).
    pub plugin: String,
    /// The component's digest (`sha256:...`).
    pub digest: String,
}

impl SecretRecord {
    /// Whether the component with `digest` may read this secret.
    pub fn granted_to(&self, digest: &str) -> bool {
        self.grants.iter().any(|g| g.digest == digest)
    }
}

/// A change to the tenants, tokens, secrets or audit tables.
#[derive(Debug, Clone)]
pub enum AccessWrite {
    /// Stores tenant `name` (the encoded [`TenantRecord`]); with `new`,
    /// refused with [`Refused::Exists`](crate::Refused::Exists) if
    /// it exists, else with
    /// [`Refused::NotFound`](crate::Refused::NotFound) if it does
    /// not.
    PutTenant {
        /// The tenant.
        name: String,
        /// The encoded [`TenantRecord`].
        record: Vec<u8>,
        /// Whether it must be new.
        new: bool,
    },
    /// Removes tenant `name`; refused with
    /// [`Refused::NotFound`](crate::Refused::NotFound) if there is
    /// no such tenant.
    RemoveTenant(String),
    /// Stores token `id` (the encoded [`TokenRecord`]); with `new`,
    /// refused if it exists, else if it does not.
    PutToken {
        /// The token's id.
        id: String,
        /// The encoded [`TokenRecord`].
        record: Vec<u8>,
        /// Whether it must be new.
        new: bool,
    },
    /// Stores a tenant's secret, sealed (encrypted) by the engine: the
    /// store never sees its value. The grants of a secret stored already
    /// are kept, whatever `record` says.
    PutSecret {
        /// The tenant.
        tenant: String,
        /// The secret's name.
        name: String,
        /// The encoded [`SecretRecord`].
        record: Vec<u8>,
    },
    /// Seals a stored secret again (after a key rotation): stores `record`
    /// only if the secret still holds `sealed`, the value it was read
    /// with, keeping its grants; refused with
    /// [`Refused::NotFound`](crate::Refused::NotFound) if it was
    /// deleted since, and with
    /// [`Refused::Changed`](crate::Refused::Changed) if it was set
    /// again. So a reseal never brings a deleted secret back, nor an old
    /// value over a new one.
    ResealSecret {
        /// The tenant.
        tenant: String,
        /// The secret's name.
        name: String,
        /// The sealed value it was read with.
        sealed: Vec<u8>,
        /// The encoded [`SecretRecord`], sealed again.
        record: Vec<u8>,
    },
    /// Grants a tenant's secret to a plugin's component, or with `revoke`
    /// takes back every grant of that plugin's name (`grant.digest` is then
    /// not read); refused with
    /// [`Refused::NotFound`](crate::Refused::NotFound) if it has no
    /// secret by that name.
    GrantSecret {
        /// The tenant.
        tenant: String,
        /// The secret's name.
        name: String,
        /// The plugin.
        grant: SecretGrant,
        /// Whether to take grants back instead.
        revoke: bool,
    },
    /// Removes a tenant's secret; refused with
    /// [`Refused::NotFound`](crate::Refused::NotFound) if it has none
    /// by that name.
    DeleteSecret {
        /// The tenant.
        tenant: String,
        /// The secret's name.
        name: String,
    },
    /// Appends an entry to the audit log under `key` (its time in
    /// microseconds, then a random number).
    Audit {
        /// Where it sorts.
        key: (u64, u64),
        /// The encoded [`AuditRecord`].
        record: Vec<u8>,
    },
}

impl AccessWrite {
    /// Stores `record` under its name (see [`AccessWrite::PutTenant`]).
    pub fn put_tenant(record: &TenantRecord, new: bool) -> Self {
        Self::PutTenant {
            name: record.name.clone(),
            record: crate::encode(record),
            new,
        }
    }
}
