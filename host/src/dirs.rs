//! Directories the host creates for a job (checkpoints, savepoints, sink
//! output), with an error that says what is in the way.

use std::io;
use std::path::Path;

/// Creates `dir` and its parents, like `std::fs::create_dir_all`; when a
/// file stands where a directory must go, the error names that file
/// instead of saying only "File exists" or "Not a directory".
pub fn create(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir).map_err(|error| match file_in_the_way(dir) {
        Some(file) => io::Error::new(
            error.kind(),
            format!("{} is a file where a directory must go: move it away, or choose another path", file.display()),
        ),
        None => error,
    })
}

/// The first of `dir` and its ancestors that exists and is not a directory.
fn file_in_the_way(dir: &Path) -> Option<&Path> {
    dir.ancestors().filter(|path| !path.as_os_str().is_empty()).find(|path| path.exists() && !path.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

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
