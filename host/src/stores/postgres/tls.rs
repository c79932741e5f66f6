//! TLS to PostgreSQL, with rustls, as libpq's settings in the URL say
//! (core's `conninfo` reads and decides them): what is tried, what is
//! verified, the client's certificate, and the `tls-server-end-point`
//! channel binding that SCRAM-SHA-256-PLUS binds the login to.
//!
//! The driver (`postgres`, tokio-postgres underneath) asks for TLS with
//! `sslmode=prefer|require` and hands the socket to the connector here,
//! which is tokio-rustls (the rustls project's own adapter to tokio's IO,
//! the driver's) with the verifier the mode asks for.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use chatgate_core::{PgTls, RootCert, TlsVerify, TlsVersion};
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::Error;

/// The connector for `tls`: the rustls configuration built (files read)
/// now, so that a bad file is said before any connection is tried.
pub(crate) fn connector(tls: &PgTls) -> Result<MakeTls, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match (tls.min_version, tls.max_version) {
        (TlsVersion::V1_2, TlsVersion::V1_2) => &[&rustls::version::TLS12],
        (TlsVersion::V1_3, _) => &[&rustls::version::TLS13],
        (TlsVersion::V1_2, TlsVersion::V1_3) => &[&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| Error::Tls(format!("PostgreSQL TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match tls.verify() {
        TlsVerify::Nothing => Arc::new(Unverified(provider.clone())),
        verify => {
            let roots = roots(tls.root_cert.as_ref())?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| Error::Tls(format!("PostgreSQL TLS: sslrootcert: {e}")))?;
            if verify == TlsVerify::Chain {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| file_error("sslcert", cert, &e))?;
            if chain.is_empty() {
                return Err(file_error("sslcert", cert, &"no certificate in it"));
            }
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| file_error("sslkey", key, &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Tls(format!("PostgreSQL TLS: sslcert and sslkey: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.enable_sni = tls.sni;
    // What PostgreSQL 17 asks of a direct TLS connection
    // (`sslnegotiation=direct`); servers before it ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(MakeTls {
        config: Arc::new(config),
    })
}

fn file_error(setting: &str, path: &str, e: &dyn std::fmt::Display) -> Error {
    Error::Tls(format!(
        "PostgreSQL TLS: {setting} '{path}': {e}; change {setting} in the PostgreSQL URL"
    ))
}

/// The trust anchors `sslrootcert` names.
fn roots(root: Option<&RootCert>) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    match root {
        Some(RootCert::System) => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(RootCert::File(path)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| file_error("sslrootcert", path, &e))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(file_error("sslrootcert", path, &"no CA certificate in it"));
            }
        }
        // Core refuses a verifying mode without sslrootcert.
        None => {
            return Err(Error::Tls(
                "PostgreSQL TLS: sslrootcert is needed to verify the server".into(),
            ));
        }
    }
    Ok(roots)
}

/// `prefer` and `require`: the certificate taken as it comes (the
/// handshake's signatures still checked), as libpq does.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
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

/// `verify-ca`: the chain verified, whatever name the certificate has.
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

/// The driver's TLS connector.
#[derive(Clone)]
pub(crate) struct MakeTls {
    config: Arc<ClientConfig>,
}

impl<S> MakeTlsConnect<S> for MakeTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{domain}' is not a name TLS can verify: {e}"),
            )
        })?;
        Ok(Connect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
        })
    }
}

/// One handshake to come.
pub(crate) struct Connect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PgTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = self.connector.connect(self.name, stream).await?;
            Ok(PgTlsStream(tls))
        })
    }
}

/// A connection to PostgreSQL over TLS.
pub(crate) struct PgTlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for PgTlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        let (_, conn) = self.0.get_ref();
        conn.peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| server_end_point(cert))
            .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

/// RFC 5929's `tls-server-end-point`: the server certificate's hash, with
/// the hash of its signature algorithm (SHA-256 for MD5 and SHA-1). `None`
/// for an algorithm without one (Ed25519, RSA-PSS), as PostgreSQL's own
/// server, which then offers no channel binding either.
fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    use ring::digest::{SHA256, SHA384, SHA512, digest};
    let algorithm = match signature_algorithm(cert)? {
        // md5WithRSAEncryption, sha1WithRSAEncryption, sha256WithRSAEncryption
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04 | 0x05 | 0x0b]
        // ecdsa-with-SHA1 and ecdsa-with-SHA256
        | [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01]
        | [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02] => &SHA256,
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c]
        | [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03] => &SHA384,
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d]
        | [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04] => &SHA512,
        _ => return None,
    };
    Some(digest(algorithm, cert).as_ref().to_vec())
}

/// The OID of a DER certificate's `signatureAlgorithm`: `Certificate ::=
/// SEQUENCE { tbsCertificate, signatureAlgorithm SEQUENCE { OID, … }, … }`.
fn signature_algorithm(cert: &[u8]) -> Option<&[u8]> {
    let (certificate, _) = der(cert, 0x30)?;
    let (_, after_tbs) = der(certificate, 0x30)?;
    let (algorithm, _) = der(after_tbs, 0x30)?;
    let (oid, _) = der(algorithm, 0x06)?;
    Some(oid)
}

/// A DER element of `tag` at the start of `b`: its contents and what
/// follows it.
fn der(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *b.first()? != tag {
        return None;
    }
    let first = *b.get(1)?;
    let (len, start) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |acc, x| (acc << 8) | usize::from(*x));
        (len, 2 + n)
    };
    let end = start.checked_add(len)?;
    Some((b.get(start..end)?, b.get(end..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element.
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if contents.len() < 0x80 {
            v.push(contents.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(contents.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(contents);
        v
    }

    fn cert_with(oid: &[u8], tbs_len: usize) -> Vec<u8> {
        let tbs = tlv(0x30, &vec![0x05; tbs_len]);
        let algorithm = tlv(0x30, &[tlv(0x06, oid), vec![0x05, 0x00]].concat());
        let signature = tlv(0x03, &[0, 1, 2, 3]);
        tlv(0x30, &[tbs, algorithm, signature].concat())
    }

    #[test]
    fn the_binding_hash_follows_the_signature_algorithm() {
        use ring::digest::{SHA256, SHA384, digest};
        let sha256_rsa = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
        let sha1_rsa = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
        let ecdsa_sha384 = [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
        let ed25519 = [0x2b, 0x65, 0x70];
        for (oid, len) in [(&sha256_rsa[..], 10), (&sha1_rsa[..], 300)] {
            let cert = cert_with(oid, len);
            assert_eq!(
                server_end_point(&cert),
                Some(digest(&SHA256, &cert).as_ref().to_vec())
            );
        }
        let cert = cert_with(&ecdsa_sha384, 200);
        assert_eq!(
            server_end_point(&cert),
            Some(digest(&SHA384, &cert).as_ref().to_vec())
        );
        assert_eq!(server_end_point(&cert_with(&ed25519, 10)), None);
    }

    #[test]
    fn a_malformed_certificate_binds_nothing() {
        let good = cert_with(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b], 10);
        for cut in 0..good.len() {
            assert_eq!(server_end_point(&good[..cut]), None, "cut at {cut}");
        }
        assert_eq!(
            server_end_point(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
        assert_eq!(server_end_point(&[0x30, 0x80]), None);
        assert_eq!(server_end_point(&[]), None);
    }
}
