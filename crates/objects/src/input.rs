//! The checks every store's put makes of what it is given (a directory
//! layout's and S3's alike): a chunk inside the grid and of the chunk's
//! size, a whole array of the array's size, a writer's array the put's.

use crate::error::{Error, Result};
use crate::record::ArrayMeta;
use crate::{id_hex, VersionId};

/// The linear index of the chunk at `coords` of `meta`'s grid, refusing a
/// chunk outside it or a buffer that is not one whole chunk (every store's
/// chunk write checks this first).
pub(crate) fn chunk_index(
    meta: &ArrayMeta,
    name: &str,
    coords: &[u64],
    data: &[u8],
) -> Result<u64> {
    let invalid = |why: String| Error::Invalid {
        name: name.to_owned(),
        why,
    };
    let Some(i) = meta.linear(coords) else {
        return Err(invalid(format!(
            "chunk {coords:?} is outside the chunk grid {:?}",
            meta.grid()
        )));
    };
    let cb = meta.chunk_len();
    if data.len() as u64 != cb {
        return Err(invalid(format!(
            "chunk {coords:?}: {} bytes given, a chunk of {:?} {} has {cb}",
            data.len(),
            meta.chunks,
            meta.dtype.name()
        )));
    }
    Ok(i)
}

/// A whole array's bytes must be its type and shape's.
pub(crate) fn check_whole(name: &str, meta: &ArrayMeta, data: &[u8]) -> Result<()> {
    meta.check(name)?;
    if data.len() as u64 != meta.array_len() {
        return Err(Error::Invalid {
            name: name.to_owned(),
            why: format!(
                "{} bytes given for {} {:?} ({} bytes)",
                data.len(),
                meta.dtype.name(),
                meta.shape,
                meta.array_len()
            ),
        });
    }
    Ok(())
}

/// A writer joining put `id` of `name` with the array `mine` must have the
/// put's type, shape and grid (`put`).
pub(crate) fn same_array(
    name: &str,
    id: &VersionId,
    put: &ArrayMeta,
    mine: &ArrayMeta,
) -> Result<()> {
    let (a, b) = (put, mine);
    if (a.dtype, &a.shape, &a.chunks) != (b.dtype, &b.shape, &b.chunks) {
        return Err(Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why: format!(
                "this writer's array ({} {:?} in chunks of {:?}) is not the put's ({} {:?} in chunks of {:?})",
                b.dtype.name(), b.shape, b.chunks, a.dtype.name(), a.shape, a.chunks
            ),
        });
    }
    Ok(())
}
