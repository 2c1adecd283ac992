//! What a store's URL says beyond what tokio-postgres reads: weft's own
//! keys (`schema`, `pool_size`), and `sslmode` and `sslrootcert` as libpq
//! reads them, with the rustls connector they make.
//!
//! `sslmode` is libpq's: `disable` (plain TCP), `prefer` (the default:
//! TLS if the server offers it), `require` (TLS), `verify-ca` (the
//! server's chain is checked against the roots), `verify-full` (and its
//! name against the host's). `prefer` and `require` check nothing unless
//! `sslrootcert` names a file, when they check as `verify-ca` does, as
//! libpq's do. The roots are the PEM file `sslrootcert` names, which
//! `verify-ca` needs; `verify-full` takes `sslrootcert=system` too, the
//! Mozilla roots that ship with weft (the default mode when that is
//! given), as libpq 16 does. A name on a public root proves nothing about
//! a chain alone, so `system` with another mode is refused.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::StoreError;

/// The connections a store's pool holds at most, unless its URL's
/// `pool_size` (or `weft --store-pool`) says.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// A store's URL, read.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The URL for tokio-postgres: without the keys read here, and with
    /// `sslmode` in a form it takes.
    pub(crate) driver: String,
    /// `schema`: where weft's tables are.
    pub(crate) schema: Option<String>,
    /// `pool_size`.
    pub(crate) pool_size: Option<usize>,
    pub(crate) ssl: SslMode,
    /// `sslrootcert`: a PEM file, or `system`.
    pub(crate) root: Option<String>,
}

fn bad(message: String) -> StoreError {
    StoreError::Config {
        what: "the store's URL".to_owned(),
        message,
    }
}

/// Reads `url`'s query. A URL without one, or a `key=value` connection
/// string, is handed on as it is.
pub(crate) fn parse(url: &str) -> Result<Settings, StoreError> {
    let mut settings = Settings {
        driver: url.to_owned(),
        schema: None,
        pool_size: None,
        ssl: SslMode::Prefer,
        root: None,
    };
    let Some(scheme) = url.find("://") else {
        return Ok(settings);
    };
    // The query starts after the user and password, which may hold a `?`
    // (tokio-postgres reads them up to the first `@`).
    let authority = scheme + 3;
    let from = url[authority..]
        .find('@')
        .map_or(authority, |at| authority + at + 1);
    let Some(mark) = url[from..].find('?').map(|at| from + at) else {
        return Ok(settings);
    };
    let (base, query) = (&url[..mark], &url[mark + 1..]);
    let decode = |text: &str, what: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .map(std::borrow::Cow::into_owned)
            .map_err(|_| bad(format!("{what} is not UTF-8 once decoded")))
    };
    let mut kept = Vec::new();
    let mut mode = None;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(key, "a key of the query")?;
        let decoded = decode(value, &format!("`{key}`"))?;
        match key.as_str() {
            "schema" => {
                plain_name(&decoded)?;
                settings.schema = Some(decoded);
            }
            "pool_size" => {
                settings.pool_size = Some(pool_size(&decoded)?);
            }
            "sslmode" => {
                mode = Some(match decoded.as_str() {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(bad(format!(
                            "sslmode `{other}` is not one of disable, prefer, require, verify-ca, verify-full"
                        )));
                    }
                });
            }
            "sslrootcert" => settings.root = Some(decoded),
            _ => kept.push(pair),
        }
    }
    let system = settings.root.as_deref() == Some("system");
    settings.ssl = match mode {
        Some(mode) => mode,
        None if system => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    match settings.ssl {
        SslMode::VerifyFull if settings.root.is_none() => {
            return Err(bad(
                "sslmode `verify-full` needs sslrootcert: a PEM file of the roots, or `system` for the Mozilla roots"
                    .to_owned(),
            ));
        }
        SslMode::VerifyCa if settings.root.is_none() || system => {
            return Err(bad(
                "sslmode `verify-ca` needs sslrootcert: a PEM file of the roots (`system` only with verify-full, where the name is checked too)"
                    .to_owned(),
            ));
        }
        SslMode::Disable | SslMode::Prefer | SslMode::Require if system => {
            return Err(bad(format!(
                "sslrootcert `system` is only for sslmode `verify-full`, not `{}`",
                settings.ssl.name()
            )));
        }
        _ => {}
    }
    // tokio-postgres reads `disable`, `prefer` and `require`; the checks
    // beyond are the connector's.
    kept.push(match settings.ssl {
        SslMode::Disable => "sslmode=disable",
        SslMode::Prefer => "sslmode=prefer",
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "sslmode=require",
    });
    settings.driver = format!("{base}?{}", kept.join("&"));
    Ok(settings)
}

/// `schema`, if it is a plain name (letters, digits and `_`), which is
/// safe to write into SQL as it is.
pub(crate) fn plain_name(schema: &str) -> Result<(), StoreError> {
    if schema.is_empty()
        || !schema
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(StoreError::Config {
            what: format!("schema `{schema}`"),
            message: "not a plain name (letters, digits and `_`)".to_owned(),
        });
    }
    Ok(())
}

/// A pool size: 2 to 1,000 connections (a batch and a read at once, at
/// least).
pub(crate) fn pool_size(text: &str) -> Result<usize, StoreError> {
    match text.parse::<usize>() {
        Ok(n) if (2..=1000).contains(&n) => Ok(n),
        _ => Err(bad(format!(
            "pool_size `{text}` is not a number of connections from 2 to 1000"
        ))),
    }
}

impl SslMode {
    fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// The TLS configuration of `settings`: who is trusted, and how far.
pub(crate) fn tls(settings: &Settings) -> Result<rustls::ClientConfig, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("cannot configure TLS: {e}")))?;
    let checked = match settings.ssl {
        SslMode::Disable => false,
        SslMode::Prefer | SslMode::Require => settings.root.is_some(),
        SslMode::VerifyCa | SslMode::VerifyFull => true,
    };
    let verifier: Arc<dyn ServerCertVerifier> = if checked {
        let roots = roots(settings.root.as_deref())?;
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| bad(format!("cannot use the roots of sslrootcert: {e}")))?;
        if settings.ssl == SslMode::VerifyFull {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        }
    } else {
        Arc::new(Unchecked(provider))
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// The roots `sslrootcert` names: the certificates of a PEM file, or
/// (`system`) the Mozilla roots.
fn roots(root: Option<&str>) -> Result<rustls::RootCertStore, StoreError> {
    let mut store = rustls::RootCertStore::empty();
    match root {
        None | Some("system") => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let unreadable = |e: &dyn std::fmt::Display| StoreError::Config {
                what: format!("sslrootcert `{path}`"),
                message: format!("cannot read its certificates ({e})"),
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| unreadable(&e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| unreadable(&e))?;
            if certs.is_empty() {
                return Err(unreadable(&"no certificate in it"));
            }
            for cert in certs {
                store.add(cert).map_err(|e| unreadable(&e))?;
            }
        }
    }
    Ok(store)
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without roots: the connection is encrypted,
/// and whoever answers is trusted (libpq's meaning of these modes). The
/// handshake's signatures are still checked against the certificate.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weft_keys_and_libpq_ssl_modes_are_read_and_the_rest_handed_on() {
        let read = parse(
            "postgres://u@h:5/db?schema=weft&application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&pool_size=40",
        )
        .unwrap();
        assert_eq!(read.schema.as_deref(), Some("weft"));
        assert_eq!(read.pool_size, Some(40));
        assert_eq!(read.ssl, SslMode::VerifyFull);
        assert_eq!(read.root.as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(
            read.driver,
            "postgres://u@h:5/db?application_name=x&sslmode=require"
        );
        let plain = parse("postgres://u@h/db").unwrap();
        assert_eq!(
            (plain.driver.as_str(), plain.ssl),
            ("postgres://u@h/db", SslMode::Prefer)
        );
        // A `?` in the password is the password's; a key may be encoded.
        let odd = parse("postgres://u:pa?ss@h/db?ssl%6Dode=require").unwrap();
        assert_eq!(odd.ssl, SslMode::Require);
        assert_eq!(odd.driver, "postgres://u:pa?ss@h/db?sslmode=require");
        let bare = parse("postgres://u:pa?ss@h/db").unwrap();
        assert_eq!(bare.driver, "postgres://u:pa?ss@h/db");
        // `system` alone means verify-full.
        let system = parse("postgres://h/db?sslrootcert=system").unwrap();
        assert_eq!(system.ssl, SslMode::VerifyFull);
    }

    #[test]
    fn modes_that_would_check_less_than_they_say_are_refused() {
        let said = |url: &str| parse(url).unwrap_err().to_string();
        assert!(said("postgres://h/db?sslmode=verify-full").contains("needs sslrootcert"));
        assert!(said("postgres://h/db?sslmode=verify-ca").contains("needs sslrootcert"));
        assert!(
            said("postgres://h/db?sslmode=verify-ca&sslrootcert=system")
                .contains("needs sslrootcert")
        );
        assert!(
            said("postgres://h/db?sslmode=require&sslrootcert=system")
                .contains("only for sslmode `verify-full`, not `require`")
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let said = |url: &str| parse(url).unwrap_err().to_string();
        assert!(said("postgres://h/db?sslmode=verify").contains("sslmode `verify`"));
        assert!(said("postgres://h/db?schema=a;drop").contains("schema `a;drop`"));
        assert!(said("postgres://h/db?pool_size=1").contains("pool_size `1`"));
        assert!(said("postgres://h/db?pool_size=x").contains("pool_size `x`"));
    }

    #[test]
    fn a_root_file_that_is_missing_or_holds_no_certificate_is_named() {
        let settings = |root: &str| Settings {
            driver: String::new(),
            schema: None,
            pool_size: None,
            ssl: SslMode::VerifyFull,
            root: Some(root.to_owned()),
        };
        let missing = tls(&settings("/nonexistent/ca.pem"))
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("sslrootcert `/nonexistent/ca.pem`"),
            "{missing}"
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate").unwrap();
        let said = tls(&settings(empty.to_str().unwrap()))
            .unwrap_err()
            .to_string();
        assert!(said.contains("no certificate"), "{said}");
        assert!(tls(&settings("system")).is_ok());
    }
}
