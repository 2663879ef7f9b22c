//! `paralog obj view URL [--version V | --missing]`, and the warning after a
//! commit whose views could not be made (docs/objects.md "Views").

use std::io::Write;

use std::path::PathBuf;

use paralog_objects::{hdf5, views, zarr, ArrayVersion, Store, VersionInfo, ViewState};

use crate::obj::print;

/// After a commit: a version whose views could not be made is published
/// all the same (exit 0), and the reason goes to standard error. A version
/// that retention dropped since (a retried commit's, with `keep=K`) needs
/// none.
pub(crate) fn warn_views(store: &Store, name: &str, number: u64) {
    if let ViewState::Missing(why) = store.view_state(name, number) {
        let kept = store
            .versions(name)
            .map_or(true, |vs| vs.iter().any(|v| v.number == number));
        if kept {
            eprintln!("paralog: warning: {why}");
        }
    }
}

/// Make the views of one version (default: the latest), or of every
/// version kept whose views are missing; print where they are.
pub(crate) fn view(
    store: &Store,
    name: &str,
    version: Option<u64>,
    missing: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let numbers = to_view(name, version, missing, store.versions(name)?, out, |n| {
        Ok(matches!(store.view_state(name, n), ViewState::Missing(_)))
    })?;
    for n in numbers {
        let av = store.array(name, n)?;
        let (dir, h5) = views::make_views(store, &av)?;
        print(out, &format!("{}\n", dir.display()))?;
        match h5 {
            Some(f) => print(out, &format!("{}\n", f.display()))?,
            None => eprintln!(
                "paralog: no HDF5 view: {} not found next to paralog (or set PARALOG_H5VIEW)",
                hdf5::HELPER
            ),
        }
    }
    Ok(())
}

/// The versions whose views `obj view` makes, on any store: the one asked
/// for (`None`: the latest), or with `missing` every version kept whose
/// views `lacks` (saying so when there is none).
pub(crate) fn to_view(
    name: &str,
    version: Option<u64>,
    missing: bool,
    kept: Vec<VersionInfo>,
    out: &mut dyn Write,
    lacks: impl Fn(u64) -> anyhow::Result<bool>,
) -> anyhow::Result<Vec<Option<u64>>> {
    if !missing {
        return Ok(vec![version]);
    }
    let mut numbers = Vec::new();
    for v in kept.iter().filter(|v| !v.deleted) {
        if lacks(v.number)? {
            numbers.push(Some(v.number));
        }
    }
    if numbers.is_empty() {
        print(out, &format!("{name}: no version kept misses its views\n"))?;
    }
    Ok(numbers)
}

/// `obj verify`'s check of a version's views: the Zarr view's directory
/// and what to say of the HDF5 view. Views pending or missing are an
/// error saying so (and why), not "no such file".
pub(crate) fn check_views(store: &Store, av: &ArrayVersion) -> anyhow::Result<(PathBuf, String)> {
    let state = store.view_state(&av.name, av.number);
    if let ViewState::Pending | ViewState::Missing(_) = state {
        anyhow::bail!(
            "{} version {}: chunks verified, but the views are {}",
            av.name,
            av.number,
            match state {
                ViewState::Missing(why) => format!("missing: {why}"),
                _ => "pending: being made by the committing process".into(),
            }
        );
    }
    let view = zarr::check_view(store, av)?;
    let h5 = match hdf5::check_view(store, av)? {
        Some(f) => format!("HDF5 view {} complete", f.display()),
        None => "no HDF5 view".into(),
    };
    Ok((view, h5))
}
