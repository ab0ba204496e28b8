//! Fresh ids in each API's alphabet and length (`resp_…`, `toolu_01…`, signatures), unique
//! within the test process, and the clock the replies' timestamps read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) const HEX: &[u8] = b"0123456789abcdef";
pub(crate) const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
pub(crate) const BASE64: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub(crate) const BASE64URL: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `prefix` and `len` characters from `alphabet`, unique within the test process: a counter run
/// through splitmix64, so ids look random but never repeat.
pub(crate) fn fresh_id(prefix: &str, alphabet: &[u8], len: usize) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut state = NEXT.fetch_add(1, Ordering::Relaxed) << 32;
    let mut id = prefix.to_string();
    for _ in 0..len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        id.push(alphabet[(z % alphabet.len() as u64) as usize] as char);
    }
    id
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
