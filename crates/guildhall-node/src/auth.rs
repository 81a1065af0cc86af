//! Passwords and tokens.
//!
//! Passwords are hashed with Argon2id (memory-hard), in a blocking task so a
//! login flood cannot stall the runtime's workers. Tokens look like
//! Discord's (`base64(user_id).base64(time).secret`): some libraries read the
//! user id out of the first part. The secret is 27 random bytes from the OS;
//! only the SHA-256 digest of the whole token is stored.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use sha2::{Digest, Sha256};

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64url without padding (the token alphabet). Hand-written: 12 lines
/// instead of a dependency for one encoding direction.
fn b64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn random<const N: usize>() -> Result<[u8; N], getrandom::Error> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)?;
    Ok(bytes)
}

/// A new token for `user_id`.
pub fn new_token(user_id: i64, now_ms: u64) -> Result<String, getrandom::Error> {
    let secret: [u8; 27] = random()?;
    Ok(format!(
        "{}.{}.{}",
        b64(user_id.to_string().as_bytes()),
        b64(&(now_ms / 1000).to_be_bytes()[4..]),
        b64(&secret)
    ))
}

/// The digest stored for `token`.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// 16 random bytes from the OS as hex (session ids, voice tokens).
pub fn random_hex() -> Result<String, getrandom::Error> {
    Ok(random::<16>()?.iter().map(|b| format!("{b:02x}")).collect())
}

/// A random number in `[0, 1)` from the OS (backoff jitter); the middle of
/// the range if the OS has none to give, which only loses the spread.
pub fn random_unit() -> f64 {
    random::<8>().map_or(0.5, |b| {
        (u64::from_be_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// A short random code (invites).
pub fn new_code() -> Result<String, getrandom::Error> {
    let bytes: [u8; 6] = random()?;
    Ok(b64(&bytes))
}

/// Argon2id PHC string for `password` (blocking: call in `spawn_blocking`).
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt_bytes: [u8; 16] = random().map_err(|e| e.to_string())?;
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// Whether `password` matches `phc` (blocking).
pub fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|hash| {
        Argon2::default()
            .verify_password(password.as_bytes(), &hash)
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_and_shaped_like_discords() {
        let a = new_token(1_000_000_000_000_000_001, 1_704_067_200_000).unwrap();
        let b = new_token(1_000_000_000_000_000_001, 1_704_067_200_000).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.split('.').count(), 3);
        assert!(a.starts_with(&b64(b"1000000000000000001")));
        assert_ne!(token_digest(&a), token_digest(&b));
    }

    #[test]
    fn passwords_verify() {
        let phc = hash_password("hunter2").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify_password("hunter2", &phc));
        assert!(!verify_password("hunter3", &phc));
        assert!(!verify_password("x", "not a hash"));
    }

    #[test]
    fn base64url_matches_rfc4648_vectors() {
        assert_eq!(b64(b""), "");
        assert_eq!(b64(b"f"), "Zg");
        assert_eq!(b64(b"fo"), "Zm8");
        assert_eq!(b64(b"foo"), "Zm9v");
        assert_eq!(b64(b"foobar"), "Zm9vYmFy");
        assert_eq!(b64(&[0xfb, 0xff]), "-_8");
    }
}
