//! What the values of `paralog obj`'s arguments mean: a list of numbers
//! (`--shape 64,4096`), `obj write`'s chunks and their bytes, `--slice`
//! (docs/objects.md "Command line"). Shared by the directory and S3 forms
//! (obj.rs, obj_s3.rs).

use anyhow::{bail, Context};
use paralog_objects::{ArrayMeta, Put, S3Put};

/// What `obj write` writes, whatever the store: whole chunks, or a box of
/// the array (parts of the chunks it does not cover whole).
pub(crate) trait WriteTo {
    fn meta(&self) -> &ArrayMeta;
    fn chunk(&mut self, coords: &[u64], data: &[u8]) -> paralog_objects::Result<()>;
    fn part(&mut self, start: &[u64], count: &[u64], data: &[u8]) -> paralog_objects::Result<()>;
}

impl WriteTo for Put<'_> {
    fn meta(&self) -> &ArrayMeta {
        Put::meta(self)
    }
    fn chunk(&mut self, coords: &[u64], data: &[u8]) -> paralog_objects::Result<()> {
        self.write_chunk(coords, data)
    }
    fn part(&mut self, start: &[u64], count: &[u64], data: &[u8]) -> paralog_objects::Result<()> {
        self.write_part(start, count, data)
    }
}

impl WriteTo for S3Put<'_> {
    fn meta(&self) -> &ArrayMeta {
        S3Put::meta(self)
    }
    fn chunk(&mut self, coords: &[u64], data: &[u8]) -> paralog_objects::Result<()> {
        self.write_chunk(coords, data)
    }
    fn part(&mut self, start: &[u64], count: &[u64], data: &[u8]) -> paralog_objects::Result<()> {
        self.write_part(start, count, data)
    }
}

/// `obj write`: `file`'s bytes as the chunks given (`--chunk`, in that
/// order) or as the box `--slice` names.
pub(crate) fn write_file(
    put: &mut impl WriteTo,
    file: &std::path::Path,
    chunks: &[String],
    slice: Option<&str>,
) -> anyhow::Result<()> {
    let Some(s) = slice else {
        for (c, bytes) in chunk_slices(file, put.meta().chunk_len() as usize, chunks)? {
            put.chunk(&c, &bytes)?;
        }
        return Ok(());
    };
    let (start, count) = parse_slice(s, &put.meta().shape)?;
    let data = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let want = count.iter().product::<u64>() * put.meta().dtype.size() as u64;
    if data.len() as u64 != want {
        bail!(
            "{}: {} bytes for --slice {s} ({want} bytes)",
            file.display(),
            data.len()
        );
    }
    put.part(&start, &count, &data)?;
    Ok(())
}

/// `obj write`'s chunks: the coordinates given and, for each, its slice of
/// `file`'s bytes (chunks of `cb` bytes, in that order); a file of another
/// length is refused, naming it.
fn chunk_slices(
    file: &std::path::Path,
    cb: usize,
    chunks: &[String],
) -> anyhow::Result<Vec<(Vec<u64>, Vec<u8>)>> {
    let data = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    if data.len() != cb * chunks.len() {
        bail!(
            "{}: {} bytes for {} chunks of {cb} bytes",
            file.display(),
            data.len(),
            chunks.len()
        );
    }
    chunks
        .iter()
        .zip(data.chunks(cb.max(1)))
        .map(|(c, bytes)| Ok((dims(c)?, bytes.to_vec())))
        .collect()
}

pub(crate) fn dims(s: &str) -> anyhow::Result<Vec<u64>> {
    s.split(',')
        .map(|d| {
            d.trim()
                .parse::<u64>()
                .with_context(|| format!("{s:?}: not a list of numbers like 64,4096"))
        })
        .collect()
}

/// `START:STOP`, `I`, `:` per dimension; missing dimensions whole.
pub fn parse_slice(s: &str, shape: &[u64]) -> anyhow::Result<(Vec<u64>, Vec<u64>)> {
    let parts: Vec<&str> = if s.trim().is_empty() {
        vec![]
    } else {
        s.split(',').collect()
    };
    if parts.len() > shape.len() {
        bail!(
            "--slice {s}: {} dimensions for an array of {}",
            parts.len(),
            shape.len()
        );
    }
    let (mut start, mut count) = (Vec::new(), Vec::new());
    for (i, &n) in shape.iter().enumerate() {
        let p = parts.get(i).map_or(":", |p| p.trim());
        let num = |x: &str, default: u64| -> anyhow::Result<u64> {
            if x.is_empty() {
                Ok(default)
            } else {
                x.parse()
                    .with_context(|| format!("--slice {s}: {x:?} is not a number"))
            }
        };
        let (a, b) = match p.split_once(':') {
            Some((a, b)) => (num(a, 0)?, num(b, n)?),
            None => {
                let a = num(p, 0)?;
                (a, a + 1)
            }
        };
        if a >= b || b > n {
            bail!("--slice {s}: {p} is empty or outside 0..{n} in dimension {i}");
        }
        start.push(a);
        count.push(b - a);
    }
    Ok((start, count))
}

#[cfg(test)]
mod tests {
    use super::parse_slice;

    #[test]
    fn slices() {
        let shape = [64, 4096];
        // Each slice as text, and its (start, count) per dimension.
        for (text, start, count) in [
            ("", [0, 0], [64, 4096]),
            ("3", [3, 0], [1, 4096]),
            ("1:5, 10:", [1, 10], [4, 4086]),
            (":,:7", [0, 0], [64, 7]),
        ] {
            assert_eq!(
                parse_slice(text, &shape).unwrap(),
                (start.to_vec(), count.to_vec()),
                "{text}"
            );
        }
        for bad in ["5:5", "0:65", "x", "0:1,0:1,0:1", "64"] {
            assert!(parse_slice(bad, &shape).is_err(), "{bad}");
        }
    }
}
