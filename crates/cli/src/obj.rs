//! `paralog obj init|ls|info|get|verify|put|begin|write|commit|abort|rm|puts|gc|view URL`, `publish L`:
//! array objects (crates/objects, docs/objects.md) from the command line.
//! The URL is a store (`objstore:///ROOT`, `/ROOT`) for `ls`, and a store
//! with an object's name below it (`objstore:///ROOT/NAME`) for the rest.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use paralog_backend::RemoteUrl;
use paralog_objects::{id_hex, parse_id, ArrayMeta, ArrayVersion, Attrs, DType, Store, ViewState};

pub(crate) use crate::obj_parse::{dims, parse_slice, write_file};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: ObjCmd,
}

#[derive(clap::Subcommand)]
pub(crate) enum ObjCmd {
    /// Lay out a new store in an existing directory (objstore:///ROOT or
    /// /ROOT), so that ROOT/NAME URLs find it.
    Init { url: String },
    /// The array objects of a store (objstore:///ROOT or /ROOT).
    Ls {
        url: String,
        #[arg(long)]
        json: bool,
    },
    /// An object's type, shape, chunks, attributes, versions and views.
    Info {
        url: String,
        #[arg(long)]
        version: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Write a version (or a hyperslab of it) as raw little-endian values,
    /// row-major, every chunk verified.
    Get {
        url: String,
        /// Where to write (`-`: standard output)
        out: PathBuf,
        #[arg(long)]
        version: Option<u64>,
        /// A hyperslab, numpy-like per dimension: `START:STOP`, `I`, `:`;
        /// dimensions left out are whole (e.g. `0:16,100:200`)
        #[arg(long)]
        slice: Option<String>,
    },
    /// Read every chunk of a version (default: the latest; --all: every
    /// version kept) and check it, and its Zarr and HDF5 views; exit 1 naming the
    /// object, version and chunk of the first failure.
    Verify {
        url: String,
        #[arg(long, conflicts_with = "all")]
        version: Option<u64>,
        #[arg(long)]
        all: bool,
    },
    /// PUT a whole array from a file of raw little-endian values.
    Put {
        url: String,
        file: PathBuf,
        #[command(flatten)]
        array: ArrayArgs,
        /// Logged: write the chunks to this node-local directory (the
        /// node server's --local) and commit there; the node server (or
        /// `paralog obj publish`, `paralog recover`) publishes the version
        #[arg(long)]
        local: Option<PathBuf>,
    },
    /// Publish the logged puts committed under a node-local directory now
    /// (what the node server does in the background); one line each.
    Publish { local: PathBuf },
    /// Begin a chunked PUT; prints its id for the writers.
    Begin {
        url: String,
        #[command(flatten)]
        array: ArrayArgs,
        /// Logged: the put is made in this node-local directory (its
        /// writers and commit give the same --local); crate::obj_logged
        #[arg(long)]
        local: Option<PathBuf>,
    },
    /// As one writer of a chunked PUT: write whole chunks, given as grid
    /// coordinates, from a file holding their bytes in the order given; or
    /// (--slice) any box of the array, from a file holding its values
    /// (chunks it covers in part are put together at the commit from the
    /// parts their writers wrote).
    Write {
        url: String,
        id: String,
        file: PathBuf,
        /// Grid coordinates of a chunk (repeatable), e.g. `--chunk 2,0`
        #[arg(long = "chunk", required_unless_present = "slice")]
        chunks: Vec<String>,
        /// A box of the array, as `get --slice` (e.g. `16:32,:`)
        #[arg(long, conflicts_with = "chunks")]
        slice: Option<String>,
        /// Logged: the put begun with this --local
        #[arg(long)]
        local: Option<PathBuf>,
    },
    /// Commit a chunked PUT once every writer is done; prints the version
    /// (logged: commits on this node; the node server publishes it).
    Commit {
        url: String,
        id: String,
        /// Logged: the put begun with this --local
        #[arg(long)]
        local: Option<PathBuf>,
    },
    /// Give up a chunked PUT: its chunks and staging directory removed.
    Abort {
        url: String,
        id: String,
        /// Logged: the put begun with this --local
        #[arg(long)]
        local: Option<PathBuf>,
    },
    /// Delete an object (a deletion becomes its latest version).
    Rm { url: String },
    /// The chunked puts in progress (never committed nor aborted): id,
    /// name, chunks claimed, writers finished, idle time.
    Puts { url: String },
    /// Remove chunked puts untouched for longer than --older-than (never
    /// committed nor aborted: their writers or program died), with their
    /// chunk files.
    Gc {
        url: String,
        /// Seconds; a put still being written must have touched its
        /// staging directory more recently than this
        #[arg(long, default_value_t = 3600)]
        older_than: u64,
    },
    /// (Re)make the Zarr and HDF5 views of a version; prints where they are.
    View {
        /// An object; with --missing also a whole store (every object).
        url: String,
        #[arg(long, conflicts_with = "missing")]
        version: Option<u64>,
        /// Every version kept whose views are missing (a failed view
        /// program, a process that ended before it made them).
        #[arg(long)]
        missing: bool,
    },
}

#[derive(clap::Args)]
pub(crate) struct ArrayArgs {
    /// int8..int64, uint8..uint64, float32, float64
    #[arg(long)]
    dtype: String,
    /// e.g. 64,4096
    #[arg(long)]
    shape: String,
    /// The chunk shape, e.g. 16,4096
    #[arg(long)]
    chunks: String,
    /// User attributes: a JSON object
    #[arg(long)]
    attrs: Option<String>,
}

impl ArrayArgs {
    pub(crate) fn meta(&self) -> anyhow::Result<ArrayMeta> {
        let dtype = DType::from_name(&self.dtype).ok_or_else(|| {
            anyhow!("--dtype {}: one of int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64", self.dtype)
        })?;
        let attrs: Attrs = match &self.attrs {
            Some(a) => serde_json::from_str(a).context("--attrs: not a JSON object")?,
            None => Attrs::new(),
        };
        Ok(ArrayMeta::new(dtype, &dims(&self.shape)?, &dims(&self.chunks)?).with_attrs(attrs))
    }
}

fn parse_url(url: &str) -> anyhow::Result<RemoteUrl> {
    url.parse().map_err(|e| anyhow!("{e}"))
}

/// The store and the object's name of `url`.
pub(crate) fn object(url: &str) -> anyhow::Result<(Store, String)> {
    let (store, name) = Store::locate(&parse_url(url)?)?;
    let name = name.ok_or_else(|| anyhow!("{url}: names a store, not an object (add /NAME)"))?;
    Ok((store, name))
}

/// A version's slab, read and verified whole before anything is written
/// (nothing partial reaches the output). The latest version may be
/// dropped by retention while it is read (newer commits with `keep=K`):
/// then the newest one is read instead, as `paralog get` does.
fn read_slab(
    store: &Store,
    name: &str,
    version: Option<u64>,
    slice: Option<&str>,
) -> anyhow::Result<Vec<u8>> {
    use paralog_backend::objstore::ObjError;
    use paralog_objects::Error;
    // A file of the version removed under us: its record or array record
    // (while the version is opened) or one of its chunks (while it is read).
    let vanished = |e: &Error| match e {
        Error::Store(ObjError::Io { error, .. }) => error.kind() == std::io::ErrorKind::NotFound,
        Error::Chunk { .. } | Error::NotFound { .. } => true,
        _ => false,
    };
    let latest = || -> anyhow::Result<u64> {
        let kept = store.versions(name)?;
        Ok(kept
            .last()
            .ok_or_else(|| anyhow!("{name}: no version published"))?
            .number)
    };
    for _ in 0..20 {
        let n = match version {
            Some(n) => n,
            None => latest()?,
        };
        // Only a version that is no longer the latest is read again: a
        // missing or damaged file of the latest one is an error.
        let replaced =
            |e: &Error| version.is_none() && vanished(e) && latest().is_ok_and(|l| l != n);
        let av = match store.array(name, Some(n)) {
            Ok(av) => av,
            Err(e) if replaced(&e) => {
                eprintln!("paralog: {e}; a newer version replaced it, reading that one");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let (start, count) = parse_slice(slice.unwrap_or(""), &av.meta.shape)?;
        match av.read(store, &start, &count) {
            Ok(bytes) => return Ok(bytes),
            Err(e) if replaced(&e) => {
                eprintln!("paralog: {e}; a newer version replaced it, reading that one")
            }
            Err(e) => return Err(e.into()),
        }
    }
    bail!("{name}: newer versions kept replacing the latest while it was read")
}

/// The versions `obj verify` reads: with `--all` every one not deleted
/// (`versions`: each one's number and whether it deletes), else the one
/// asked (`None`: the latest).
pub(crate) fn to_verify(
    all: bool,
    version: Option<u64>,
    versions: impl FnOnce() -> anyhow::Result<Vec<(u64, bool)>>,
) -> anyhow::Result<Vec<Option<u64>>> {
    if !all {
        return Ok(vec![version]);
    }
    Ok(versions()?
        .into_iter()
        .filter(|&(_, deleted)| !deleted)
        .map(|(n, _)| Some(n))
        .collect())
}

/// `obj put --local`: a whole array from `file`, logged under `local` for
/// the store `store_url` (a directory layout or S3); the line to print.
pub(crate) fn logged_put(
    store_url: &str,
    name: &str,
    file: &std::path::Path,
    meta: &ArrayMeta,
    local: &std::path::Path,
) -> anyhow::Result<String> {
    let data = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let logged = paralog_objects::LoggedStore::open(store_url, local)?;
    let id = logged.put(name, meta, &data)?;
    Ok(format!(
        "{name}: logged put {} committed in {}; published by the node server\n",
        id_hex(&id),
        local.display()
    ))
}

pub(crate) fn print(out: &mut dyn Write, text: &str) -> anyhow::Result<()> {
    match out.write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to standard output"),
    }
}

/// What `put` and `commit` print: the name, version number and id.
pub(crate) fn committed_line(name: &str, c: &paralog_objects::Committed) -> String {
    format!("{name} version {} id {}\n", c.number, id_hex(&c.id))
}

fn info_json(store: &Store, av: &ArrayVersion) -> anyhow::Result<serde_json::Value> {
    Ok(version_json(
        av,
        &store.versions(&av.name)?,
        Some(store.view_dir(&av.name, av.number)),
        Some(store.view_file(&av.name, av.number)).filter(|f| f.is_file()),
        Some(store.view_state(&av.name, av.number)),
    ))
}

/// `obj info --json` of one version, on any store: its views' paths, or
/// null where the store makes none (S3).
pub(crate) fn version_json(
    av: &ArrayVersion,
    versions: &[paralog_objects::VersionInfo],
    zarr: Option<PathBuf>,
    hdf5: Option<PathBuf>,
    views: Option<ViewState>,
) -> serde_json::Value {
    let versions: Vec<_> = versions
        .iter()
        .map(|v| serde_json::json!({"number": v.number, "id": id_hex(&v.id), "deleted": v.deleted}))
        .collect();
    let m = &av.meta;
    serde_json::json!({
        "name": av.name, "version": av.number, "id": id_hex(&av.id),
        "dtype": m.dtype.name(), "shape": m.shape, "chunks": m.chunks, "grid": m.grid(),
        "chunk_bytes": m.chunk_len(), "attributes": m.attrs, "versions": versions,
        "zarr": zarr, "hdf5": hdf5, "views": views.map(|v| match v {
            ViewState::Made => "made".to_owned(),
            ViewState::Pending => "pending (being made by the committing process)".to_owned(),
            ViewState::Missing(why) => format!("missing: {why}"),
        }),
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(done) = crate::obj_logged::run(&args.cmd)? {
        return Ok(done);
    }
    if let Some(done) = crate::obj_s3::run(&args.cmd)? {
        return Ok(done);
    }
    let mut stdout = std::io::stdout().lock();
    match args.cmd {
        ObjCmd::Init { url } => {
            let store = Store::init(&parse_url(&url)?)?;
            print(
                &mut stdout,
                &format!("{}: an object store\n", store.root().display()),
            )?;
        }
        ObjCmd::Ls { url, json } => {
            let (store, _) = Store::locate(&parse_url(&url)?)?;
            let mut rows = Vec::new();
            for name in store.list()? {
                rows.push(info_json(&store, &store.array(&name, None)?)?);
            }
            if json {
                print(
                    &mut stdout,
                    &format!("{}\n", serde_json::Value::Array(rows)),
                )?;
            } else {
                for r in rows {
                    print(
                        &mut stdout,
                        &format!(
                            "{}  v{}  {} {}  chunks {}\n",
                            r["name"].as_str().unwrap_or(""),
                            r["version"],
                            r["dtype"].as_str().unwrap_or(""),
                            r["shape"],
                            r["chunks"]
                        ),
                    )?;
                }
            }
        }
        ObjCmd::Info { url, version, json } => {
            let (store, name) = object(&url)?;
            let j = info_json(&store, &store.array(&name, version)?)?;
            let text = if json {
                format!("{j}\n")
            } else {
                let kept: Vec<String> = j["versions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| {
                        format!(
                            "{}{}",
                            v["number"],
                            if v["deleted"] == true {
                                " (deleted)"
                            } else {
                                ""
                            }
                        )
                    })
                    .collect();
                format!(
                    "name: {}\nversion: {} (id {})\nversions kept: {}\ndtype: {}\nshape: {}\nchunks: {} (grid {}, {} bytes each)\nattributes: {}\nviews: {}\nzarr view: {}\nhdf5 view: {}\n",
                    name, j["version"], j["id"].as_str().unwrap_or(""), kept.join(" "), j["dtype"].as_str().unwrap_or(""),
                    j["shape"], j["chunks"], j["grid"], j["chunk_bytes"], j["attributes"], j["views"].as_str().unwrap_or("none on this store"), j["zarr"].as_str().unwrap_or(""),
                    j["hdf5"].as_str().unwrap_or("none (paralog-h5view not found at the commit; `paralog obj view` makes it)")
                )
            };
            print(&mut stdout, &text)?;
        }
        ObjCmd::Get {
            url,
            out,
            version,
            slice,
        } => {
            let (store, name) = object(&url)?;
            let bytes = read_slab(&store, &name, version, slice.as_deref())?;
            if out.as_os_str() == "-" {
                match stdout.write_all(&bytes) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                    r => r.context("writing to standard output")?,
                }
            } else {
                std::fs::write(&out, &bytes)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
        }
        ObjCmd::Verify { url, version, all } => {
            let (store, name) = object(&url)?;
            let numbers = to_verify(all, version, || {
                Ok(store
                    .versions(&name)?
                    .iter()
                    .map(|v| (v.number, v.deleted))
                    .collect())
            })?;
            for n in numbers {
                let av = store.array(&name, n)?;
                av.verify_chunks(&store)?;
                let (view, h5) = crate::obj_view::check_views(&store, &av)?;
                print(
                    &mut stdout,
                    &format!(
                        "{name} version {}: {} chunks verified; Zarr view {} complete; {h5}\n",
                        av.number,
                        av.meta.n_chunks(),
                        view.display()
                    ),
                )?;
            }
        }
        ObjCmd::Put {
            url,
            file,
            array,
            local: Some(local),
        } => {
            let (store, name) = object(&url)?;
            let line = logged_put(&store.url(), &name, &file, &array.meta()?, &local)?;
            print(&mut stdout, &line)?;
        }
        ObjCmd::Publish { local } => crate::obj_publish::publish_command(&local, &mut stdout)?,
        ObjCmd::Put {
            url,
            file,
            array,
            local: None,
        } => {
            let (store, name) = object(&url)?;
            let data =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let c = store.put(&name, &array.meta()?, &data)?;
            print(&mut stdout, &committed_line(&name, &c))?;
            crate::obj_view::warn_views(&store, &name, c.number);
        }
        ObjCmd::Begin { url, array, .. } => {
            let (store, name) = object(&url)?;
            let put = store.begin(&name, &array.meta()?)?;
            print(&mut stdout, &format!("{}\n", id_hex(&put.id())))?;
        }
        ObjCmd::Write {
            url,
            id,
            file,
            chunks,
            slice,
            ..
        } => {
            let (store, name) = object(&url)?;
            let id = parse_id(&id).ok_or_else(|| anyhow!("{id}: not a put id (32 hex digits)"))?;
            let mut put = store.join(&name, &id)?;
            write_file(&mut put, &file, &chunks, slice.as_deref())?;
            put.finish()?;
        }
        ObjCmd::Commit { url, id, .. } => {
            let (store, name) = object(&url)?;
            let id = parse_id(&id).ok_or_else(|| anyhow!("{id}: not a put id (32 hex digits)"))?;
            let c = store.commit(&name, &id)?;
            print(&mut stdout, &committed_line(&name, &c))?;
            crate::obj_view::warn_views(&store, &name, c.number);
        }
        ObjCmd::Abort { url, id, .. } => {
            let (store, name) = object(&url)?;
            let id = parse_id(&id).ok_or_else(|| anyhow!("{id}: not a put id (32 hex digits)"))?;
            store.abort(&name, &id)?;
            print(
                &mut stdout,
                &format!("{name}: put {} aborted\n", id_hex(&id)),
            )?;
        }
        ObjCmd::Rm { url } => {
            let (store, name) = object(&url)?;
            let n = store.delete(&name)?;
            print(&mut stdout, &format!("{name}: deleted as version {n}\n"))?;
        }
        ObjCmd::Puts { url } => {
            let (store, _) = Store::locate(&parse_url(&url)?)?;
            for p in store.puts()? {
                let state = match (p.logged, p.published, p.publishing) {
                    _ if p.half_removed => ", half removed (`obj gc` removes it)".to_owned(),
                    (true, ..) => ", logged (the node server publishes it)".to_owned(),
                    (_, Some(n), _) => {
                        format!(", published as version {n} (`obj commit` cleans up)")
                    }
                    (_, None, true) => ", publishing (`obj commit` publishes it)".to_owned(),
                    _ => String::new(),
                };
                let line = format!(
                    "{} {}: {}/{} chunks, {} writers finished{state}, idle {} s\n",
                    id_hex(&p.id),
                    p.name,
                    p.claimed,
                    p.chunks,
                    p.finished,
                    p.idle.as_secs()
                );
                print(&mut stdout, &line)?;
            }
        }
        ObjCmd::Gc { url, older_than } => {
            let (store, _) = Store::locate(&parse_url(&url)?)?;
            let n = store.collect_abandoned(std::time::Duration::from_secs(older_than))?;
            print(
                &mut stdout,
                &format!("{}: removed {n} abandoned puts\n", store.root().display()),
            )?;
        }
        ObjCmd::View {
            url,
            version,
            missing,
        } => {
            let (store, name) = Store::locate(&parse_url(&url)?)?;
            // A store with --missing: every object's missing views (after
            // a crash of programs that put directly).
            let names = match (name, missing) {
                (Some(n), _) => vec![n],
                (None, true) => store.list()?,
                (None, false) => bail!("{url}: names a store, not an object (add /NAME, or --missing for every object)"),
            };
            for name in names {
                crate::obj_view::view(&store, &name, version, missing, &mut stdout)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
