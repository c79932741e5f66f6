//! What the gateway gives a client to carry its model's reasoning between
//! turns, and how it knows it again: a Messages thinking block's
//! `signature` (an HMAC-SHA256 over the thinking text) and a Responses
//! reasoning item's `encrypted_content` (the reasoning text sealed with
//! AES-256-GCM). Both under keys derived (HKDF-SHA256) from one deployment
//! secret, which every instance of a fleet shares so that what one
//! instance gave out, any other takes back.
//!
//! The sealing is deterministic: its nonce is an HMAC of the text under a
//! key of its own (a synthetic IV), so the same reasoning sealed twice is
//! the same string, nothing random is needed here, and two sealings share
//! a nonce only when they share the text. Opening checks the GCM tag and
//! then that the nonce is the one the text gives.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::{aead, hkdf, hmac};

/// The prefix of a thinking block's signature.
pub const SIGNATURE_PREFIX: &str = "chatgate.v2.";
/// The prefix of a reasoning item's `encrypted_content`.
pub const SEALED_PREFIX: &str = "chatgate.sealed.v1.";

/// Shortest deployment secret accepted, in bytes.
pub const MIN_SECRET: usize = 32;

/// The nonce's length (AES-GCM's 96 bits).
const NONCE: usize = 12;
/// What the sealed text is bound to besides its key.
const AAD: &[u8] = b"chatgate reasoning";

/// The keys that sign and seal reasoning.
pub struct ReasoningSeal {
    sign: hmac::Key,
    nonce: hmac::Key,
    seal: aead::LessSafeKey,
}

impl std::fmt::Debug for ReasoningSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReasoningSeal(<keys>)")
    }
}

/// A thinking block's signature, made as its text passes
/// ([`ReasoningSeal::signer`]): at most [`PENDING`] bytes of the text are
/// kept, and given to the MAC together (a delta is a few bytes, and each
/// update of the MAC costs more than copying them).
pub struct Signer {
    mac: hmac::Context,
    pending: Vec<u8>,
}

/// The text a [`Signer`] holds before it updates its MAC.
const PENDING: usize = 1024;

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer")
    }
}

impl Signer {
    /// The next piece of the text.
    pub fn update(&mut self, text: &[u8]) {
        if self.pending.len() + text.len() > PENDING {
            self.mac.update(&self.pending);
            self.pending.clear();
            if text.len() > PENDING {
                self.mac.update(text);
                return;
            }
        }
        if self.pending.capacity() == 0 {
            self.pending.reserve_exact(PENDING);
        }
        self.pending.extend_from_slice(text);
    }

    /// The signature of all the pieces.
    pub fn finish(mut self) -> String {
        self.mac.update(&self.pending);
        signature(&self.mac.sign())
    }
}

/// A signature as a thinking block carries it: the prefix, then the tag.
fn signature(tag: &hmac::Tag) -> String {
    let mut s = String::with_capacity(SIGNATURE_PREFIX.len() + 43);
    s.push_str(SIGNATURE_PREFIX);
    URL_SAFE_NO_PAD.encode_string(tag.as_ref(), &mut s);
    s
}

/// The length HKDF is asked for: the AEAD key's.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl ReasoningSeal {
    /// The keys derived from `secret` (any length; [`MIN_SECRET`] bytes or
    /// more is what the configuration accepts).
    pub fn new(secret: &[u8]) -> ReasoningSeal {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"chatgate reasoning keys").extract(secret);
        let expand = |label: &'static [u8], len: usize| {
            let mut key = vec![0u8; len];
            // The lengths asked for are far below HKDF's limit (255 × 32).
            if let Ok(okm) = prk.expand(&[label], Len(len)) {
                let _ = okm.fill(&mut key);
            }
            key
        };
        let sign = hmac::Key::new(hmac::HMAC_SHA256, &expand(b"thinking signature", 32));
        let nonce = hmac::Key::new(hmac::HMAC_SHA256, &expand(b"sealing nonce", 32));
        let key = expand(b"sealing key", aead::AES_256_GCM.key_len());
        // A key of the algorithm's length is always accepted.
        let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, &key)
            .unwrap_or_else(|_| unreachable!("an AES-256 key is 32 bytes"));
        ReasoningSeal {
            sign,
            nonce,
            seal: aead::LessSafeKey::new(unbound),
        }
    }

    /// The signature of a thinking block whose text is `text`.
    pub fn sign(&self, text: &[u8]) -> String {
        signature(&hmac::sign(&self.sign, text))
    }

    /// A signature made as a block's text passes, piece by piece.
    pub fn signer(&self) -> Signer {
        Signer {
            mac: hmac::Context::with_key(&self.sign),
            pending: Vec::new(),
        }
    }

    /// Whether `signature` is the one this gateway gives `text`.
    pub fn verify(&self, text: &[u8], signature: &[u8]) -> bool {
        let Some(encoded) = signature.strip_prefix(SIGNATURE_PREFIX.as_bytes()) else {
            return false;
        };
        match URL_SAFE_NO_PAD.decode(encoded) {
            Ok(tag) => hmac::verify(&self.sign, text, &tag).is_ok(),
            Err(_) => false,
        }
    }

    /// `text` sealed: what a reasoning item's `encrypted_content` holds.
    pub fn seal(&self, text: &[u8]) -> String {
        let nonce = self.nonce_for(text);
        let mut sealed = Vec::with_capacity(NONCE + text.len() + aead::MAX_TAG_LEN);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(text);
        let mut body = sealed.split_off(NONCE);
        // Sealing in place cannot fail for a buffer this size.
        let _ = self.seal.seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(AAD),
            &mut body,
        );
        sealed.extend_from_slice(&body);
        let mut s = String::with_capacity(SEALED_PREFIX.len() + sealed.len() * 4 / 3 + 4);
        s.push_str(SEALED_PREFIX);
        URL_SAFE_NO_PAD.encode_string(&sealed, &mut s);
        s
    }

    /// The text `sealed` holds, when this gateway sealed it (else `None`:
    /// another deployment's, another provider's, or changed).
    pub fn open(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        let encoded = sealed.strip_prefix(SEALED_PREFIX.as_bytes())?;
        let mut raw = URL_SAFE_NO_PAD.decode(encoded).ok()?;
        if raw.len() < NONCE + aead::MAX_TAG_LEN {
            return None;
        }
        let mut body = raw.split_off(NONCE);
        let nonce: [u8; NONCE] = raw.try_into().ok()?;
        let text = self
            .seal
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(AAD),
                &mut body,
            )
            .ok()?;
        (self.nonce_for(text) == nonce).then(|| text.to_vec())
    }

    /// The synthetic nonce for `text`.
    fn nonce_for(&self, text: &[u8]) -> [u8; NONCE] {
        let tag = hmac::sign(&self.nonce, text);
        let mut nonce = [0u8; NONCE];
        nonce.copy_from_slice(&tag.as_ref()[..NONCE]);
        nonce
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_for_its_text_and_secret_only() {
        let a = ReasoningSeal::new(b"a secret of at least thirty-two bytes!!");
        let b = ReasoningSeal::new(b"another secret of at least thirty-two b");
        let sig = a.sign("think é".as_bytes());
        assert!(sig.starts_with(SIGNATURE_PREFIX));
        assert!(a.verify("think é".as_bytes(), sig.as_bytes()));
        assert!(!a.verify(b"think e", sig.as_bytes()));
        assert!(!b.verify("think é".as_bytes(), sig.as_bytes()));
        assert!(!a.verify(b"", b""));
        assert!(!a.verify(b"x", b"chatgate.v1.req_0"));
        let mut tampered = sig.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] ^= 1;
        assert!(!a.verify("think é".as_bytes(), &tampered));
    }

    #[test]
    fn a_signature_made_piece_by_piece_is_the_whole_texts() {
        let a = ReasoningSeal::new(b"a secret of at least thirty-two bytes!!");
        let text: Vec<u8> = (0..5000u32).map(|i| b'a' + (i * 7 % 26) as u8).collect();
        for sizes in [
            &[1usize][..],
            &[7, 300],
            &[1023, 2],
            &[1024],
            &[1025, 3],
            &[4000, 1],
        ] {
            let mut s = a.signer();
            let mut at = 0;
            for &n in sizes.iter().cycle() {
                let end = (at + n).min(text.len());
                s.update(&text[at..end]);
                at = end;
                if at == text.len() {
                    break;
                }
            }
            assert_eq!(s.finish(), a.sign(&text), "{sizes:?}");
        }
        assert_eq!(a.signer().finish(), a.sign(b""));
    }

    #[test]
    fn sealed_text_opens_only_unchanged_and_under_its_secret() {
        let a = ReasoningSeal::new(b"a secret of at least thirty-two bytes!!");
        let b = ReasoningSeal::new(b"another secret of at least thirty-two b");
        for text in [
            &b""[..],
            b"x",
            "long reasoning \u{1F600} ".repeat(100).as_bytes(),
        ] {
            let sealed = a.seal(text);
            assert!(sealed.starts_with(SEALED_PREFIX));
            assert_eq!(a.open(sealed.as_bytes()).as_deref(), Some(text));
            assert_eq!(sealed, a.seal(text), "deterministic");
            assert_eq!(b.open(sealed.as_bytes()), None);
            // Every byte of it matters.
            let body = SEALED_PREFIX.len();
            for i in (body..sealed.len()).step_by(7) {
                let mut t = sealed.clone().into_bytes();
                t[i] = if t[i] == b'A' { b'B' } else { b'A' };
                assert_eq!(a.open(&t), None, "byte {i}");
            }
        }
        assert_eq!(a.open(b"gAAAAABn-openai-encrypted"), None);
        assert_eq!(a.open(SEALED_PREFIX.as_bytes()), None);
        assert_eq!(a.open(b"chatgate.sealed.v1.!!!"), None);
    }
}
