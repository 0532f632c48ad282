//! Where the hosts on this machine announce their control API, so that the
//! commands find a job's host without `--api` — also a host that could not
//! take the default address because another host had it.
//!
//! Each `weir run` writes one file into a directory of the user's own —
//! `$XDG_RUNTIME_DIR/weir`, else `weir-UID` in the temporary directory —
//! named by its process id and holding its address, and removes it when
//! it ends (as Jupyter lists its servers). A host killed leaves its file
//! behind: readers pass over, and delete, files of processes that are gone.
//! A directory another user owns is not used.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A host's announcement, withdrawn when dropped.
#[derive(Debug)]
pub struct Announcement {
    path: PathBuf,
}

impl Announcement {
    /// Announces that this process serves the control API at `addr`; none
    /// if the directory cannot be used (the host runs on, found by its
    /// address alone, as it says at start).
    pub fn publish(addr: std::net::SocketAddr) -> Option<Announcement> {
        let dir = own_dir(true)?;
        let path = dir.join(format!("{}.api", std::process::id()));
        match crate::dirs::write_durably(&path, addr.to_string().as_bytes()) {
            Ok(()) => Some(Announcement { path }),
            Err(error) => {
                tracing::debug!(file = %path.display(), %error, "cannot announce the control API's address");
                None
            }
        }
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The addresses the running hosts of this user announced, oldest process
/// first.
pub fn announced() -> Vec<String> {
    let Some(dir) = own_dir(false) else { return Vec::new() };
    let mut hosts: Vec<(u32, String)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.strip_suffix(".api")?.parse().ok()?;
            if !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = std::fs::remove_file(entry.path());
                return None;
            }
            let addr = std::fs::read_to_string(entry.path()).ok()?;
            Some((pid, addr.trim().to_owned()))
        })
        .collect();
    hosts.sort();
    hosts.into_iter().map(|(_, addr)| addr).collect()
}

/// The announcements' directory, made if `create` (private to the user),
/// if it is the user's own.
fn own_dir(create: bool) -> Option<PathBuf> {
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("weir"),
        None => std::env::temp_dir().join(format!("weir-{uid}")),
    };
    if create {
        let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir);
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    let private = meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o022 == 0;
    if !private {
        tracing::debug!(dir = %dir.display(), "not using the hosts' directory: another user's, or writable by others");
    }
    private.then_some(dir)
}
