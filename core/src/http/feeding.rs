//! Test support: every codec case is fed whole, one byte per feed, cut into
//! two at every position, and cut at proptest-chosen points, and must end
//! the same way each time: the same parsed head or error, the same body
//! bytes, the same number of bytes consumed.
//!
//! A case table calls [`all_ways`] once per case and checks its own
//! expectations against the outcome all the ways agreed on.

use proptest::collection::vec;
use proptest::prop_assert_eq;
use proptest::test_runner::{Config, TestRunner};

use super::body::BodyDecoder;
use super::chunked::ChunkedDecoder;
use super::request::{RequestHead, leading_empty_lines, parse_request_head};
use super::response::{ResponseHead, parse_response_head};
use super::{HeadScanner, HttpError, HttpLimits};

/// A codec being fed its input in pieces.
pub(crate) trait Fed {
    /// How feeding ended.
    type Outcome: PartialEq + std::fmt::Debug;
    /// Offers the next piece (possibly empty). Returns false once the codec
    /// takes nothing more (it finished or failed); no piece follows then.
    fn feed(&mut self, piece: &[u8]) -> bool;
    /// The input is over (every piece offered, or the codec stopped).
    fn outcome(self) -> Self::Outcome;
}

/// Feeds `input` to `codec` cut at `cuts` (ascending positions; duplicates
/// give empty pieces).
fn feed_cut<F: Fed>(mut codec: F, input: &[u8], cuts: &[usize]) -> F::Outcome {
    let mut from = 0;
    for &to in cuts.iter().chain([&input.len()]) {
        let to = to.clamp(from, input.len());
        if !codec.feed(&input[from..to]) {
            break;
        }
        from = to;
    }
    codec.outcome()
}

/// Runs one case every way and returns the outcome they all agree on;
/// panics, naming the input and the cuts, when one way differs.
#[track_caller]
pub(crate) fn all_ways<F: Fed>(input: &[u8], start: impl Fn() -> F) -> F::Outcome {
    let shown = String::from_utf8_lossy(input);
    let whole = feed_cut(start(), input, &[]);
    let bytewise: Vec<usize> = (1..input.len()).collect();
    assert_eq!(
        feed_cut(start(), input, &bytewise),
        whole,
        "one byte per feed differs from whole: {shown:?}"
    );
    for cut in 0..=input.len() {
        assert_eq!(
            feed_cut(start(), input, &[cut]),
            whole,
            "cut at {cut} differs from whole: {shown:?}"
        );
    }
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let cuts = vec(0..=input.len(), 0..10);
    let agreed = runner.run(&cuts, |mut cuts| {
        cuts.sort_unstable();
        prop_assert_eq!(&feed_cut(start(), input, &cuts), &whole);
        Ok(())
    });
    if let Err(e) = agreed {
        panic!("cut at random points differs from whole: {shown:?}: {e}");
    }
    whole
}

/// What a body decoder produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The body bytes.
    pub body: Vec<u8>,
    /// Input bytes the body used.
    pub consumed: usize,
    /// The body ended.
    pub done: bool,
}

/// The body decoders, alike.
pub(crate) trait Decoder {
    fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError>;
    fn is_done(&self) -> bool;
    /// The peer closed.
    fn finish(&mut self) -> Result<(), HttpError>;
}

impl Decoder for ChunkedDecoder {
    fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        ChunkedDecoder::decode(self, input, out)
    }
    fn is_done(&self) -> bool {
        ChunkedDecoder::is_done(self)
    }
    fn finish(&mut self) -> Result<(), HttpError> {
        ChunkedDecoder::finish(self)
    }
}

impl Decoder for BodyDecoder {
    fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        BodyDecoder::decode(self, input, out)
    }
    fn is_done(&self) -> bool {
        BodyDecoder::is_done(self)
    }
    fn finish(&mut self) -> Result<(), HttpError> {
        BodyDecoder::finish(self)
    }
}

/// A body decoder fed pieces, then (with `eof`) told the peer closed.
///
/// An error is the whole outcome: how much body came out before it depends
/// on the cuts.
pub(crate) struct Decoding<D> {
    decoder: D,
    eof: bool,
    body: Vec<u8>,
    consumed: usize,
    error: Option<HttpError>,
}

impl<D: Decoder> Decoding<D> {
    pub(crate) fn new(decoder: D, eof: bool) -> Self {
        Decoding {
            decoder,
            eof,
            body: Vec::new(),
            consumed: 0,
            error: None,
        }
    }
}

impl<D: Decoder> Fed for Decoding<D> {
    type Outcome = Result<Decoded, HttpError>;

    fn feed(&mut self, piece: &[u8]) -> bool {
        match self.decoder.decode(piece, &mut self.body) {
            Ok(n) => {
                assert!(n <= piece.len(), "consumed {n} of {}", piece.len());
                assert!(n == piece.len() || self.decoder.is_done());
                self.consumed += n;
                !self.decoder.is_done()
            }
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    fn outcome(mut self) -> Self::Outcome {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.eof {
            self.decoder.finish()?;
        }
        Ok(Decoded {
            done: self.decoder.is_done(),
            body: self.body,
            consumed: self.consumed,
        })
    }
}

/// A head parsed once complete: the request or response parser.
pub(crate) type ParseHead<H> = fn(&[u8], &HttpLimits) -> Result<H, HttpError>;

/// A head read as the exchange reads one: bytes accumulate in a buffer, the
/// [`HeadScanner`] resumes on each read, the parser runs once on the
/// complete head. Requests first skip empty lines (RFC 9112 §2.2) while no
/// head has started.
///
/// The outcome is `None` while the head is incomplete, else the head and
/// the bytes it used (skipped lines included).
pub(crate) struct HeadReading<H> {
    parse: ParseHead<H>,
    limits: HttpLimits,
    skip_empty_lines: bool,
    buf: Vec<u8>,
    start: Option<usize>,
    scanner: HeadScanner,
    result: Result<Option<(H, usize)>, HttpError>,
}

impl<H> HeadReading<H> {
    fn new(parse: ParseHead<H>, limits: HttpLimits, skip_empty_lines: bool) -> Self {
        HeadReading {
            parse,
            limits,
            skip_empty_lines,
            buf: Vec::new(),
            start: None,
            scanner: HeadScanner::new(),
            result: Ok(None),
        }
    }
}

impl HeadReading<RequestHead> {
    /// A client's request head.
    pub(crate) fn request(limits: HttpLimits) -> Self {
        HeadReading::new(parse_request_head, limits, true)
    }
}

impl HeadReading<ResponseHead> {
    /// A provider's response head.
    pub(crate) fn response(limits: HttpLimits) -> Self {
        HeadReading::new(parse_response_head, limits, false)
    }
}

/// A parsed head knows its length.
pub(crate) trait Head: PartialEq + std::fmt::Debug {
    fn head_len(&self) -> usize;
    fn set_head_len(&mut self, len: usize);
}

impl Head for RequestHead {
    fn head_len(&self) -> usize {
        self.head_len
    }
    fn set_head_len(&mut self, len: usize) {
        self.head_len = len;
    }
}

impl Head for ResponseHead {
    fn head_len(&self) -> usize {
        self.head_len
    }
    fn set_head_len(&mut self, len: usize) {
        self.head_len = len;
    }
}

impl<H: Head> Fed for HeadReading<H> {
    type Outcome = Result<Option<(H, usize)>, HttpError>;

    fn feed(&mut self, piece: &[u8]) -> bool {
        self.buf.extend_from_slice(piece);
        let start = match self.start {
            Some(start) => start,
            None => {
                let skipped = if self.skip_empty_lines {
                    leading_empty_lines(&self.buf)
                } else {
                    0
                };
                if skipped == self.buf.len() {
                    return true;
                }
                *self.start.insert(skipped)
            }
        };
        let head = &self.buf[start..];
        self.result = match self.scanner.scan(head, self.limits.max_head) {
            Ok(None) => return true,
            Ok(Some(len)) => (self.parse)(&head[..len], &self.limits).map(|mut h| {
                assert_eq!(h.head_len(), len, "the parser and the scanner disagree");
                // The parser counts the empty lines the scan started with,
                // and which those are depends on the cuts (a lone CR at the
                // end of a read starts the head). The caller only adds
                // `head_len` to where the head started, so what must agree
                // is the total: compare the head as if it said that.
                h.set_head_len(start + len);
                Some((h, start + len))
            }),
            Err(e) => Err(e),
        };
        false
    }

    fn outcome(self) -> Self::Outcome {
        self.result
    }
}
