//! `paralog obj gc` on S3 (docs/objects.md "S3"): what the directory's
//! collection does (gc.rs, and the object layout's orphan chunks), with
//! the S3 layout's own keys.
//!
//! - A chunked put (`staging/<id>/...`) whose newest staging object, and
//!   array record (`data/<id>`, if a commit wrote one), are older than the
//!   grace is abandoned: its staging objects are removed.
//! - A chunk object (`data/<uuid>`: a chunk, or a commit's array record,
//!   `data/<id>` named by the put's id, or an older binary's named by
//!   `staging/<id>/head.<uuid>`) older than the grace that no version
//!   record and no put still within the grace names is removed:
//!   the chunks of abandoned puts, the chunk a writer killed before its
//!   claim wrote, what a retention killed between a record and its
//!   chunks left.
//! - A Zarr view (`zarr/<name>/v<n>/`) older than the grace whose version
//!   is gone, or that has no `zarr.json` (its maker died), is removed,
//!   `zarr.json` first.
//!
//! Ages are by the server's clock only: "now" is the Last-Modified of an
//! object the collection puts first (`meta/.gc-clock.<uuid>`, removed at
//! the end), never this machine's clock. The puts are listed, and their
//! claims read, BEFORE the versions: a put that publishes meanwhile is
//! either seen with its claims or, its staging already removed after its
//! publish, seen as a version. Everything is read before anything is
//! deleted, and a version record that does not decode stops the
//! collection (its chunks would look unreferenced).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::error::Result;
use crate::s3put::array_record_key;
use crate::s3store::{is_version_file, S3Store};
use crate::staging::decode_claim;
use crate::{id_hex, parse_id, VersionId};

/// What one collection removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct S3Collected {
    /// Abandoned chunked puts (their staging objects).
    pub puts: usize,
    /// Chunk objects no version or live put names.
    pub chunks: usize,
    /// Zarr views of versions gone, or half made.
    pub views: usize,
}

/// The objects of one group (a put, a view) and the newest one's time.
#[derive(Default)]
struct Group {
    keys: Vec<String>,
    newest: Option<SystemTime>,
}

fn group(
    listing: Vec<(String, SystemTime)>,
    cut: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, Group> {
    let mut out: BTreeMap<String, Group> = BTreeMap::new();
    for (k, t) in listing {
        if let Some(g) = cut(&k) {
            let e = out.entry(g).or_default();
            e.newest = e.newest.max(Some(t));
            e.keys.push(k);
        }
    }
    out
}

/// The object and version whose view holds `key` (`zarr/<name>/v<n>/...`):
/// the version is the first component that looks like one (a name never
/// has such a component: `check_name`), so a name may hold `c`.
fn view_of(key: &str) -> Option<(String, u64)> {
    let parts: Vec<&str> = key.strip_prefix("zarr/")?.split('/').collect();
    let i = parts.iter().position(|p| is_version_file(p).is_some())?;
    Some((parts[..i].join("/"), is_version_file(parts[i])?))
}

impl S3Store {
    /// The server's time now: the Last-Modified of an object put for it.
    fn server_now(&self, key: &str) -> Result<SystemTime> {
        self.put_obj(key, Vec::new(), false)?;
        let t = self.be.object_modified(key).map_err(|e| self.err(e))?;
        t.ok_or_else(|| crate::Error::Url {
            url: self.url(),
            why: format!("{key}: put, then not found: cannot read the server's clock"),
        })
    }

    /// Remove what abandoned puts, killed writers, commits, retentions and
    /// view makers left, untouched for longer than `grace` (module doc).
    /// A put still being written within `grace` keeps everything, so
    /// `grace` must exceed the longest pause between two of its chunks.
    pub fn collect_abandoned(&self, grace: Duration) -> Result<S3Collected> {
        let clock = format!("meta/.gc-clock.{}", id_hex(&crate::staging::new_id()));
        let now = self.server_now(&clock)?;
        let result = self.collect(grace, now);
        let _ = self.be.delete_object(&clock);
        result
    }

    fn collect(&self, grace: Duration, now: SystemTime) -> Result<S3Collected> {
        let old = |t: Option<SystemTime>| {
            t.is_some_and(|t| now.duration_since(t).unwrap_or_default() > grace)
        };
        let list = |p: &str| self.be.list_objects_dated(p).map_err(|e| self.err(e));
        // 1. The puts, and what the live ones name.
        let puts = group(list("staging/")?, |k| {
            let id = k.strip_prefix("staging/")?.split('/').next()?;
            parse_id(id).map(|_| id.to_owned())
        });
        let mut named: BTreeSet<VersionId> = BTreeSet::new();
        let mut dead = Vec::new();
        for (id, g) in &puts {
            let pid = parse_id(id).expect("grouped by id");
            // A commit in progress writes no staging object (an older
            // binary's PUT `publishing` and `head.<uuid>`, which made the
            // put new again), only its array record: that counts too.
            if old(g.newest) {
                let key = array_record_key(&pid);
                let record = self.be.object_modified(&key).map_err(|e| self.err(e))?;
                if old(g.newest.max(record)) {
                    dead.push(g);
                    continue;
                }
            }
            // Its array record, if a commit of it wrote one.
            named.insert(pid);
            for k in &g.keys {
                let f = &k[format!("staging/{id}/").len()..];
                if let Some(head) = f.strip_prefix("head.").and_then(parse_id) {
                    named.insert(head);
                } else if f.starts_with('c') {
                    // Gone meanwhile: removed after its publish (the
                    // version, listed next, names the chunk) or by abort.
                    if let Some(b) = self.get(k)? {
                        named.insert(decode_claim(&b, &self.shown(k))?.1.chunk);
                    }
                } else if let Some(i) = crate::parts::claim_chunk(f) {
                    // The chunk its commit puts together from its parts.
                    named.insert(crate::parts::chunk_file_id(&pid, i));
                }
            }
        }
        // 2. The versions, and every chunk they name.
        let mut versions: BTreeSet<(String, u64)> = BTreeSet::new();
        for k in self.be.list_objects("meta/").map_err(|e| self.err(e))? {
            let Some((name, f)) = k["meta/".len()..].rsplit_once('/') else {
                continue;
            };
            let Some(n) = is_version_file(f) else {
                continue;
            };
            if let Some(v) = self.record(name, n)? {
                named.extend(v.pieces.iter().map(|p| p.chunk));
            }
            versions.insert((name.to_owned(), n));
        }
        // 3. The chunk objects and the views, read before any delete.
        let chunks: Vec<String> = list("data/")?
            .into_iter()
            .filter(|(k, t)| {
                old(Some(*t))
                    && parse_id(&k["data/".len()..]).is_some_and(|id| !named.contains(&id))
            })
            .map(|(k, _)| k)
            .collect();
        let views = group(list("zarr/")?, |k| {
            view_of(k).map(|(name, n)| format!("{name}\n{n}"))
        });
        let mut done = S3Collected::default();
        for g in dead {
            // `begin` first: a commit retried meanwhile then refuses.
            let mut keys = g.keys.clone();
            keys.sort_by_key(|k| !k.ends_with("/begin"));
            for k in keys {
                self.be.delete_object(&k).map_err(|e| self.err(e))?;
            }
            done.puts += 1;
        }
        for k in chunks {
            self.be.delete_object(&k).map_err(|e| self.err(e))?;
            done.chunks += 1;
        }
        for (key, g) in views {
            let (name, n) = key.split_once('\n').expect("made above");
            let n: u64 = n.parse().expect("digits");
            let whole = g.keys.iter().any(|k| k.ends_with("/zarr.json"));
            if old(g.newest) && (!whole || !versions.contains(&(name.to_owned(), n))) {
                self.remove_view(name, n)?;
                done.views += 1;
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::view_of;

    #[test]
    fn view_keys() {
        let named = |n: &str, v| Some((n.to_owned(), v));
        assert_eq!(
            view_of("zarr/run7/t/v0000000003/zarr.json"),
            named("run7/t", 3)
        );
        assert_eq!(view_of("zarr/a/c/b/v0000000012/c/1/0"), named("a/c/b", 12));
        assert_eq!(view_of("zarr/v12/x/v0000000001/c/0"), named("v12/x", 1));
        assert_eq!(view_of("zarr/a/b/zarr.json"), None);
        assert_eq!(view_of("data/0123"), None);
    }
}
