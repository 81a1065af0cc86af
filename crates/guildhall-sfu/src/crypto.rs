//! Transport encryption of voice packets: the two "rtpsize" AEAD modes
//! Discord offers (`aead_aes256_gcm_rtpsize`, preferred, and
//! `aead_xchacha20_poly1305_rtpsize`, required of every client).
//!
//! The rtpsize layout, as discord.py 2.7 and @discordjs/voice build it:
//!
//! ```text
//! | RTP header (12 + 4×CC) | [ext header: profile, length (4)] | ciphertext | tag (16) | nonce (4) |
//! ```
//!
//! The unencrypted part (the RTP header, its CSRCs and, when the X bit is
//! set, the 4-byte extension header) is the AEAD's additional data; the
//! extension *body* and the Opus payload are the ciphertext. The nonce is
//! a 32-bit big-endian counter carried as the packet's last 4 bytes,
//! padded with zeros to the cipher's nonce size (12 bytes for AES-GCM, 24
//! for XChaCha20). Each sender counts its own nonces, so when the SFU
//! forwards a packet it re-encrypts under the receiver's key with the
//! SFU's counter for that receiver.

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::XChaCha20Poly1305;
use guildhall_proto::voice_gateway::{
    MODE_AES256_GCM_RTPSIZE, MODE_XCHACHA20_POLY1305_RTPSIZE, SECRET_KEY_BYTES,
};

/// AEAD tag length of both modes, bytes.
pub const TAG_BYTES: usize = 16;
/// Nonce counter carried at the end of a packet, bytes.
pub const NONCE_SUFFIX_BYTES: usize = 4;
/// Fixed RTP header, bytes.
pub const RTP_HEADER_BYTES: usize = 12;

/// A transport encryption mode this SFU speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `aead_aes256_gcm_rtpsize`.
    Aes256GcmRtpsize,
    /// `aead_xchacha20_poly1305_rtpsize`.
    XChaCha20Poly1305Rtpsize,
}

impl Mode {
    /// Every mode, in the order READY offers them (AES-GCM first, as
    /// Discord does).
    pub const ALL: [Mode; 2] = [Mode::Aes256GcmRtpsize, Mode::XChaCha20Poly1305Rtpsize];

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Aes256GcmRtpsize => MODE_AES256_GCM_RTPSIZE,
            Mode::XChaCha20Poly1305Rtpsize => MODE_XCHACHA20_POLY1305_RTPSIZE,
        }
    }

    /// The mode of a wire name (`None`: 4016).
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Why a packet could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CryptoError {
    /// Too short, or not RTP version 2.
    Malformed,
    /// The tag did not verify (wrong key, tampered, replayed under
    /// another header).
    Auth,
}

/// One connection's cipher.
pub enum Cipher {
    /// AES-256-GCM.
    Aes(Box<Aes256Gcm>),
    /// XChaCha20-Poly1305.
    XChaCha(Box<XChaCha20Poly1305>),
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        write!(f, "Cipher({})", self.mode().name())
    }
}

/// A fresh 32-byte transport key from the operating system.
pub fn new_secret_key() -> Result<[u8; SECRET_KEY_BYTES], getrandom::Error> {
    let mut key = [0u8; SECRET_KEY_BYTES];
    getrandom::fill(&mut key)?;
    Ok(key)
}

/// Length of the unencrypted part of an rtpsize packet (RTP header,
/// CSRCs, and the extension header when X is set), if the packet is long
/// enough to hold it plus tag and nonce.
pub fn unencrypted_len(packet: &[u8]) -> Option<usize> {
    let first = *packet.first()?;
    if first >> 6 != 2 {
        return None;
    }
    let csrc_count = usize::from(first & 0x0f);
    let extension = first & 0x10 != 0;
    let len = RTP_HEADER_BYTES + 4 * csrc_count + if extension { 4 } else { 0 };
    if packet.len() < len + TAG_BYTES + NONCE_SUFFIX_BYTES {
        return None;
    }
    Some(len)
}

/// The SSRC of an RTP packet (bytes 8..12), if long enough.
pub fn rtp_ssrc(packet: &[u8]) -> Option<u32> {
    let b = packet.get(8..12)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

impl Cipher {
    /// The cipher of `mode` under `key`.
    pub fn new(mode: Mode, key: &[u8; SECRET_KEY_BYTES]) -> Cipher {
        match mode {
            Mode::Aes256GcmRtpsize => Cipher::Aes(Box::new(Aes256Gcm::new(key.into()))),
            Mode::XChaCha20Poly1305Rtpsize => {
                Cipher::XChaCha(Box::new(XChaCha20Poly1305::new(key.into())))
            }
        }
    }

    /// Its mode.
    pub fn mode(&self) -> Mode {
        match self {
            Cipher::Aes(_) => Mode::Aes256GcmRtpsize,
            Cipher::XChaCha(_) => Mode::XChaCha20Poly1305Rtpsize,
        }
    }

    /// Opens `packet` into `out` (cleared first): the unencrypted part,
    /// then the plaintext. Returns the unencrypted part's length.
    pub fn open(&self, packet: &[u8], out: &mut Vec<u8>) -> Result<usize, CryptoError> {
        let header_len = unencrypted_len(packet).ok_or(CryptoError::Malformed)?;
        let nonce_at = packet.len() - NONCE_SUFFIX_BYTES;
        let tag_at = nonce_at - TAG_BYTES;
        let mut counter = [0u8; NONCE_SUFFIX_BYTES];
        counter.copy_from_slice(&packet[nonce_at..]);
        out.clear();
        out.extend_from_slice(&packet[..tag_at]);
        let (aad, body) = out.split_at_mut(header_len);
        let tag = &packet[tag_at..nonce_at];
        let ok = match self {
            Cipher::Aes(c) => {
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&counter);
                c.decrypt_in_place_detached(&nonce.into(), aad, body, tag.into())
            }
            Cipher::XChaCha(c) => {
                let mut nonce = [0u8; 24];
                nonce[..4].copy_from_slice(&counter);
                c.decrypt_in_place_detached(&nonce.into(), aad, body, tag.into())
            }
        };
        ok.map_err(|_| CryptoError::Auth)?;
        Ok(header_len)
    }

    /// Seals `header` (sent in the clear, authenticated) and `plaintext`
    /// under `nonce` into `out` (cleared first), in the rtpsize layout.
    pub fn seal(&self, header: &[u8], plaintext: &[u8], nonce: u32, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(header);
        out.extend_from_slice(plaintext);
        let counter = nonce.to_be_bytes();
        let (aad, body) = out.split_at_mut(header.len());
        let tag = match self {
            Cipher::Aes(c) => {
                let mut n = [0u8; 12];
                n[..4].copy_from_slice(&counter);
                c.encrypt_in_place_detached(&n.into(), aad, body)
            }
            Cipher::XChaCha(c) => {
                let mut n = [0u8; 24];
                n[..4].copy_from_slice(&counter);
                c.encrypt_in_place_detached(&n.into(), aad, body)
            }
        };
        // Both ciphers only fail for buffers over 2^36 bytes; a datagram
        // is at most a few kB. An empty tag would fail at the receiver.
        match tag {
            Ok(tag) => out.extend_from_slice(tag.as_slice()),
            Err(_) => out.extend_from_slice(&[0u8; TAG_BYTES]),
        }
        out.extend_from_slice(&counter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RTP header discord.py's `_get_voice_packet` builds.
    fn dpy_header(sequence: u16, timestamp: u32, ssrc: u32) -> [u8; 12] {
        let mut h = [0u8; 12];
        h[0] = 0x80;
        h[1] = 0x78;
        h[2..4].copy_from_slice(&sequence.to_be_bytes());
        h[4..8].copy_from_slice(&timestamp.to_be_bytes());
        h[8..12].copy_from_slice(&ssrc.to_be_bytes());
        h
    }

    #[test]
    fn layout_is_header_ciphertext_tag_counter() {
        let key = [7u8; 32];
        for mode in Mode::ALL {
            let cipher = Cipher::new(mode, &key);
            let header = dpy_header(1, 960, 42);
            let opus = [0xf8, 0xff, 0xfe];
            let mut packet = Vec::new();
            cipher.seal(&header, &opus, 5, &mut packet);
            assert_eq!(packet.len(), 12 + 3 + 16 + 4);
            assert_eq!(&packet[..12], &header);
            assert_eq!(&packet[packet.len() - 4..], &5u32.to_be_bytes());
            let mut out = Vec::new();
            assert_eq!(cipher.open(&packet, &mut out), Ok(12));
            assert_eq!(&out[12..], &opus);
            // Any flipped bit, in header or body, fails the tag.
            for i in 0..packet.len() - 4 {
                let mut bad = packet.clone();
                bad[i] ^= 1;
                assert!(cipher.open(&bad, &mut out).is_err(), "{mode:?} byte {i}");
            }
        }
    }

    /// Byte for byte what the reference clients send for the same key,
    /// header, payload and counter: the XChaCha20 vector is discord.py
    /// 2.7.1's `_encrypt_aead_xchacha20_poly1305_rtpsize` (PyNaCl's
    /// `Aead(key).encrypt(data, header, nonce24)`, counter in the nonce's
    /// first 4 bytes); the AES-GCM vector is @discordjs/voice's
    /// `encryptOpusPacket` (`createCipheriv('aes-256-gcm', key, nonce12)`,
    /// `setAAD(header)`, ciphertext then auth tag, then the 4-byte counter).
    #[test]
    fn matches_the_reference_clients_byte_for_byte() {
        fn hex(s: &str) -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        }
        let key = [1u8; 32];
        let header = dpy_header(0x0102, 0x0304_0506, 0x0708_090a);
        let cases = [
            (
                Mode::XChaCha20Poly1305Rtpsize,
                "80780102030405060708090aa6e00ef11b3bbb106b355583ee0a0dcd069b4f05bcce9c3874740a0b0c0d",
            ),
            (
                Mode::Aes256GcmRtpsize,
                "80780102030405060708090ad2d2b82a888ca5424838c210cb173db2984ed902068462d350000a0b0c0d",
            ),
        ];
        for (mode, expected) in cases {
            let cipher = Cipher::new(mode, &key);
            let mut packet = Vec::new();
            cipher.seal(&header, b"opus frame", 0x0a0b_0c0d, &mut packet);
            assert_eq!(packet, hex(expected), "{mode:?}");
            let mut out = Vec::new();
            assert_eq!(cipher.open(&hex(expected), &mut out), Ok(12));
            assert_eq!(&out[12..], b"opus frame");
        }
    }

    #[test]
    fn extension_header_is_clear_and_its_body_encrypted() {
        let key = [9u8; 32];
        let cipher = Cipher::new(Mode::Aes256GcmRtpsize, &key);
        let mut header = dpy_header(1, 2, 3).to_vec();
        header[0] |= 0x10; // X bit
        header.extend_from_slice(&[0xbe, 0xde, 0x00, 0x01]); // profile, 1 word
        let body_and_opus = [0x10, 0xaa, 0x00, 0x00, 1, 2, 3];
        let mut packet = Vec::new();
        cipher.seal(&header, &body_and_opus, 0, &mut packet);
        assert_eq!(unencrypted_len(&packet), Some(16));
        assert_eq!(&packet[12..16], &[0xbe, 0xde, 0x00, 0x01]);
        let mut out = Vec::new();
        assert_eq!(cipher.open(&packet, &mut out), Ok(16));
        assert_eq!(&out[16..], &body_and_opus);
        // CSRCs widen the clear part too.
        let mut with_csrc = dpy_header(1, 2, 3).to_vec();
        with_csrc[0] |= 2;
        with_csrc.extend_from_slice(&[0; 8]);
        cipher.seal(&with_csrc, b"x", 1, &mut packet);
        assert_eq!(unencrypted_len(&packet), Some(20));
    }

    #[test]
    fn short_or_non_rtp_packets_are_malformed() {
        let cipher = Cipher::new(Mode::XChaCha20Poly1305Rtpsize, &[0; 32]);
        let mut out = Vec::new();
        assert_eq!(
            cipher.open(&[0x80; 31], &mut out),
            Err(CryptoError::Malformed)
        );
        assert_eq!(
            cipher.open(&[0x40; 64], &mut out),
            Err(CryptoError::Malformed)
        );
        assert_eq!(cipher.open(&[], &mut out), Err(CryptoError::Malformed));
        assert_eq!(Mode::from_name("xsalsa20_poly1305"), None);
        assert_eq!(
            Mode::from_name("aead_aes256_gcm_rtpsize"),
            Some(Mode::Aes256GcmRtpsize)
        );
    }
}
