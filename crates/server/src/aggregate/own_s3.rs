//! The "own region" mode on S3 (`--agg-mode own`, docs/aggregate.md "Each
//! node its own region", S3): a container is one multipart upload, and
//! every node uploads its own region's parts of it, so no member byte
//! crosses between nodes. The shape is the server job's shared uploads of
//! one file (cluster/parts.rs): one node (here the set's record writer)
//! creates the upload and shares its id, each node uploads its parts and
//! reports them (`PartDone`), the creator completes the upload from every
//! report. The parts are placed by `regions::place_parts`, the same on
//! every node; the bytes go through the S3 container writer
//! (`paralog_s3::sets::RegionUpload`), the checksums and placements as in
//! own.rs.
//!
//! Crash rules as for the leader mode on S3: every upload has its marker
//! before it exists, the uploads are completed only once every node
//! reported its parts and nothing failed anywhere, and the set record's
//! PUT (the commit) comes after every completion. A node killed in the
//! middle leaves open uploads with their markers, which the next publish
//! or `recover` aborts (`collect_orphans_store`); a failure agreed by all
//! makes the record writer abort the uploads, or delete the containers it
//! completed.

use std::collections::BTreeMap;

use paralog_aggregate::format::{Container, Member, SetRecord};
use paralog_backend::PartDone;
use paralog_s3::sets::S3Sets;

use crate::cluster::mpi::MpiError;

use super::across::Ctx;
use super::own::{self, Agreed, Wrote};
use super::transfer::Outgoing;

/// The containers' shared uploads, as the record writer started them.
pub(crate) struct Shared {
    names: Vec<Vec<u8>>,
    ids: Vec<String>,
    /// The record writer: the containers it completed.
    completed: Vec<bool>,
}

/// The record writer (`writer`) starts an upload per container of `a`
/// (named as `containers`) and shares their ids. `Err`: it could not (the
/// ones it started are aborted), the same on every node.
pub(crate) fn start(
    ctx: &Ctx<'_>,
    s3: &S3Sets,
    set: &[u8],
    containers: &[Container],
    writer: usize,
) -> Result<Result<Shared, String>, MpiError> {
    let names: Vec<Vec<u8>> = containers.iter().map(|c| c.name.clone()).collect();
    let mut out = Vec::new();
    if ctx.comm.rank() == writer {
        let mut ids = Vec::new();
        let mut failed = None;
        for n in &names {
            match s3.start_shared(set, n) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        match failed {
            None => {
                out.push(1u8);
                for id in &ids {
                    out.extend_from_slice(&(id.len() as u32).to_le_bytes());
                    out.extend_from_slice(id.as_bytes());
                }
            }
            Some(e) => {
                for (n, id) in names.iter().zip(&ids) {
                    s3.abandon_shared(set, n, id, false);
                }
                out.push(0);
                out.extend_from_slice(e.as_bytes());
            }
        }
    }
    let mut len = (out.len() as u32).to_le_bytes();
    ctx.w(|c| c.bcast(&mut len, writer))?;
    out.resize(u32::from_le_bytes(len) as usize, 0);
    ctx.w(|c| c.bcast(&mut out, writer))?;
    if out.first() != Some(&1) {
        let why = String::from_utf8_lossy(out.get(1..).unwrap_or_default());
        return Ok(Err(format!(
            "the set's record writer (node {writer}) could not start its uploads: {why}"
        )));
    }
    let mut ids = Vec::new();
    let mut b = &out[1..];
    while b.len() >= 4 {
        let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
        let Some(id) = b.get(4..4 + n) else { break };
        ids.push(String::from_utf8_lossy(id).into_owned());
        b = &b[4 + n..];
    }
    if ids.len() != names.len() || !b.is_empty() {
        // Never sent by this binary: refused alike everywhere.
        return Ok(Err("the uploads' ids arrived damaged".into()));
    }
    Ok(Ok(Shared {
        completed: vec![false; names.len()],
        names,
        ids,
    }))
}

/// Upload this node's members `mine` as its region's parts (one thread,
/// the bytes in offset order, two parts in flight), while the MPI thread
/// beats with the others. Only an MPI failure returns `Err`.
pub(crate) fn write(
    ctx: &Ctx<'_>,
    s3: &S3Sets,
    set: &[u8],
    a: &Agreed,
    shared: &Shared,
    base: SetRecord,
    mine: Vec<Outgoing>,
) -> Result<Wrote, MpiError> {
    let slots = own::my_slots(ctx, a);
    let me = ctx.comm.rank() as u64;
    let mut todo: Vec<_> = mine
        .into_iter()
        .filter_map(|m| slots.get(&m.index).map(|s| (m, *s)))
        .collect();
    todo.sort_by_key(|(_, s)| s.offset);
    // A node is in one group: its members are one region of one container.
    let region = a.parts.iter().find(|r| r.node == me);
    let block = ctx.block;
    let local = own::beside_beats(ctx, || -> Result<(Vec<Member>, Vec<u8>), String> {
        let mut placed = Vec::new();
        let mut buf = vec![0u8; block];
        let Some(r) = region else {
            // No byte here: empty members only (no extent, no part).
            let mut nowhere = |at: u64, _: &[u8]| -> Result<(), String> {
                Err(format!("a member byte at {at} outside any region"))
            };
            for (m, slot) in todo {
                placed.push(own::write_member(&mut nowhere, m, slot, &mut buf)?);
            }
            return Ok((placed, Vec::new()));
        };
        let k = r.container as usize;
        let mut up = s3.region(
            set,
            &shared.names[k],
            &shared.ids[k],
            r.start,
            r.first_part,
            r.parts.clone(),
        );
        let written = || -> Result<Vec<PartDone>, String> {
            for (m, slot) in todo {
                let mut put = |at: u64, data: &[u8]| up.write(at, data).map_err(|e| e.to_string());
                placed.push(own::write_member(&mut put, m, slot, &mut buf)?);
            }
            up.finish(r.end()).map_err(|e| e.to_string())
        };
        match written() {
            Ok(parts) => Ok((placed, PartDone::encode_all(&parts))),
            Err(e) => {
                up.abandon();
                Err(e)
            }
        }
    })?;
    let mut wrote = Wrote::default();
    match local {
        Ok(Ok((mut members, reports))) => {
            if !members.is_empty() {
                members.sort_by(|a, b| a.path.cmp(&b.path));
                wrote.placements = SetRecord { members, ..base }.encode();
            }
            wrote.reports = reports;
        }
        Ok(Err(e)) => wrote.error = Some(e),
        Err(_) => wrote.error = Some("the region uploader thread panicked".into()),
    }
    Ok(wrote)
}

/// The record writer, once every node reported its parts and nothing
/// failed: each container's upload completed from the reports (`all`,
/// `counts`: gathered from every node), its parts checked against the
/// placement.
pub(crate) fn complete(
    s3: &S3Sets,
    set: &[u8],
    a: &Agreed,
    shared: &mut Shared,
    all: &[u8],
    counts: &[usize],
) -> Result<(), String> {
    let mut by_container: BTreeMap<usize, Vec<PartDone>> = BTreeMap::new();
    let mut at = 0;
    for (node, &c) in counts.iter().enumerate() {
        let bytes = &all[at..at + c];
        at += c;
        if bytes.is_empty() {
            continue;
        }
        let parts = PartDone::decode_all(bytes)
            .ok_or_else(|| format!("node {node}'s part reports do not decode"))?;
        let r = a
            .parts
            .iter()
            .find(|r| r.node == node as u64)
            .ok_or_else(|| format!("node {node} reported parts but has no region"))?;
        by_container
            .entry(r.container as usize)
            .or_default()
            .extend(parts);
    }
    for (k, name) in shared.names.iter().enumerate() {
        if a.regions.sizes[k] == 0 {
            // A group of empty members only: no part, and no empty
            // object either (the record leaves the container out:
            // `jobroot::drop_empty_containers`).
            s3.abandon_shared(set, name, &shared.ids[k], false);
            continue;
        }
        let count: usize = a
            .parts
            .iter()
            .filter(|r| r.container as usize == k)
            .map(|r| r.parts.len())
            .sum();
        s3.complete_shared(
            set,
            name,
            &shared.ids[k],
            a.regions.sizes[k],
            count as u32,
            by_container.remove(&k).unwrap_or_default(),
        )
        .map_err(|e| e.to_string())?;
        shared.completed[k] = true;
    }
    Ok(())
}

/// The record writer, the set not committed: every upload aborted, every
/// container it completed deleted (best effort: what is left the next
/// publish or `recover` collects).
pub(crate) fn discard(s3: &S3Sets, set: &[u8], shared: &Shared) {
    for (k, name) in shared.names.iter().enumerate() {
        s3.abandon_shared(set, name, &shared.ids[k], shared.completed[k]);
    }
}
