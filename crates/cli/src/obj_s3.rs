//! `paralog obj` on an S3 store (`s3://bucket/STORE[/NAME]`,
//! crates/objects `s3store`, docs/objects.md "S3"): the same commands and
//! output as on a directory, with the Zarr view (copies of the chunks
//! under `zarr/`), `gc` and logged puts (`put --local`), but no HDF5
//! view and no `puts`. (The C and Python APIs open S3 stores through
//! crates/objects-c/src/direct.rs.)

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use paralog_backend::{RemoteUrl, S3Url};
use paralog_objects::{id_hex, parse_id, ArrayVersion, S3Store, ViewState};

use crate::obj::{committed_line, parse_slice, print, to_verify, version_json, write_file, ObjCmd};

/// The S3 URL a command names, if it names one.
fn s3_url(cmd: &ObjCmd) -> anyhow::Result<Option<S3Url>> {
    let url = match cmd {
        ObjCmd::Init { url }
        | ObjCmd::Ls { url, .. }
        | ObjCmd::Info { url, .. }
        | ObjCmd::Get { url, .. }
        | ObjCmd::Verify { url, .. }
        | ObjCmd::Put { url, .. }
        | ObjCmd::Begin { url, .. }
        | ObjCmd::Write { url, .. }
        | ObjCmd::Commit { url, .. }
        | ObjCmd::Abort { url, .. }
        | ObjCmd::Rm { url }
        | ObjCmd::Gc { url, .. }
        | ObjCmd::Puts { url }
        | ObjCmd::View { url, .. } => url,
        ObjCmd::Publish { .. } => return Ok(None),
    };
    if !paralog_backend::url::is_s3(url) {
        return Ok(None);
    }
    match url.parse::<RemoteUrl>().map_err(|e| anyhow!("{e}"))? {
        RemoteUrl::S3(u) => Ok(Some(u)),
        _ => Ok(None),
    }
}

fn object(url: &S3Url) -> anyhow::Result<(S3Store, String)> {
    let (store, name) = S3Store::locate(url)?;
    let name = name.ok_or_else(|| anyhow!("{url}: names a store, not an object (add /NAME)"))?;
    Ok((store, name))
}

fn put_id(id: &str) -> anyhow::Result<[u8; 16]> {
    parse_id(id).ok_or_else(|| anyhow!("{id}: not a put id (32 hex digits)"))
}

fn info_json(store: &S3Store, av: &ArrayVersion) -> anyhow::Result<serde_json::Value> {
    let made = store.view_made(&av.name, av.number)?;
    Ok(version_json(
        av,
        &store.versions(&av.name)?,
        Some(store.view_url(&av.name, av.number).into()),
        None,
        Some(match made {
            true => ViewState::Made,
            false => ViewState::Missing(NOT_MADE.into()),
        }),
    ))
}

const NOT_MADE: &str = "not made: the committing process stopped (or failed) before it made the Zarr view; `paralog obj view` makes it";

/// `obj view` on S3: the Zarr view of a version (default: the latest), or
/// of every version kept that has none; prints where each is.
fn view(
    store: &S3Store,
    name: &str,
    version: Option<u64>,
    missing: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let numbers =
        crate::obj_view::to_view(name, version, missing, store.versions(name)?, out, |n| {
            Ok(!store.view_made(name, n)?)
        })?;
    for n in numbers {
        let url = store.make_view(&store.array(name, n)?)?;
        print(out, &format!("{url}\n"))?;
    }
    Ok(())
}

/// Run `cmd` if its URL is `s3://`; `None` if it is not.
pub fn run(cmd: &ObjCmd) -> anyhow::Result<Option<ExitCode>> {
    let Some(url) = s3_url(cmd)? else {
        return Ok(None);
    };
    let mut stdout = std::io::stdout().lock();
    match cmd {
        ObjCmd::Init { .. } => {
            let s = S3Store::init(&url)?;
            print(&mut stdout, &format!("{}: an object store\n", s.url()))?;
        }
        ObjCmd::Ls { json, .. } => {
            let (store, _) = S3Store::locate(&url)?;
            let mut rows = Vec::new();
            for name in store.list()? {
                rows.push(info_json(&store, &store.array(&name, None)?)?);
            }
            let text = if *json {
                format!("{}\n", serde_json::Value::Array(rows))
            } else {
                rows.iter()
                    .map(|r| {
                        format!(
                            "{}  v{}  {} {}  chunks {}\n",
                            r["name"].as_str().unwrap_or(""),
                            r["version"],
                            r["dtype"].as_str().unwrap_or(""),
                            r["shape"],
                            r["chunks"]
                        )
                    })
                    .collect()
            };
            print(&mut stdout, &text)?;
        }
        ObjCmd::Info { version, .. } => {
            let (store, name) = object(&url)?;
            let j = info_json(&store, &store.array(&name, *version)?)?;
            // The same JSON as on a directory, without views; as text too.
            print(&mut stdout, &format!("{j}\n"))?;
        }
        ObjCmd::Get {
            out,
            version,
            slice,
            ..
        } => {
            let (store, name) = object(&url)?;
            let av = store.array(&name, *version)?;
            let (start, count) = parse_slice(slice.as_deref().unwrap_or(""), &av.meta.shape)?;
            // Read and verified whole before anything is written.
            let bytes = store.read(&av, &start, &count)?;
            if out.as_os_str() == "-" {
                match stdout.write_all(&bytes) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                    r => r.context("writing to standard output")?,
                }
            } else {
                std::fs::write(out, &bytes)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
        }
        ObjCmd::Verify { version, all, .. } => {
            let (store, name) = object(&url)?;
            let numbers = to_verify(*all, *version, || {
                Ok(store
                    .versions(&name)?
                    .iter()
                    .map(|v| (v.number, v.deleted))
                    .collect())
            })?;
            for n in numbers {
                let av = store.array(&name, n)?;
                store.verify_chunks(&av)?;
                if !store.view_made(&name, av.number)? {
                    bail!(
                        "{name} version {}: chunks verified, but the Zarr view is missing: {NOT_MADE}",
                        av.number
                    );
                }
                let view = store.check_view(&av)?;
                print(
                    &mut stdout,
                    &format!(
                        "{name} version {}: {} chunks verified; Zarr view {view} complete; no HDF5 view on S3\n",
                        av.number,
                        av.meta.n_chunks()
                    ),
                )?;
            }
        }
        ObjCmd::Put {
            file,
            array,
            local: Some(local),
            ..
        } => {
            let (store, name) = object(&url)?;
            let line = crate::obj::logged_put(&store.url(), &name, file, &array.meta()?, local)?;
            print(&mut stdout, &line)?;
        }
        ObjCmd::Put { file, array, .. } => {
            let (store, name) = object(&url)?;
            let data =
                std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
            let c = store.put(&name, &array.meta()?, &data)?;
            print(&mut stdout, &committed_line(&name, &c))?;
        }
        ObjCmd::Begin { array, .. } => {
            let (store, name) = object(&url)?;
            let put = store.begin(&name, &array.meta()?)?;
            print(&mut stdout, &format!("{}\n", id_hex(&put.id())))?;
        }
        ObjCmd::Write {
            id,
            file,
            chunks,
            slice,
            ..
        } => {
            let (store, name) = object(&url)?;
            let mut put = store.join(&name, &put_id(id)?)?;
            write_file(&mut put, file, chunks, slice.as_deref())?;
            put.finish()?;
        }
        ObjCmd::Commit { id, .. } => {
            let (store, name) = object(&url)?;
            let c = store.commit(&name, &put_id(id)?)?;
            print(&mut stdout, &committed_line(&name, &c))?;
        }
        ObjCmd::Abort { id, .. } => {
            let (store, name) = object(&url)?;
            let id = put_id(id)?;
            store.abort(&name, &id)?;
            print(
                &mut stdout,
                &format!("{name}: put {} aborted\n", id_hex(&id)),
            )?;
        }
        ObjCmd::Rm { .. } => {
            let (store, name) = object(&url)?;
            let n = store.delete(&name)?;
            print(&mut stdout, &format!("{name}: deleted as version {n}\n"))?;
        }
        ObjCmd::Gc { older_than, .. } => {
            let (store, _) = S3Store::locate(&url)?;
            let c = store.collect_abandoned(std::time::Duration::from_secs(*older_than))?;
            print(
                &mut stdout,
                &format!(
                    "{}: removed {} abandoned puts, {} chunk objects no version uses, {} Zarr views of versions gone or half made\n",
                    store.url(),
                    c.puts,
                    c.chunks,
                    c.views
                ),
            )?;
        }
        ObjCmd::Puts { .. } => bail!("{url}: `obj puts` of s3:// stores is not supported yet"),
        ObjCmd::View {
            version, missing, ..
        } => {
            let (store, name) = S3Store::locate(&url)?;
            let names = match (name, missing) {
                (Some(n), _) => vec![n],
                (None, true) => store.list()?,
                (None, false) => bail!("{url}: names a store, not an object (add /NAME, or --missing for every object)"),
            };
            for name in names {
                view(&store, &name, *version, *missing, &mut stdout)?;
            }
            eprintln!("paralog: no HDF5 view on s3:// (docs/objects.md \"S3\")");
        }
        ObjCmd::Publish { .. } => unreachable!("no URL"),
    }
    Ok(Some(ExitCode::SUCCESS))
}
