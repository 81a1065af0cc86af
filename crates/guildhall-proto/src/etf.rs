//! The gateway's `encoding=etf`: Erlang's External Term Format, as
//! Discord's gateway speaks it ("Using ETF Encoding"; erlpack is its
//! reference implementation). The server's frames are the JSON data model
//! carried in ETF: an object is a map with binary keys, a string a binary,
//! `null` the atom `nil`, booleans the atoms `true`/`false`, integers
//! small, 32-bit or small-big integers, other numbers new floats, arrays
//! lists. Snowflakes stay strings, which the docs allow ("64-bit integers
//! or strings").
//!
//! Client frames are decoded into JSON, so one parser (with its bounds)
//! reads every payload whatever its encoding. What Discord refuses is
//! refused: a compressed term ("can't send compressed messages") and atom
//! keys (a 4002). Written by hand rather than with the `eetf` crate
//! because its decoder allocates what a term declares before reading it:
//! a ten-byte frame declaring a binary or list of 2^32 elements makes it
//! ask for gigabytes. Here every declared length is checked against the
//! bytes that are actually left, and nesting is bounded, so decoding costs
//! at most a few times the frame's size. `eetf` is used by the tests as an
//! independent implementation to check this one against.
//!
//! Pure: bytes in, bytes out.

use serde_json::{Map, Number, Value};

/// The version byte every term starts with.
const VERSION: u8 = 131;
const NEW_FLOAT_EXT: u8 = 70;
const COMPRESSED: u8 = 80;
const SMALL_INTEGER_EXT: u8 = 97;
const INTEGER_EXT: u8 = 98;
const FLOAT_EXT: u8 = 99;
const ATOM_EXT: u8 = 100;
const SMALL_TUPLE_EXT: u8 = 104;
const LARGE_TUPLE_EXT: u8 = 105;
const NIL_EXT: u8 = 106;
const STRING_EXT: u8 = 107;
const LIST_EXT: u8 = 108;
const BINARY_EXT: u8 = 109;
const SMALL_BIG_EXT: u8 = 110;
const LARGE_BIG_EXT: u8 = 111;
const MAP_EXT: u8 = 116;
const ATOM_UTF8_EXT: u8 = 118;
const SMALL_ATOM_UTF8_EXT: u8 = 119;
const SMALL_ATOM_EXT: u8 = 115;

/// Deepest nesting of lists and maps a client payload may have. Gateway
/// payloads are at most four levels deep (`d.presence.activities[0]`);
/// 32 leaves room and bounds the decoder's recursion.
pub const DEPTH_MAX: usize = 32;

/// Why a client frame is not a payload (all close the socket with 4002).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EtfError {
    /// Not a term: a missing version byte, a truncated term, a length
    /// past the frame's end, bytes after the term.
    #[error("malformed term")]
    Malformed,
    /// A compressed term (clients may not send them).
    #[error("compressed terms are not accepted")]
    Compressed,
    /// A map key that is an atom (Discord refuses them) or not a string.
    #[error("map keys must be strings")]
    BadKey,
    /// A term with no JSON meaning (a pid, a function, a tuple, an
    /// integer beyond 64 bits, a non-UTF-8 binary).
    #[error("a term with no payload meaning")]
    Unsupported,
    /// Nested deeper than [`DEPTH_MAX`].
    #[error("nested too deeply")]
    TooDeep,
}

// ----- encoding ---------------------------------------------------------------

/// The ETF of a JSON text (the server's frames are encoded as JSON once
/// and carried to ETF sessions this way). `None` if `json` is not JSON,
/// which the server's own frames always are.
pub fn from_json(json: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(json).ok()?;
    Some(encode(&value))
}

/// The ETF of `value`.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(VERSION);
    encode_into(value, &mut out);
    out
}

fn atom(name: &str, out: &mut Vec<u8>) {
    out.push(SMALL_ATOM_UTF8_EXT);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
}

fn binary(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(BINARY_EXT);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn integer(n: i128, out: &mut Vec<u8>) {
    if (0..=255).contains(&n) {
        out.push(SMALL_INTEGER_EXT);
        out.push(n as u8);
    } else if let Ok(n) = i32::try_from(n) {
        out.push(INTEGER_EXT);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        let (sign, mut magnitude) = if n < 0 {
            (1u8, n.unsigned_abs())
        } else {
            (0u8, n as u128)
        };
        let mut digits = Vec::with_capacity(16);
        while magnitude > 0 {
            digits.push((magnitude & 0xff) as u8);
            magnitude >>= 8;
        }
        out.push(SMALL_BIG_EXT);
        out.push(digits.len() as u8);
        out.push(sign);
        out.extend_from_slice(&digits);
    }
}

fn encode_into(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => atom("nil", out),
        Value::Bool(true) => atom("true", out),
        Value::Bool(false) => atom("false", out),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                integer(i128::from(i), out);
            } else if let Some(u) = n.as_u64() {
                integer(i128::from(u), out);
            } else {
                out.push(NEW_FLOAT_EXT);
                out.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_bits().to_be_bytes());
            }
        }
        Value::String(s) => binary(s.as_bytes(), out),
        Value::Array(items) if items.is_empty() => out.push(NIL_EXT),
        Value::Array(items) => {
            out.push(LIST_EXT);
            out.extend_from_slice(&(items.len() as u32).to_be_bytes());
            for item in items {
                encode_into(item, out);
            }
            out.push(NIL_EXT);
        }
        Value::Object(map) => {
            out.push(MAP_EXT);
            out.extend_from_slice(&(map.len() as u32).to_be_bytes());
            for (key, item) in map {
                binary(key.as_bytes(), out);
                encode_into(item, out);
            }
        }
    }
}

// ----- decoding ---------------------------------------------------------------

/// The JSON text of a client's ETF frame, for the gateway's one parser.
pub fn to_json(frame: &[u8]) -> Result<Vec<u8>, EtfError> {
    let value = decode(frame)?;
    serde_json::to_vec(&value).map_err(|_| EtfError::Unsupported)
}

/// The JSON value of a client's ETF frame.
pub fn decode(frame: &[u8]) -> Result<Value, EtfError> {
    let mut reader = Reader {
        bytes: frame,
        at: 0,
    };
    match reader.u8()? {
        VERSION => {}
        _ => return Err(EtfError::Malformed),
    }
    if reader.peek() == Some(COMPRESSED) {
        return Err(EtfError::Compressed);
    }
    let value = reader.term(0)?;
    if reader.at != frame.len() {
        return Err(EtfError::Malformed);
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// `n` bytes, or Malformed when fewer are left: every declared length
    /// passes here before anything is allocated for it.
    fn take(&mut self, n: usize) -> Result<&'a [u8], EtfError> {
        let end = self.at.checked_add(n).ok_or(EtfError::Malformed)?;
        let bytes = self.bytes.get(self.at..end).ok_or(EtfError::Malformed)?;
        self.at = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, EtfError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<usize, EtfError> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn u32(&mut self) -> Result<usize, EtfError> {
        let b = self.take(4)?;
        usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .map_err(|_| EtfError::Malformed)
    }

    /// A count of elements each at least `min_bytes` long, checked against
    /// what is left (so no count can make a vector larger than the frame).
    fn count(&mut self, n: usize, min_bytes: usize) -> Result<usize, EtfError> {
        let left = self.bytes.len() - self.at;
        if n.saturating_mul(min_bytes) > left {
            return Err(EtfError::Malformed);
        }
        Ok(n)
    }

    fn atom_value(name: &[u8]) -> Result<Value, EtfError> {
        match name {
            b"nil" | b"null" => Ok(Value::Null),
            b"true" => Ok(Value::Bool(true)),
            b"false" => Ok(Value::Bool(false)),
            other => std::str::from_utf8(other)
                .map(|s| Value::String(s.to_owned()))
                .map_err(|_| EtfError::Unsupported),
        }
    }

    fn string(bytes: &[u8]) -> Result<String, EtfError> {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| EtfError::Unsupported)
    }

    fn term(&mut self, depth: usize) -> Result<Value, EtfError> {
        if depth > DEPTH_MAX {
            return Err(EtfError::TooDeep);
        }
        let tag = self.u8()?;
        match tag {
            SMALL_INTEGER_EXT => Ok(Value::from(self.u8()?)),
            INTEGER_EXT => {
                let b = self.take(4)?;
                Ok(Value::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            }
            SMALL_BIG_EXT | LARGE_BIG_EXT => {
                let n = if tag == SMALL_BIG_EXT {
                    usize::from(self.u8()?)
                } else {
                    self.u32()?
                };
                let sign = self.u8()?;
                let digits = self.take(n)?;
                // Snowflakes are 64-bit; nothing in a payload is larger.
                if digits.len() > 8 && digits[8..].iter().any(|d| *d != 0) {
                    return Err(EtfError::Unsupported);
                }
                let magnitude = digits
                    .iter()
                    .take(8)
                    .rev()
                    .fold(0u64, |acc, d| (acc << 8) | u64::from(*d));
                match sign {
                    0 => Ok(Value::from(magnitude)),
                    1 => i64::try_from(magnitude)
                        .map(|m| Value::from(-m))
                        .or_else(|_| {
                            // -2^63 itself.
                            if magnitude == 1u64 << 63 {
                                Ok(Value::from(i64::MIN))
                            } else {
                                Err(EtfError::Unsupported)
                            }
                        }),
                    _ => Err(EtfError::Malformed),
                }
            }
            NEW_FLOAT_EXT => {
                let b = self.take(8)?;
                let mut raw = [0u8; 8];
                raw.copy_from_slice(b);
                Number::from_f64(f64::from_bits(u64::from_be_bytes(raw)))
                    .map(Value::Number)
                    .ok_or(EtfError::Unsupported)
            }
            FLOAT_EXT => {
                // The old form: 31 bytes of "%.20e" text, NUL-padded.
                let text = self.take(31)?;
                let text = std::str::from_utf8(text)
                    .map_err(|_| EtfError::Malformed)?
                    .trim_end_matches('\0');
                text.trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .map(Value::Number)
                    .ok_or(EtfError::Malformed)
            }
            ATOM_EXT | ATOM_UTF8_EXT => {
                let n = self.u16()?;
                Self::atom_value(self.take(n)?)
            }
            SMALL_ATOM_EXT | SMALL_ATOM_UTF8_EXT => {
                let n = usize::from(self.u8()?);
                Self::atom_value(self.take(n)?)
            }
            NIL_EXT => Ok(Value::Array(vec![])),
            STRING_EXT => {
                // Erlang's compact list of small integers (erlpack sends a
                // short list of bytes this way): a list of numbers.
                let n = self.u16()?;
                Ok(Value::Array(
                    self.take(n)?.iter().map(|b| Value::from(*b)).collect(),
                ))
            }
            BINARY_EXT => {
                let n = self.u32()?;
                Ok(Value::String(Self::string(self.take(n)?)?))
            }
            LIST_EXT => {
                let declared = self.u32()?;
                let n = self.count(declared, 1)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.term(depth + 1)?);
                }
                // A proper list ends in nil.
                match self.u8()? {
                    NIL_EXT => Ok(Value::Array(items)),
                    _ => Err(EtfError::Unsupported),
                }
            }
            MAP_EXT => {
                let declared = self.u32()?;
                let n = self.count(declared, 2)?;
                let mut map = Map::new();
                for _ in 0..n {
                    let key = match self.u8()? {
                        BINARY_EXT => {
                            let len = self.u32()?;
                            Self::string(self.take(len)?)?
                        }
                        STRING_EXT => {
                            let len = self.u16()?;
                            Self::string(self.take(len)?)?
                        }
                        _ => return Err(EtfError::BadKey),
                    };
                    let value = self.term(depth + 1)?;
                    map.insert(key, value);
                }
                Ok(Value::Object(map))
            }
            SMALL_TUPLE_EXT | LARGE_TUPLE_EXT => Err(EtfError::Unsupported),
            COMPRESSED => Err(EtfError::Compressed),
            _ => Err(EtfError::Unsupported),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eetf::{Atom, BigInteger, Binary, FixInteger, Float, List, Term};
    use proptest::prelude::*;
    use serde_json::json;

    /// Our ETF, read back by `eetf`, as a JSON value.
    fn through_eetf(value: &Value) -> Value {
        fn to_value(term: Term) -> Value {
            match term {
                Term::Atom(a) => match a.name.as_str() {
                    "nil" => Value::Null,
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    other => panic!("atom {other}"),
                },
                Term::FixInteger(i) => Value::from(i.value),
                Term::BigInteger(b) => {
                    let s = b.value.to_string();
                    s.parse::<i64>()
                        .map(Value::from)
                        .unwrap_or_else(|_| Value::from(s.parse::<u64>().unwrap()))
                }
                Term::Float(f) => json!(f.value),
                Term::Binary(b) => Value::String(String::from_utf8(b.bytes).unwrap()),
                Term::List(l) => Value::Array(l.elements.into_iter().map(to_value).collect()),
                Term::Map(m) => Value::Object(
                    m.map
                        .into_iter()
                        .map(|(k, v)| match k {
                            Term::Binary(b) => (String::from_utf8(b.bytes).unwrap(), to_value(v)),
                            other => panic!("key {other:?}"),
                        })
                        .collect(),
                ),
                other => panic!("unexpected {other:?}"),
            }
        }
        to_value(Term::decode(std::io::Cursor::new(encode(value))).unwrap())
    }

    fn eetf_bytes(term: Term) -> Vec<u8> {
        let mut out = Vec::new();
        term.encode(&mut out).unwrap();
        out
    }

    #[test]
    fn a_dispatch_reads_back_the_same_through_another_implementation() {
        let value = json!({"op": 0, "s": 42, "t": "MESSAGE_CREATE", "d": {
            "id": "1577507567091847168", "content": "héllo", "tts": false, "pinned": true,
            "nonce": null, "mentions": [], "embeds": [{"color": 16711680, "fields": [1, -7, 300]}],
            "big": 1577507567091847168u64, "negative": -3_000_000_000i64, "float": 1.5
        }});
        assert_eq!(through_eetf(&value), value);
        assert_eq!(decode(&encode(&value)).unwrap(), value);
    }

    #[test]
    fn what_clients_send_is_read_as_json() {
        // IDENTIFY as erlpack sends it: binary keys and strings, atoms for
        // null and booleans, an integer, a short byte list (STRING_EXT).
        let map = |pairs: Vec<(&str, Term)>| {
            Term::Map(eetf::Map::from(
                pairs
                    .into_iter()
                    .map(|(k, v)| (Term::Binary(Binary::from(k.as_bytes())), v))
                    .collect::<std::collections::HashMap<_, _>>(),
            ))
        };
        let identify = map(vec![
            ("op", Term::FixInteger(FixInteger::from(2))),
            (
                "d",
                map(vec![
                    ("token", Term::Binary(Binary::from("Bot abc".as_bytes()))),
                    ("intents", Term::FixInteger(FixInteger::from(513))),
                    ("compress", Term::Atom(Atom::from("false"))),
                    ("presence", Term::Atom(Atom::from("nil"))),
                    ("shard", Term::ByteList(eetf::ByteList::from(vec![0u8, 2]))),
                    (
                        "guild",
                        Term::BigInteger(BigInteger::from(1577507567091847168u64)),
                    ),
                    ("ratio", Term::Float(Float::try_from(0.25).unwrap())),
                    // (Not all small integers: eetf would send those as a
                    // STRING_EXT, and wraps negative ones doing so.)
                    (
                        "list",
                        Term::List(List::from(vec![
                            Term::FixInteger(FixInteger::from(-1)),
                            Term::Binary(Binary::from("x".as_bytes())),
                        ])),
                    ),
                ]),
            ),
        ]);
        assert_eq!(
            decode(&eetf_bytes(identify)).unwrap(),
            json!({"op": 2, "d": {"token": "Bot abc", "intents": 513, "compress": false,
                   "presence": null, "shard": [0, 2], "guild": 1577507567091847168u64,
                   "ratio": 0.25, "list": [-1, "x"]}})
        );
    }

    #[test]
    fn refusals() {
        let atom_key = Term::Map(eetf::Map::from([(
            Term::Atom(Atom::from("op")),
            Term::FixInteger(FixInteger::from(1)),
        )]));
        assert_eq!(decode(&eetf_bytes(atom_key)), Err(EtfError::BadKey));
        assert_eq!(
            decode(&[131, 80, 0, 0, 0, 1, 120]),
            Err(EtfError::Compressed)
        );
        assert_eq!(decode(&[]), Err(EtfError::Malformed));
        assert_eq!(decode(&[130, 97, 1]), Err(EtfError::Malformed));
        assert_eq!(decode(&[131, 97]), Err(EtfError::Malformed));
        assert_eq!(
            decode(&[131, 97, 1, 0]),
            Err(EtfError::Malformed),
            "bytes after the term"
        );
        let tuple = eetf_bytes(Term::Tuple(eetf::Tuple::from(vec![])));
        assert_eq!(decode(&tuple), Err(EtfError::Unsupported));
        // Declared lengths far past the frame cost nothing.
        assert_eq!(
            decode(&[131, 109, 255, 255, 255, 255, 1]),
            Err(EtfError::Malformed)
        );
        assert_eq!(
            decode(&[131, 108, 255, 255, 255, 255]),
            Err(EtfError::Malformed)
        );
        assert_eq!(
            decode(&[131, 116, 255, 255, 255, 255]),
            Err(EtfError::Malformed)
        );
        assert_eq!(
            decode(&[131, 111, 255, 255, 255, 255, 0]),
            Err(EtfError::Malformed)
        );
        // Deep nesting is refused, not recursed into without end.
        let mut deep = vec![131];
        for _ in 0..100 {
            deep.extend_from_slice(&[108, 0, 0, 0, 1]);
        }
        deep.push(106);
        deep.extend(std::iter::repeat_n(106, 100));
        assert_eq!(decode(&deep), Err(EtfError::TooDeep));
        // A big integer beyond 64 bits, a non-UTF-8 binary.
        assert_eq!(
            decode(&[131, 110, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            Err(EtfError::Unsupported)
        );
        assert_eq!(
            decode(&[131, 109, 0, 0, 0, 1, 0xff]),
            Err(EtfError::Unsupported)
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any JSON value survives encode then decode, and `eetf` reads the
        /// same value from our bytes.
        #[test]
        fn round_trips(value in json_value()) {
            prop_assert_eq!(decode(&encode(&value)).unwrap(), value.clone());
            prop_assert_eq!(through_eetf(&value), value);
        }

        /// Arbitrary bytes never panic, and never allocate beyond their
        /// size (the decoder checks every length against what is left).
        #[test]
        fn arbitrary_frames_are_refused_or_read(mut bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
            bytes.insert(0, VERSION);
            let _ = decode(&bytes);
        }
    }
}
