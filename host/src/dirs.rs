//! Directories the host creates for a job (checkpoints, savepoints, sink
//! output), with an error that says what is in the way; and paths compared
//! by the place they name, not by their spelling.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Creates `dir` and its parents, like `std::fs::create_dir_all`; when a
/// file stands where a directory must go, the error names that file
/// instead of saying only "File exists" or "Not a directory".
pub fn create(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir).map_err(|error| match obstacle(dir) {
        Some(why) => io::Error::new(error.kind(), why),
        None => error,
    })
}

/// What keeps `dir` from being a directory, said for the user: a file at
/// it or at one of its ancestors, or a symbolic link to nothing; `None`
/// if it is one, or can be created.
pub fn obstacle(dir: &Path) -> Option<String> {
    for path in dir.ancestors().filter(|path| !path.as_os_str().is_empty()) {
        let Ok(metadata) = std::fs::symlink_metadata(path) else { continue };
        if metadata.file_type().is_symlink() && !path.exists() {
            let target = std::fs::read_link(path).unwrap_or_default();
            return Some(format!(
                "{} is a symbolic link to {}, which does not exist: create that, or point the link elsewhere",
                path.display(),
                target.display()
            ));
        }
        return (!path.is_dir()).then(|| {
            format!("{} is a file where a directory must go: move it away, or choose another path", path.display())
        });
    }
    None
}

/// Writes `bytes` to `path` whole and durably: to a temporary file beside
/// it, synced, renamed into place, and the directory synced — so that after
/// a crash `path` holds either its old content or all of the new. The
/// temporary file is named for this process: two hosts may write the same
/// file at once (the compiled-plugin cache), the last rename winning. The
/// temporary files of processes killed while writing `path` are removed.
pub fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".tmp{}", std::process::id()));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()?;
    remove_temporaries_of_ended_processes(dir, path);
    Ok(())
}

/// Removes the `PATH.tmpPID` files in `dir` of processes that no longer run
/// (killed between creating and renaming one): nothing else removes them.
/// Only where `/proc` tells which processes run; a temporary of a running
/// process — another host writing the same file — is left alone.
fn remove_temporaries_of_ended_processes(dir: &Path, path: &Path) {
    let Some(name) = path.file_name() else { return };
    let prefix = format!("{}.tmp", name.to_string_lossy());
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let file_name = entry.file_name();
        let pid = file_name.to_string_lossy().strip_prefix(&prefix).and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(process_ended) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// This process's own directory for working files under `base` (the
/// temporary directory, which all hosts share): `base/host-ID`, locked for
/// the process's life. Made on first use, when the directories of hosts
/// that ended — killed, or in another container sharing the directory —
/// are removed: their locks are free. (A pid would not tell: another PID
/// namespace's processes are not in this `/proc`.)
pub fn process_dir(base: &Path) -> io::Result<&'static Path> {
    static DIR: std::sync::OnceLock<(PathBuf, std::fs::File)> = std::sync::OnceLock::new();
    if let Some((dir, _)) = DIR.get() {
        return Ok(dir);
    }
    create(base)?;
    remove_dirs_of_ended_hosts(base);
    let id = unique_name();
    // Locked before it gets the name another host's clean-up looks at.
    let making = base.join(format!(".{HOST_DIR_PREFIX}{id}"));
    create(&making)?;
    let lock = try_lock_file(&making.join(HOST_DIR_LOCK))?.ok_or_else(|| io::Error::other("a fresh directory's lock is taken"))?;
    let dir = base.join(format!("{HOST_DIR_PREFIX}{id}"));
    std::fs::rename(&making, &dir)?;
    Ok(&DIR.get_or_init(|| (dir, lock)).0)
}

/// What the names of [`process_dir`]s begin with, and the file in each
/// that its host holds locked.
const HOST_DIR_PREFIX: &str = "host-";
const HOST_DIR_LOCK: &str = "LOCK";

/// Removes the [`process_dir`]s in `base` whose lock no process holds.
fn remove_dirs_of_ended_hosts(base: &Path) {
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        if !entry.file_name().to_string_lossy().starts_with(HOST_DIR_PREFIX) {
            continue;
        }
        if let Ok(Some(_free)) = try_lock_file(&entry.path().join(HOST_DIR_LOCK)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A name no other process, nor this one at another time, makes:
/// `PID-NANOS-N`, the process, the time in ns and a counter. State backends
/// name the files they share between checkpoints with it, hosts their
/// working directories and announcements.
pub fn unique_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{nanos:x}-{next}", std::process::id())
}

/// Whether process `pid` has ended, as far as `/proc` tells (where there is
/// none, no process is taken for ended). A pid used again by another
/// process is taken for running.
fn process_ended(pid: u32) -> bool {
    Path::new("/proc/self").exists() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// Locks file `path` (creating it) for this process, as long as the file
/// returned is open: an advisory lock of the operating system, so a killed
/// process leaves none behind. `Ok(None)` if another holder (in this
/// process or another) has it.
pub fn try_lock_file(path: &Path) -> io::Result<Option<std::fs::File>> {
    let named = |error: io::Error| io::Error::new(error.kind(), format!("cannot lock {}: {error}", path.display()));
    let file = std::fs::File::options().create(true).truncate(false).write(true).open(path).map_err(named)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(error)) => Err(named(error)),
    }
}

/// The random id in `dir`'s `LINEAGE` file, made when it is first asked
/// for: what was written under one directory carries it, so that what was
/// copied in from another is told apart.
pub fn lineage(dir: &Path) -> io::Result<String> {
    let path = dir.join(LINEAGE_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) => Ok(id.trim().to_owned()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            use sha2::Digest;
            let seed = format!("{}-{:?}-{:?}", std::process::id(), std::time::SystemTime::now(), dir);
            let id: String = sha2::Sha256::digest(seed.as_bytes())[..16].iter().map(|b| format!("{b:02x}")).collect();
            write_durably(&path, id.as_bytes())?;
            Ok(id)
        }
        Err(error) => Err(error),
    }
}

/// Whether files can be made in `dir`: a file made there and removed. A
/// directory made read-only (or on a file system mounted so) would
/// otherwise be found out only when the first checkpoint fails.
pub fn check_writable(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!(".write-check-{}", std::process::id()));
    std::fs::File::options().write(true).create(true).truncate(true).open(&probe)?;
    std::fs::remove_file(&probe)
}

/// Writes `id` as `dir`'s lineage: a lost `LINEAGE` restored.
pub fn write_lineage(dir: &Path, id: &str) -> io::Result<()> {
    write_durably(&dir.join(LINEAGE_FILE), id.as_bytes())
}

/// Whether `id` is a lineage as [`lineage`] makes them: 32 lowercase hex
/// digits. Anything else in a `LINEAGE` file is damage.
pub fn is_lineage_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `dir`'s lineage if it has one already (see [`lineage`]).
pub fn known_lineage(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(LINEAGE_FILE)).ok().map(|id| id.trim().to_owned())
}

use crate::checkpoint::layout::LINEAGE as LINEAGE_FILE;

/// The checkpoint directory `dir` lies inside, if any: the nearest
/// ancestor with a `LINEAGE`. Its job owns what is in it — it deletes the
/// shared files and checkpoints it no longer needs, and what it does not
/// know — so another job's checkpoints there would be lost.
pub fn enclosing_checkpoint_dir(dir: &Path) -> Option<PathBuf> {
    resolved(dir).parent().and_then(checkpoint_dir_holding)
}

/// The checkpoint directory `path` is, or lies inside, if any (see
/// [`enclosing_checkpoint_dir`]).
pub fn checkpoint_dir_holding(path: &Path) -> Option<PathBuf> {
    resolved(path).ancestors().find(|dir| dir.join(LINEAGE_FILE).is_file()).map(Path::to_path_buf)
}

/// Reads the regular file at `path`, of at most `max` bytes: a device
/// (`/dev/zero`), a pipe or a file larger than that is refused rather than
/// read into memory without end.
pub fn read_file_of_at_most(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let not_regular = || io::Error::new(io::ErrorKind::InvalidInput, "it is not a regular file");
    // Looked at before it is opened: opening a named pipe waits for a writer.
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(not_regular());
    }
    let too_large = || io::Error::new(io::ErrorKind::InvalidInput, format!("it is larger than {} MiB", max >> 20));
    if metadata.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // Bounded too while reading: the file may grow meanwhile.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `path` made absolute against the working directory (as it is, if that
/// cannot be read).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The place `path` names, for comparing two paths: absolute, with `.` and
/// `..` taken out and the links of its longest existing ancestor resolved
/// (`out/x/../alerts`, `./out/alerts` and a link to `out` are one place).
pub fn resolved(path: &Path) -> PathBuf {
    let absolute = absolute(path);
    let mut lexical = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut missing = Vec::new();
    let mut base = lexical.as_path();
    loop {
        if let Ok(real) = base.canonicalize() {
            return missing.iter().rev().fold(real, |path, part| path.join(part));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                base = parent;
            }
            _ => return lexical,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_removes_the_temporaries_that_killed_processes_left() {
        let dir = std::env::temp_dir().join(format!("weir-durable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // No process has a pid above the kernel's largest (4 194 304).
        let ended = dir.join("MANIFEST.tmp4294967");
        let running = dir.join("MANIFEST.tmp1");
        let other = dir.join("OTHER.tmp4294967");
        for file in [&ended, &running, &other] {
            std::fs::write(file, "half").unwrap();
        }
        write_durably(&dir.join("MANIFEST"), b"whole").unwrap();
        assert_eq!(std::fs::read(dir.join("MANIFEST")).unwrap(), b"whole");
        assert!(!ended.exists(), "an ended process's temporary is removed");
        assert!(running.exists() && other.exists(), "a running process's, and another file's, are not");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The directories of hosts that ended are removed, whichever PID
    /// namespace they ran in: their locks are free (by pid, a host in
    /// another container was taken for ended, and its working databases
    /// deleted under it: found by the re-audit).
    #[test]
    fn the_directories_of_hosts_that_ended_are_removed() {
        let base = tempfile::tempdir().unwrap();
        for name in ["host-running", "host-ended", "other"] {
            std::fs::create_dir(base.path().join(name)).unwrap();
            std::fs::write(base.path().join(name).join("LOCK"), "").unwrap();
        }
        let _held = try_lock_file(&base.path().join("host-running/LOCK")).unwrap().expect("free");
        remove_dirs_of_ended_hosts(base.path());
        let mut left: Vec<String> =
            std::fs::read_dir(base.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["host-running", "other"]);
    }

    #[test]
    fn one_place_spelt_several_ways_resolves_alike() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let place = resolved(&real.join("out"));
        for spelling in ["real/x/../out", "real/./out", "link/out", "real/out/"] {
            assert_eq!(resolved(&dir.path().join(spelling)), place, "{spelling}");
        }
        assert_ne!(resolved(&dir.path().join("real/other")), place);
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("taken");
        std::fs::write(&file, "").unwrap();
        for dir in [file.clone(), file.join("below")] {
            let error = create(&dir).unwrap_err().to_string();
            assert!(error.contains(&format!("{} is a file where a directory must go", file.display())), "{error}");
        }
        create(&root.path().join("a/b")).unwrap();
        assert!(root.path().join("a/b").is_dir());
    }
}
