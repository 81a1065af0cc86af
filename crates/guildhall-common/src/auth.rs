//! Passwords and tokens.
//!
//! Passwords are hashed with Argon2id (memory-hard: 19 MiB and about a core
//! for each hash) under [`Passwords`], a fail-fast pool of
//! `password_hash_concurrency_max` permits. Each permit owns one block of
//! Argon2 memory, allocated on its first use and reused by every hash after,
//! so hashing pins at most permits × 19 MiB however many logins arrive; a
//! request that finds no free permit is refused at once (429) instead of
//! queueing a blocking thread and 19 MiB of its own. Hashes run in blocking
//! tasks (at most one per permit) so the runtime's workers keep serving.
//! Tokens look like
//! Discord's (`base64(user_id).base64(time).secret`): some libraries read the
//! user id out of the first part. The secret is 27 random bytes from the OS;
//! only the SHA-256 digest of the whole token is stored.

use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// A webhook token: 51 random bytes from the OS (408 bits), 68 URL-safe
/// characters, the length of Discord's webhook tokens. It travels in the
/// URL path, so only path-safe characters.
pub fn new_webhook_token() -> Result<String, getrandom::Error> {
    let secret: [u8; 51] = random()?;
    Ok(b64(&secret))
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

/// A random u64 from the OS (publish ids); 0, which means "none" to its
/// users, if the OS has none to give.
pub fn random_u64() -> u64 {
    random::<8>().map_or(0, u64::from_be_bytes)
}

/// A short random code (invites).
pub fn new_code() -> Result<String, getrandom::Error> {
    let bytes: [u8; 6] = random()?;
    Ok(b64(&bytes))
}

/// Argon2 memory blocks (1 KiB each) of one hash with the parameters this
/// server hashes with (Argon2's defaults, OWASP's minimum: m = 19 MiB).
const HASH_BLOCKS: usize = Params::DEFAULT_M_COST as usize;

/// Why a password could not be hashed or checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// Every permit is in use: refused at once, retry shortly.
    #[error("password hashing busy")]
    Busy,
    /// The OS gave no randomness, or the hashing task failed.
    #[error("password hashing failed")]
    Failed,
}

type Memory = Option<Vec<Block>>;

/// The hashing permits and their memory.
pub struct Passwords {
    /// Free permits, each with its memory (`None` until first used).
    free: Arc<Mutex<Vec<Memory>>>,
    /// Hashes and verifications refused because every permit was in use.
    pub refused_total: AtomicU64,
    /// Hashes and verifications computed.
    pub computed_total: AtomicU64,
}

/// A permit: its memory goes back to the pool when dropped, even if the
/// hash panicked.
struct Lease {
    free: Arc<Mutex<Vec<Memory>>>,
    memory: Memory,
}

impl Lease {
    fn memory(&mut self) -> &mut [Block] {
        self.memory
            .get_or_insert_with(|| vec![Block::new(); HASH_BLOCKS])
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let memory = self.memory.take();
        lock(&self.free).push(memory);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Passwords {
    /// `permits` hashes at once (`password_hash_concurrency_max`).
    pub fn new(permits: usize) -> Self {
        Self {
            free: Arc::new(Mutex::new((0..permits.max(1)).map(|_| None).collect())),
            refused_total: AtomicU64::new(0),
            computed_total: AtomicU64::new(0),
        }
    }

    fn lease(&self) -> Result<Lease, PasswordError> {
        let memory = lock(&self.free).pop();
        match memory {
            Some(memory) => Ok(Lease {
                free: self.free.clone(),
                memory,
            }),
            None => {
                self.refused_total.fetch_add(1, Ordering::Relaxed);
                Err(PasswordError::Busy)
            }
        }
    }

    /// Runs `work` with a permit's memory in a blocking task, or refuses at
    /// once when no permit is free.
    async fn with_memory<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut [Block]) -> T + Send + 'static,
    ) -> Result<T, PasswordError> {
        let mut lease = self.lease()?;
        self.computed_total.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || work(lease.memory()))
            .await
            .map_err(|_| PasswordError::Failed)
    }

    /// The Argon2id PHC string of `password`.
    pub async fn hash(&self, password: String) -> Result<String, PasswordError> {
        self.with_memory(move |memory| hash_password(&password, memory))
            .await?
            .map_err(|_| PasswordError::Failed)
    }

    /// Whether `password` matches `phc`.
    pub async fn verify(&self, password: String, phc: String) -> Result<bool, PasswordError> {
        self.with_memory(move |memory| verify_password(&password, &phc, memory))
            .await
    }

    /// The `/metrics` lines of password hashing.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, value) in [
            (
                "guildhall_password_hashes_total",
                "Password hashes and verifications computed.",
                &self.computed_total,
            ),
            (
                "guildhall_password_hash_refused_total",
                "Password hashes refused because every permit was in use (429).",
                &self.refused_total,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
    }
}

/// Argon2id PHC string for `password`, computed in `memory` (blocking).
fn hash_password(password: &str, memory: &mut [Block]) -> Result<String, String> {
    let salt_bytes: [u8; 16] = random().map_err(|e| e.to_string())?;
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| e.to_string())?;
    let params = Params::default();
    let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
    let output = Output::init_with(Params::DEFAULT_OUTPUT_LEN, |out| {
        Ok(argon2.hash_password_into_with_memory(
            password.as_bytes(),
            &salt_bytes,
            out,
            &mut *memory,
        )?)
    })
    .map_err(|e| e.to_string())?;
    let phc = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).map_err(|e| e.to_string())?,
        salt: Some(salt.as_salt()),
        hash: Some(output),
    };
    Ok(phc.to_string())
}

/// Whether `password` matches `phc`, recomputed in `memory` (blocking). A
/// hash whose parameters need more memory than a permit holds is refused:
/// this server never makes one.
fn verify_password(password: &str, phc: &str, memory: &mut [Block]) -> bool {
    let Ok(hash) = PasswordHash::new(phc) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (hash.salt, hash.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(version), Ok(params)) = (
        Algorithm::try_from(hash.algorithm),
        hash.version
            .map_or(Ok(Version::default()), Version::try_from),
        Params::try_from(&hash),
    ) else {
        return false;
    };
    if params.block_count() > memory.len() {
        return false;
    }
    let mut salt_buf = [0u8; 64];
    let Ok(salt_bytes) = salt.decode_b64(&mut salt_buf) else {
        return false;
    };
    let argon2 = Argon2::new(algorithm, version, params);
    // `Output`'s equality is constant-time.
    Output::init_with(expected.len(), |out| {
        Ok(argon2.hash_password_into_with_memory(
            password.as_bytes(),
            salt_bytes,
            out,
            &mut *memory,
        )?)
    })
    .is_ok_and(|computed| computed == expected)
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
    fn passwords_verify_in_reused_memory() {
        let mut memory = vec![Block::new(); HASH_BLOCKS];
        let phc = hash_password("hunter2", &mut memory).unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"));
        assert!(verify_password("hunter2", &phc, &mut memory));
        assert!(!verify_password("hunter3", &phc, &mut memory));
        assert!(!verify_password("x", "not a hash", &mut memory));
        // Hashes made by the library's own allocating hasher verify too
        // (the stored format is unchanged).
        use argon2::password_hash::PasswordHasher;
        let salt = SaltString::encode_b64(&[7; 16]).unwrap();
        let theirs = Argon2::default()
            .hash_password(b"hunter2", &salt)
            .unwrap()
            .to_string();
        assert!(verify_password("hunter2", &theirs, &mut memory));
        use argon2::password_hash::PasswordVerifier;
        let ours = PasswordHash::new(&phc).unwrap();
        assert!(Argon2::default().verify_password(b"hunter2", &ours).is_ok());
    }

    #[tokio::test]
    async fn a_full_pool_refuses_at_once() {
        let passwords = Arc::new(Passwords::new(1));
        let held = passwords.lease().unwrap();
        assert_eq!(
            passwords.hash("hunter22".into()).await,
            Err(PasswordError::Busy)
        );
        drop(held);
        let phc = passwords.hash("hunter22".into()).await.unwrap();
        assert_eq!(
            passwords.verify("hunter22".into(), phc).await,
            Ok(true),
            "the permit came back with its memory"
        );
        assert_eq!(passwords.refused_total.load(Ordering::Relaxed), 1);
        assert!(
            lock(&passwords.free)[0].is_some(),
            "memory is kept for reuse"
        );
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
