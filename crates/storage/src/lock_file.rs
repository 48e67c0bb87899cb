//! The data directory's lock file, `dbpath/mongod.lock`.
//!
//! An exclusive `flock` on the file for as long as the engine runs keeps a
//! second process (or a second engine in the same process: `flock` locks
//! belong to the open file description) away from the same files. The
//! file holds the owner's pid for people looking at the directory; the
//! lock, not the content, is what counts, so a stale file left by a killed
//! process never blocks a restart.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::io::IoBackend;
use crate::StorageError;

pub const LOCK_FILE_NAME: &str = "mongod.lock";

/// Creates the data directory (and any missing parent) if needed. Each
/// directory created here has its name made durable by an fsync of its
/// parent: otherwise a power loss could take the whole data directory
/// away after writes in it were acknowledged.
pub fn create_data_directory(io: &dyn IoBackend, dbpath: &Path) -> Result<(), StorageError> {
    let mut created = Vec::new();
    let mut missing = Some(dbpath);
    while let Some(dir) = missing.filter(|dir| !dir.as_os_str().is_empty()) {
        if io.exists(dir)? {
            break;
        }
        created.push(dir);
        missing = dir.parent();
    }
    io.create_dir_all(dbpath)?;
    for dir in created {
        let parent = dir.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        io.sync_dir(parent)?;
    }
    Ok(())
}

#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
    /// The data directory itself, locked too: a lock file someone deleted
    /// would otherwise let a second process create a new one and lock it,
    /// and both would write the same checkpoint file. A directory cannot
    /// be swapped while it holds the data.
    _directory: Option<File>,
}

/// An exclusive `flock` on the data directory (`None` where the file
/// system does not lock directories; the lock file still guards it).
fn lock_directory(dbpath: &Path) -> Result<Option<File>, StorageError> {
    let directory = File::open(dbpath)?;
    // SAFETY: flock on a file descriptor we own; it has no memory effects.
    let result = unsafe { libc::flock(directory.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if result == 0 {
        return Ok(Some(directory));
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Err(StorageError::DataDirectoryLocked(format!(
            "Unable to lock the data directory {} (Resource temporarily unavailable). Another slipstream process \
             is using this dbpath",
            dbpath.display()
        )));
    }
    Ok(None)
}

impl LockFile {
    /// Takes the lock on an existing data directory (see
    /// `create_data_directory`), or fails with `DataDirectoryLocked` when
    /// another holder has it.
    pub fn acquire(dbpath: &Path) -> Result<LockFile, StorageError> {
        let path = dbpath.join(LOCK_FILE_NAME);
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        // SAFETY: flock on a file descriptor we own; it has no memory effects.
        let result = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if result != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(StorageError::DataDirectoryLocked(format!(
                    "Unable to lock the lock file: {} (Resource temporarily unavailable). Another slipstream process is using this dbpath ({})",
                    path.display(),
                    dbpath.display()
                )));
            }
            return Err(StorageError::Io(err));
        }
        let directory = lock_directory(dbpath)?;
        file.set_len(0)?;
        (&file).write_all(format!("{}\n", std::process::id()).as_bytes())?;
        file.sync_all()?;
        Ok(LockFile { file, path, _directory: directory })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // An empty lock file marks a clean shutdown, as MongoDB's does; the
        // flock itself goes with the descriptor.
        let _ = self.file.set_len(0);
        let _ = self.file.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_until_the_first_releases() {
        let dir = tempfile::tempdir().unwrap();
        let first = LockFile::acquire(dir.path()).unwrap();
        assert!(dir.path().join(LOCK_FILE_NAME).exists());
        match LockFile::acquire(dir.path()) {
            Err(StorageError::DataDirectoryLocked(message)) => {
                assert!(message.contains("Another slipstream process is using this dbpath"), "{message}");
            }
            other => panic!("expected DataDirectoryLocked, got {other:?}"),
        }
        drop(first);
        LockFile::acquire(dir.path()).unwrap();
    }
}
