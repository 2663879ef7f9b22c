//! A set record as read from where a set is stored: decoded (the format's
//! strict decode) and refused when it is not that set's. A record's member
//! paths and container names are relative to its set directory; a record
//! copied or renamed to another set's place would serve its members under
//! paths they were never written to. The one check of every store (a
//! POSIX directory, the object layout, S3).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{AggError, Result};
use crate::format::{SetRecord, HEADER_LEN};

/// Where a record was read from.
#[derive(Debug, Clone, Copy)]
pub enum StoredAs<'a> {
    /// A store that names sets (object layout, S3): the set's name there,
    /// which must be the record's.
    Set(&'a [u8]),
    /// A POSIX set directory: its path must end with the record's set
    /// directory (the remote's root before it is not known here).
    Dir(&'a Path),
}

/// `bytes`, the record read from `path`, decoded for the set `stored`:
/// damage and a record of another set are refused naming `path` (the
/// latter at the offset of the record's set directory).
pub fn decode_for_set(bytes: &[u8], path: &Path, stored: StoredAs<'_>) -> Result<SetRecord> {
    let r = SetRecord::decode(bytes, path)?;
    let (ours, there) = match stored {
        StoredAs::Set(set) => (r.set == set, String::from_utf8_lossy(set).into_owned()),
        StoredAs::Dir(dir) => (
            dir.ends_with(Path::new(OsStr::from_bytes(&r.set))),
            dir.display().to_string(),
        ),
    };
    if !ours {
        return Err(AggError::corrupt(
            path,
            HEADER_LEN as u64,
            format!(
                "record of set {} stored as set {there}",
                String::from_utf8_lossy(&r.set)
            ),
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &[u8] = include_bytes!("../tests/vectors/set_v1.bin");

    #[test]
    fn a_record_is_taken_only_as_its_own_set() {
        let p = Path::new("set.plr");
        let set = SetRecord::decode(V1, p).unwrap().set;
        assert!(decode_for_set(V1, p, StoredAs::Set(&set)).is_ok());
        let dir = Path::new("/remote").join(OsStr::from_bytes(&set));
        assert!(decode_for_set(V1, p, StoredAs::Dir(&dir)).is_ok());
        for stored in [
            StoredAs::Set(b"ckpt/other"),
            StoredAs::Dir(Path::new("/remote/ckpt/other")),
        ] {
            let e = decode_for_set(V1, p, stored).unwrap_err().to_string();
            assert!(
                e.contains("stored as set") && e.contains(&HEADER_LEN.to_string()),
                "{e}"
            );
        }
        // Damage is the decoder's refusal, whatever the set.
        let mut bad = V1.to_vec();
        bad[0] ^= 1;
        assert!(decode_for_set(&bad, p, StoredAs::Set(&set)).is_err());
    }
}
