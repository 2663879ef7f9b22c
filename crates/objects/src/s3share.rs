//! A logged put's shares copied to S3 (crate::remote_put, docs/objects.md
//! "Logged mode"): the remote put is an ordinary chunked put on S3
//! (`staging/<id>/`, crate::s3put) of the logged put's id, made by the
//! first node that copies into it; each share's claims are created under
//! its writer's own id, then its `w<writer>` mark. An S3 write is durable
//! once answered, so the mark is the share's last step.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::record::{self, ArrayMeta};
use crate::remote_put::{same_meta, Found, Held, WriterShare};
use crate::s3store::S3Store;
use crate::staging::{decode_claim, Claim};
use crate::{id_hex, parse_id, VersionId};

impl S3Store {
    /// The remote put `id` of `name`, made if no node made it yet (`begin`
    /// created only if absent: two nodes at once both join the first):
    /// whether it was made now, and so holds nothing yet. Made now, it is
    /// not read back (2 requests; before, 5).
    pub(crate) fn ensure_put(&self, name: &str, meta: &ArrayMeta, id: &VersionId) -> Result<bool> {
        crate::store::check_name(name)?;
        let dir = format!("staging/{}", id_hex(id));
        // `name` first, as `begin` does: a put is open once `begin` is
        // there. Written again over another node's, it is the same name
        // (the id is the logged put's, the same everywhere).
        self.put_obj(&format!("{dir}/name"), name.as_bytes().to_vec(), false)?;
        if self.put_obj(&format!("{dir}/begin"), record::encode(id, meta), true)? {
            return Ok(true);
        }
        // There already (another node's, or a copy before a crash; or this
        // very PUT retried by the client after a lost answer): checked.
        let there = self.staged(name, id)?;
        same_meta(name, id, &there, meta)?;
        Ok(false)
    }

    /// Copy one writer's share into the remote put `id`, whole on return,
    /// its `w<writer>` mark last. `made_now`: [`S3Store::ensure_put`] made
    /// the put just now, so it holds no mark or claim to look for (`None`:
    /// made or checked here). Its parts are written again whole if a copy
    /// was killed before the mark: the same objects under the same keys.
    pub(crate) fn copy_share(
        &self,
        (name, id, meta): (&str, &VersionId, &ArrayMeta),
        share: &WriterShare<'_>,
        made_now: Option<bool>,
    ) -> Result<()> {
        let (writer, claims, read) = (share.writer, share.claims, share.read);
        let fresh = match made_now {
            Some(made) => made,
            None => self.ensure_put(name, meta, id)?,
        };
        let dir = format!("staging/{}", id_hex(id));
        let mark = format!("{dir}/w{}", id_hex(&writer));
        if !fresh && self.get(&mark)?.is_some() {
            return Ok(());
        }
        let cb = meta.chunk_len();
        let mut put = self.writer_of(name, id, writer, meta.clone());
        for (k, (i, c)) in claims.iter().enumerate() {
            let key = format!("{dir}/c{i:020}");
            if let Some(b) = (!fresh).then(|| self.get(&key)).transpose()?.flatten() {
                let there = decode_claim(&b, &self.shown(&key)).ok().map(|(_, rc)| rc);
                let data_key = |rc: &Claim| format!("data/{}", id_hex(&rc.chunk));
                let good = there.is_some_and(|rc| {
                    rc.writer == writer
                        && rc.block_crc == c.block_crc
                        && self.get(&data_key(&rc)).ok().flatten().is_some_and(|o| {
                            crate::stored::check_stored(&o, cb, rc.block_crc).is_ok()
                        })
                });
                if good {
                    continue;
                }
                // A bad copy, or another writer's claim of this share's
                // chunk (a copier of an older binary): written again.
                if let Some(rc) = there {
                    let _ = self.be.delete_object(&data_key(&rc));
                }
                self.be.delete_object(&key).map_err(|e| self.err(e))?;
            }
            let data = read(*i, c)?;
            put.write_chunk(&meta.coords(*i), &data)?;
            if k == 0 {
                crate::failpoint("objects.publish_mid_copy");
            }
        }
        for (k, p) in share.parts.iter().enumerate() {
            let data = (share.read_part)(p)?;
            put.write_part_object(p.chunk, &p.start, &p.count, &data)?;
            if k == 0 && claims.is_empty() {
                crate::failpoint("objects.publish_mid_copy");
            }
        }
        put.finish()
    }

    /// The remote put's claims and finished writers (crate::remote_put).
    pub(crate) fn remote_claims(
        &self,
        name: &str,
        id: &VersionId,
        meta: &ArrayMeta,
    ) -> Result<Found> {
        let dir = format!("staging/{}", id_hex(id));
        if self.get(&format!("{dir}/begin"))?.is_none() {
            return Ok(None);
        }
        same_meta(name, id, &self.staged(name, id)?, meta)?;
        let n = meta.n_chunks();
        let mut claims: Vec<Option<Claim>> = (0..n).map(|_| None).collect();
        let mut finished = BTreeSet::new();
        let mut parts = Vec::new();
        for k in self
            .be
            .list_objects(&format!("{dir}/"))
            .map_err(|e| self.err(e))?
        {
            let f = &k[dir.len() + 1..];
            if let Some(w) = f.strip_prefix('w').and_then(parse_id) {
                finished.insert(w);
            } else if f.starts_with('c') {
                let at = self.shown(&k);
                let b = self.get(&k)?.unwrap_or_default();
                let (i, c) = decode_claim(&b, &at)?;
                if i >= n || f != format!("c{i:020}") {
                    return Err(Error::Damaged {
                        path: at,
                        offset: 8,
                        what: format!("claims chunk {i} of {n}"),
                    });
                }
                claims[i as usize] = Some(c);
            } else if crate::parts::claim_chunk(f).is_some() {
                let at = self.shown(&k);
                let b = self.get(&k)?.unwrap_or_default();
                parts.push(crate::parts::PartClaim::decode(&b, &at)?);
            }
        }
        Ok(Some(Held {
            claims,
            finished,
            parts,
        }))
    }
}
