//! Gateway compression: what the client asked for, and the deflate
//! compressor a socket's writer runs its frames through.
//!
//! Frames are encoded once per event for every session (the hub's shared
//! [`guildhall_proto::gateway::EncodedDispatch`]); compression cannot be
//! shared, because a zlib stream's state is the connection's own, so it
//! happens last, in each socket's writer. Compressors are counted
//! ([`Permit`], at most `gateway_compressors_max` at once): a deflate one
//! holds about 320 KiB (the rust backend's fixed 32 KiB window, its hash
//! chains and buffers), a zstd one is held to a 32 KiB window as well
//! ([`ZSTD_WINDOW_LOG`]), for as long as its socket lives.
//!
//! Nothing here inflates: clients send plain JSON in Discord's protocol,
//! so client input is never decompressed, and a compressed client frame is
//! a decode error like any other bytes that are not JSON.

use flate2::{Compress, Compression, FlushCompress, Status};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Level 1: compression runs once per event per compressing connection
/// (a broadcast costs its fanout in deflate calls), and gateway JSON is
/// repetitive enough that the fastest level already shrinks it severalfold.
const LEVEL: u32 = 1;

/// zstd-stream's window: 2^15 = 32 KiB, zlib's, so a zstd socket costs
/// about what a zlib one does (under 512 KiB, a test holds it; zstd's
/// default window for level 1 is 512 KiB alone, and its streaming buffers
/// grow with the window). Any decoder accepts it.
pub const ZSTD_WINDOW_LOG: u32 = 15;

/// The `compress` query parameter of the gateway URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Absent: frames as they are (text), unless IDENTIFY asks for
    /// payload compression.
    None,
    /// `zlib-stream`: one zlib stream per connection, every frame a
    /// binary frame ending with a sync flush (`00 00 ff ff`).
    ZlibStream,
    /// `zstd-stream`: one zstd frame per connection, every message a
    /// flushed block (decodable as it arrives) in a binary frame.
    ZstdStream,
}

/// What the gateway URL's query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireQuery {
    /// Transport compression.
    pub transport: Transport,
    /// `encoding=etf`: frames both ways are Erlang terms in binary frames
    /// (`guildhall_proto::etf`); otherwise JSON.
    pub etf: bool,
    /// `v`, when it is a version this gateway speaks (9 or 10, Discord's
    /// "available" versions; absent counts as 10): READY's `v`. `None`:
    /// the socket is closed with 4012 after the upgrade.
    pub version: Option<u8>,
}

/// Why an upgrade's query is refused with 400 before the 101: Discord
/// documents no close code for these, and a client that cannot read what
/// the server would send has nothing to gain from a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryRefusal {
    /// `encoding` other than `json` or `etf`.
    UnknownEncoding,
    /// `compress` other than `zlib-stream` or `zstd-stream`.
    UnknownCompress,
}

impl QueryRefusal {
    /// The error body's message.
    pub fn message(self) -> &'static str {
        match self {
            QueryRefusal::UnknownEncoding => "encoding must be json or etf",
            QueryRefusal::UnknownCompress => {
                "compress must be zlib-stream or zstd-stream, or absent"
            }
        }
    }
}

/// Reads the gateway URL's query (`v`, `encoding`, `compress`; other
/// parameters are ignored, as Discord does). Values are compared as sent:
/// every accepted value is plain ASCII, so one that needs percent-decoding
/// is not one of them.
pub fn parse_query(query: Option<&str>) -> Result<WireQuery, QueryRefusal> {
    let mut wire = WireQuery {
        transport: Transport::None,
        version: Some(10),
        etf: false,
    };
    for pair in query.unwrap_or("").split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "v" => {
                wire.version = match value {
                    "9" => Some(9),
                    "10" => Some(10),
                    _ => None,
                }
            }
            "encoding" => match value {
                "json" => wire.etf = false,
                "etf" => wire.etf = true,
                _ => return Err(QueryRefusal::UnknownEncoding),
            },
            "compress" => match value {
                "zlib-stream" => wire.transport = Transport::ZlibStream,
                "zstd-stream" => wire.transport = Transport::ZstdStream,
                _ => return Err(QueryRefusal::UnknownCompress),
            },
            _ => {}
        }
    }
    Ok(wire)
}

/// The node's count of live compressors.
#[derive(Debug, Default)]
pub struct Compressors {
    /// Compressors alive now.
    pub open: AtomicUsize,
}

/// One counted compressor's place; released when dropped.
#[derive(Debug)]
pub struct Permit {
    compressors: Arc<Compressors>,
}

impl Compressors {
    /// A place for one more compressor, unless `max` are alive.
    pub fn acquire(self: &Arc<Self>, max: usize) -> Option<Permit> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .ok()?;
        Some(Permit {
            compressors: self.clone(),
        })
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.compressors.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Deflate went wrong (a backend error; not expected for in-memory input).
#[derive(Debug, thiserror::Error)]
#[error("deflate failed")]
pub struct DeflateError;

/// A socket's compressor, with its counted place.
pub struct Deflater {
    compress: Compress,
    _permit: Permit,
}

impl Deflater {
    /// A zlib-format compressor (header and Adler-32, RFC 1950), which is
    /// what Discord sends in both modes and what `zlib.decompressobj()`
    /// and `zlib.decompress` expect by default.
    pub fn new(permit: Permit) -> Self {
        Self {
            compress: Compress::new(Compression::new(LEVEL), true),
            _permit: permit,
        }
    }

    /// `zlib-stream`: `input` deflated on the connection's one stream,
    /// ending with a sync flush (`00 00 ff ff`), so the client can inflate
    /// each message as it arrives with the state of all before it.
    pub fn stream(&mut self, input: &[u8]) -> Result<Vec<u8>, DeflateError> {
        deflate(&mut self.compress, input, FlushCompress::Sync)
    }

    /// Payload compression: `input` as one complete zlib stream of its own
    /// (Discord: no shared context between payloads).
    pub fn whole(&mut self, input: &[u8]) -> Result<Vec<u8>, DeflateError> {
        self.compress.reset();
        deflate(&mut self.compress, input, FlushCompress::Finish)
    }
}

/// A `zstd-stream` socket's compressor, with its counted place.
pub struct ZstdStream {
    context: zstd_safe::CCtx<'static>,
    _permit: Permit,
}

impl ZstdStream {
    /// Level 1 (as for deflate: one run per event per socket) and a
    /// [`ZSTD_WINDOW_LOG`] window.
    pub fn new(permit: Permit) -> Result<Self, DeflateError> {
        use zstd_safe::CParameter;
        let mut context = zstd_safe::CCtx::try_create().ok_or(DeflateError)?;
        context
            .set_parameter(CParameter::CompressionLevel(1))
            .map_err(|_| DeflateError)?;
        context
            .set_parameter(CParameter::WindowLog(ZSTD_WINDOW_LOG))
            .map_err(|_| DeflateError)?;
        Ok(Self {
            context,
            _permit: permit,
        })
    }

    /// `input` on the connection's one zstd frame, flushed (the frame is
    /// never ended: Discord's "does not end a zstd frame"), into a buffer
    /// of zstd's worst case for `input` plus a block header.
    pub fn message(&mut self, input: &[u8]) -> Result<Vec<u8>, DeflateError> {
        let bound = zstd_safe::compress_bound(input.len()) + 64;
        let mut out: Vec<u8> = Vec::with_capacity(bound);
        let mut source = zstd_safe::InBuffer::around(input);
        // Each call either finishes the flush or fills the buffer; a few
        // rounds at most, bounded so nothing can spin.
        for _ in 0..8 {
            let position = out.len();
            let mut sink = zstd_safe::OutBuffer::around_pos(&mut out, position);
            let left = self
                .context
                .compress_stream2(
                    &mut sink,
                    &mut source,
                    zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush,
                )
                .map_err(|_| DeflateError)?;
            if left == 0 && source.pos() == input.len() {
                return Ok(out);
            }
            if out.len() >= out.capacity() {
                return Err(DeflateError);
            }
        }
        Err(DeflateError)
    }

    /// The context's memory, as zstd counts it.
    pub fn memory_bytes(&self) -> usize {
        self.context.sizeof()
    }
}

/// A transport compressor: every frame of its socket goes through it.
pub enum Stream {
    /// `zlib-stream`.
    Zlib(Deflater),
    /// `zstd-stream`.
    Zstd(ZstdStream),
}

impl Stream {
    /// The compressor `transport` asks for, in `permit`'s place; `None`
    /// for no transport compression.
    pub fn new(transport: Transport, permit: Permit) -> Result<Option<Self>, DeflateError> {
        Ok(match transport {
            Transport::None => None,
            Transport::ZlibStream => Some(Stream::Zlib(Deflater::new(permit))),
            Transport::ZstdStream => Some(Stream::Zstd(ZstdStream::new(permit)?)),
        })
    }

    /// One message on the connection's stream.
    pub fn message(&mut self, input: &[u8]) -> Result<Vec<u8>, DeflateError> {
        match self {
            Stream::Zlib(deflater) => deflater.stream(input),
            Stream::Zstd(zstd) => zstd.message(input),
        }
    }
}

/// Runs `input` through `compress` with `flush`, into a buffer grown as
/// needed but never past deflate's worst case for `input` (stored blocks:
/// 5 bytes per 16 KiB, plus header, trailer and flush markers), so a
/// misbehaving backend cannot grow it without bound.
fn deflate(
    compress: &mut Compress,
    input: &[u8],
    flush: FlushCompress,
) -> Result<Vec<u8>, DeflateError> {
    let bound = input.len() + input.len() / 1024 + 64;
    let mut out = Vec::with_capacity((input.len() / 2).max(64));
    let start = compress.total_in();
    loop {
        let consumed = usize::try_from(compress.total_in() - start).map_err(|_| DeflateError)?;
        let rest = input.get(consumed..).ok_or(DeflateError)?;
        let status = compress
            .compress_vec(rest, &mut out, flush)
            .map_err(|_| DeflateError)?;
        let consumed = usize::try_from(compress.total_in() - start).map_err(|_| DeflateError)?;
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            // A sync flush is complete once all input is taken and the
            // backend stopped with room to spare.
            _ => consumed == input.len() && out.len() < out.capacity(),
        };
        if done {
            return Ok(out);
        }
        if out.len() >= bound {
            return Err(DeflateError);
        }
        let grow = out.capacity().max(64).min(bound - out.len());
        out.reserve(grow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Decompress, FlushDecompress};

    fn deflater() -> Deflater {
        let compressors = Arc::new(Compressors::default());
        let Some(permit) = compressors.acquire(1) else {
            panic!("a permit")
        };
        Deflater::new(permit)
    }

    #[test]
    fn stream_messages_end_with_the_sync_flush_and_inflate_in_order() {
        let mut deflater = deflater();
        let mut inflate = Decompress::new(true);
        for i in 0..50 {
            let text = format!(
                r#"{{"op":0,"t":"MESSAGE_CREATE","s":{i},"d":{{"content":"{}"}}}}"#,
                "x".repeat(i * 400)
            );
            let Ok(frame) = deflater.stream(text.as_bytes()) else {
                panic!("deflate")
            };
            assert!(frame.ends_with(&[0, 0, 0xff, 0xff]));
            let mut out = Vec::with_capacity(text.len() + 64);
            let Ok(_) = inflate.decompress_vec(&frame, &mut out, FlushDecompress::Sync) else {
                panic!("inflate")
            };
            assert_eq!(out, text.as_bytes());
        }
    }

    #[test]
    fn whole_payloads_are_complete_zlib_streams() {
        let mut deflater = deflater();
        for text in ["{}", &"y".repeat(100_000)] {
            let Ok(frame) = deflater.whole(text.as_bytes()) else {
                panic!("deflate")
            };
            let mut inflate = Decompress::new(true);
            let mut out = Vec::with_capacity(text.len() + 64);
            let Ok(Status::StreamEnd) =
                inflate.decompress_vec(&frame, &mut out, FlushDecompress::Finish)
            else {
                panic!("a complete stream")
            };
            assert_eq!(out, text.as_bytes());
        }
    }

    #[test]
    fn zstd_messages_decode_as_they_arrive_on_one_frame_within_the_window() {
        let compressors = Arc::new(Compressors::default());
        let Some(permit) = compressors.acquire(1) else {
            panic!("a permit")
        };
        let Ok(mut zstd) = ZstdStream::new(permit) else {
            panic!("a context")
        };
        let Some(mut decoder) = zstd_safe::DCtx::try_create() else {
            panic!("a decoder")
        };
        for i in 0..50 {
            let text = format!(r#"{{"op":0,"s":{i},"d":"{}"}}"#, "z".repeat(i * 900));
            let Ok(frame) = zstd.message(text.as_bytes()) else {
                panic!("compress")
            };
            let mut out: Vec<u8> = Vec::with_capacity(text.len() + 64);
            let mut source = zstd_safe::InBuffer::around(&frame);
            let mut sink = zstd_safe::OutBuffer::around(&mut out);
            let Ok(_) = decoder.decompress_stream(&mut sink, &mut source) else {
                panic!("decompress")
            };
            assert_eq!(source.pos(), frame.len());
            assert_eq!(out, text.as_bytes());
        }
        // The window bound holds the context near a deflate compressor's
        // size rather than zstd's default (several MiB with its buffers).
        assert!(zstd.memory_bytes() < 512 * 1024, "{}", zstd.memory_bytes());
    }

    #[test]
    fn permits_are_bounded_and_released() {
        let compressors = Arc::new(Compressors::default());
        let first = compressors.acquire(1);
        assert!(first.is_some());
        assert!(compressors.acquire(1).is_none());
        drop(first);
        assert!(compressors.acquire(1).is_some());
    }

    #[test]
    fn queries() {
        let ok = |q: &str| parse_query(Some(q));
        assert_eq!(
            ok("v=10&encoding=json&compress=zlib-stream"),
            Ok(WireQuery {
                transport: Transport::ZlibStream,
                version: Some(10),
                etf: false,
            })
        );
        assert_eq!(parse_query(None).map(|w| w.transport), Ok(Transport::None));
        assert_eq!(ok("v=9").map(|w| w.version), Ok(Some(9)));
        assert_eq!(ok("encoding=json").map(|w| w.version), Ok(Some(10)));
        for v in ["8", "6", "11", "x", ""] {
            assert_eq!(ok(&format!("v={v}")).map(|w| w.version), Ok(None));
        }
        assert_eq!(ok("encoding=etf").map(|w| w.etf), Ok(true));
        assert_eq!(
            ok("encoding=etf&compress=zlib-stream").map(|w| (w.etf, w.transport)),
            Ok((true, Transport::ZlibStream))
        );
        assert_eq!(ok("encoding=xml"), Err(QueryRefusal::UnknownEncoding));
        assert_eq!(
            ok("compress=zstd-stream").map(|w| w.transport),
            Ok(Transport::ZstdStream)
        );
        assert_eq!(ok("compress=true"), Err(QueryRefusal::UnknownCompress));
        assert_eq!(ok("v=10&other=1").map(|w| w.version), Ok(Some(10)));
    }
}
