//! `paralog obj begin|write|commit|abort URL … --local L`: a chunked put
//! logged on this node (docs/objects.md "Logged mode"), the command-line
//! form of what an MPI program's ranks do with a logged store: `begin`
//! makes the put in the node-local directory L (prints its id), each
//! writer process `write`s its whole chunks there at the local disk's
//! speed, and `commit` is the local commit; the node server (`paralog
//! server --local L`, or `obj publish`, `recover`) publishes the version.
//! The remote is a directory layout or `s3://`, as for `put --local`.
//! Writers on other nodes are the MPI form's (its gather carries their
//! shares): a process here joins a put begun in its own L only.

use std::path::Path;
use std::process::ExitCode;

use anyhow::anyhow;
use paralog_objects::{id_hex, parse_id, LoggedStore, S3Store};

use crate::obj::{print, write_file, ObjCmd};

/// The store's URL and the object's name in `url` (a directory layout or
/// S3).
fn locate(url: &str) -> anyhow::Result<(String, String)> {
    if paralog_backend::url::is_s3(url) {
        let u = match url.parse::<paralog_backend::RemoteUrl>() {
            Ok(paralog_backend::RemoteUrl::S3(u)) => u,
            Ok(_) => anyhow::bail!("{url}: not an s3:// URL"),
            Err(e) => anyhow::bail!("{url}: {e}"),
        };
        let (store, name) = S3Store::locate(&u)?;
        let name =
            name.ok_or_else(|| anyhow!("{url}: names a store, not an object (add /NAME)"))?;
        return Ok((store.url(), name));
    }
    let (store, name) = crate::obj::object(url)?;
    Ok((store.url(), name))
}

fn put_id(id: &str) -> anyhow::Result<[u8; 16]> {
    parse_id(id).ok_or_else(|| anyhow!("{id}: not a put id (32 hex digits)"))
}

/// The command, if it is a logged chunked put's (`--local` given).
pub(crate) fn run(cmd: &ObjCmd) -> anyhow::Result<Option<ExitCode>> {
    let (url, local) = match cmd {
        ObjCmd::Begin {
            url,
            local: Some(l),
            ..
        }
        | ObjCmd::Write {
            url,
            local: Some(l),
            ..
        }
        | ObjCmd::Commit {
            url,
            local: Some(l),
            ..
        }
        | ObjCmd::Abort {
            url,
            local: Some(l),
            ..
        } => (url, l.as_path()),
        _ => return Ok(None),
    };
    let (store_url, name) = locate(url)?;
    let logged = LoggedStore::open(&store_url, local)?;
    let line = step(cmd, &logged, &name, local)?;
    print(&mut std::io::stdout().lock(), &line)?;
    Ok(Some(ExitCode::SUCCESS))
}

/// One command on the logged store; the line it prints.
fn step(cmd: &ObjCmd, logged: &LoggedStore, name: &str, local: &Path) -> anyhow::Result<String> {
    Ok(match cmd {
        ObjCmd::Begin { array, .. } => {
            let put = logged.begin(name, &array.meta()?)?;
            format!("{}\n", id_hex(&put.id()))
        }
        ObjCmd::Write {
            id,
            file,
            chunks,
            slice,
            ..
        } => {
            let mut put = logged.join(name, &put_id(id)?)?;
            write_file(&mut put, file, chunks, slice.as_deref())?;
            logged.finish(put)?;
            String::new()
        }
        ObjCmd::Commit { id, .. } => {
            let id = put_id(id)?;
            logged.commit(name, &id)?;
            format!(
                "{name}: logged put {} committed in {}; published by the node server\n",
                id_hex(&id),
                local.display()
            )
        }
        ObjCmd::Abort { id, .. } => {
            let id = put_id(id)?;
            logged.abort(name, &id)?;
            format!("{name}: logged put {} aborted\n", id_hex(&id))
        }
        _ => unreachable!("only the commands `run` takes"),
    })
}
