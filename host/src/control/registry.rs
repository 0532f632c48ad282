//! Where the hosts on this machine announce their control API, so that the
//! commands find a job's host without `--api` — also a host that could not
//! take the default address because another host had it.
//!
//! Each `weir run` writes one file into a directory of the user's own —
//! `$XDG_RUNTIME_DIR/weir`, else `weir-UID` in the temporary directory —
//! named by its process id (and more, `PID-NANOS-N.api`) and holding its
//! address, and removes it when it ends (as Jupyter lists its servers).
//! Beside it the host holds a lock on `PID-NANOS-N.lock` for its life, taken
//! before the address is written: a host killed leaves its files behind,
//! and readers pass over, and delete, those whose lock is free. (Not by
//! its pid: a host in another PID namespace — a container sharing the
//! directory — is not in this `/proc`, and a pid is used again.) A
//! directory another user owns is not used.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A host's announcement, withdrawn when dropped.
#[derive(Debug)]
pub struct Announcement {
    path: PathBuf,
    lock_path: PathBuf,
    _lock: std::fs::File,
}

impl Announcement {
    /// Announces that this process serves the control API at `addr`; none
    /// if the directory cannot be used (the host runs on, found by its
    /// address alone, as it says at start).
    pub fn publish(addr: std::net::SocketAddr) -> Option<Announcement> {
        publish_in(&own_dir(true)?, addr)
    }
}

fn publish_in(dir: &Path, addr: std::net::SocketAddr) -> Option<Announcement> {
    let stem = crate::dirs::unique_name();
    let (path, lock_path) = (dir.join(format!("{stem}.api")), dir.join(format!("{stem}.lock")));
    let announced = crate::dirs::try_lock_file(&lock_path)
        .and_then(|lock| lock.ok_or_else(|| std::io::Error::other("its lock is taken")))
        .and_then(|lock| crate::dirs::write_durably(&path, addr.to_string().as_bytes()).map(|()| lock));
    match announced {
        Ok(lock) => Some(Announcement { path, lock_path, _lock: lock }),
        Err(error) => {
            tracing::debug!(file = %path.display(), %error, "cannot announce the control API's address");
            None
        }
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// The addresses the running hosts of this user announced, oldest process
/// first.
pub fn announced() -> Vec<String> {
    own_dir(false).map(|dir| announced_in(&dir)).unwrap_or_default()
}

fn announced_in(dir: &Path) -> Vec<String> {
    let mut hosts: Vec<(u32, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let stem = entry.file_name().to_str()?.strip_suffix(".api")?.to_owned();
            let pid: u32 = stem.split('-').next()?.parse().ok()?;
            if host_ended(dir, &stem, pid) {
                let _ = std::fs::remove_file(entry.path());
                let _ = std::fs::remove_file(dir.join(format!("{stem}.lock")));
                return None;
            }
            let addr = std::fs::read_to_string(entry.path()).ok()?;
            Some((pid, addr.trim().to_owned()))
        })
        .collect();
    hosts.sort();
    hosts.into_iter().map(|(_, addr)| addr).collect()
}

/// Whether the host that announced `STEM.api` has ended: its lock is free
/// — or, for an announcement of a Weir before the locks (`PID.api`), its
/// process is gone.
fn host_ended(dir: &Path, stem: &str, pid: u32) -> bool {
    let lock_path = dir.join(format!("{stem}.lock"));
    if !lock_path.exists() {
        return !Path::new("/proc").join(pid.to_string()).exists();
    }
    matches!(crate::dirs::try_lock_file(&lock_path), Ok(Some(_)))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A host is listed while it holds its lock, whatever its pid says,
    /// and its files are removed once the lock is free (by pid, a command
    /// in another PID namespace deleted a running host's announcement).
    #[test]
    fn hosts_are_listed_while_they_hold_their_lock() {
        let dir = tempfile::tempdir().unwrap();
        let live = publish_in(dir.path(), "127.0.0.1:7071".parse().unwrap()).expect("announced");
        // A host no pid of this /proc names (another namespace's), alive,
        // and one killed, whose lock nobody holds.
        std::fs::write(dir.path().join("4294967-a.api"), "127.0.0.1:7072").unwrap();
        let _theirs = crate::dirs::try_lock_file(&dir.path().join("4294967-a.lock")).unwrap().expect("free");
        std::fs::write(dir.path().join("1-b.api"), "127.0.0.1:7073").unwrap();
        std::fs::write(dir.path().join("1-b.lock"), "").unwrap();
        let mut listed = announced_in(dir.path());
        listed.sort();
        assert_eq!(listed, ["127.0.0.1:7071", "127.0.0.1:7072"]);
        assert!(!dir.path().join("1-b.api").exists() && !dir.path().join("1-b.lock").exists(), "the killed host's are removed");
        drop(live);
        assert_eq!(announced_in(dir.path()), ["127.0.0.1:7072"], "withdrawn when dropped");
    }
}
