//! A part's `thoughtSignature` as this gateway gives it out and takes it
//! back: the answer's reasoning sealed ([`ReasoningSeal::seal`]), then
//! base64-encoded once more.
//!
//! The second encoding is for the clients: the signature is a `bytes`
//! field in Google's API, and the Python SDK decodes it as base64 when it
//! reads an answer (a sealed string, with its dots, fails that and the
//! whole answer with it) and encodes it again, URL-safe and padded, when
//! it sends the turn back. So the signature is given out URL-safe and
//! padded (what comes back from Python is then the same string), and
//! taken back in either alphabet, padded or not (what other clients may
//! make of it).

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE};
use base64::engine::{DecodePaddingMode, general_purpose};

use crate::reasoning::ReasoningSeal;

/// URL-safe, padding optional.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The `thoughtSignature` that carries `reasoning` (its text).
pub(crate) fn give(seal: &ReasoningSeal, reasoning: &[u8]) -> String {
    URL_SAFE.encode(seal.seal(reasoning))
}

/// The reasoning a `thoughtSignature` (its text, unescaped) carries, when
/// this gateway gave it out; `None` for any other (Google's own, Gemini
/// CLI's `skip_thought_signature_validator`, a changed one).
pub(crate) fn take(seal: &ReasoningSeal, signature: &[u8]) -> Option<Vec<u8>> {
    let url_safe: Vec<u8> = signature
        .iter()
        .map(|&b| match b {
            b'+' => b'-',
            b'/' => b'_',
            b => b,
        })
        .collect();
    let sealed = LENIENT
        .decode(&url_safe)
        .or_else(|_| general_purpose::STANDARD.decode(signature))
        .ok()?;
    seal.open(&sealed).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_comes_back_in_any_base64_spelling() {
        let seal = ReasoningSeal::new(b"a secret of at least thirty-two bytes!!");
        let given = give(&seal, "why \u{e9}".as_bytes());
        assert!(!given.contains('.'), "base64 only: {given}");
        let standard = given.replace('-', "+").replace('_', "/");
        let bare = given.trim_end_matches('=');
        for s in [&given[..], &standard, bare] {
            assert_eq!(
                take(&seal, s.as_bytes()).as_deref(),
                Some("why \u{e9}".as_bytes())
            );
        }
        let other = ReasoningSeal::new(b"another secret of at least thirty-two b");
        assert_eq!(take(&other, given.as_bytes()), None);
        assert_eq!(take(&seal, b"skip_thought_signature_validator"), None);
        assert_eq!(take(&seal, b"CiQBjz1rX8w="), None);
        assert_eq!(take(&seal, b""), None);
    }
}
