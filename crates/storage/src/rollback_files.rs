//! Rollback files: the documents a rollback undoes, saved before the undo
//! as MongoDB saves them, so that an operator can read them back (`bsondump`,
//! any BSON library) and re-apply what still matters.
//!
//! Layout: `<dbpath>/rollback/<db>.<collection>/removed.<time>.bson`, each
//! file the concatenated BSON of the documents of one namespace as they were
//! on this member just before the rollback. `<time>` is the rollback's wall
//! date in UTC (`2026-11-24T13-05-07.123`), with a `.N` suffix when a file of
//! that name already exists (two rollbacks in one millisecond), so a file is
//! never overwritten.
//!
//! A file is complete and durable before `write` returns: written under a
//! temporary name, fsynced, renamed, and its directory (and, when new, the
//! directories above it) fsynced. A crash in the middle leaves at most a
//! `.tmp` file, never a half file under the final name.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bson::Document;

use crate::StorageError;

/// The directory under the dbpath.
pub const ROLLBACK_DIR_NAME: &str = "rollback";
/// Most files of one name tried before giving up (`.1` .. `.N`).
const SAME_NAME_FILES_MAX: usize = 1_000;
const TEMP_SUFFIX: &str = ".tmp";

type Result<T> = std::result::Result<T, StorageError>;

/// `removed.<time>.bson` for a rollback at `wall_ms` (ms since the epoch).
pub fn file_stem(wall_ms: i64) -> String {
    let date = bson::DateTime::from_millis(wall_ms)
        .try_to_rfc3339_string()
        .unwrap_or_else(|_| wall_ms.to_string());
    // 2026-11-24T13:05:07.123Z -> 2026-11-24T13-05-07.123: colons are not
    // portable in file names.
    let date = date.trim_end_matches('Z').replace(':', "-");
    format!("removed.{date}")
}

/// The directory a namespace's rollback files go to: the namespace, with
/// the characters a file name cannot hold (`/`, `\\`, NUL, `%`, and a
/// leading `.`) written `%XX` (a collection name may hold a `/`).
pub fn namespace_dir(dbpath: &Path, ns: &str) -> Result<PathBuf> {
    if ns.is_empty() {
        return Err(StorageError::InvalidNamespace(
            "no rollback directory for an empty namespace".into(),
        ));
    }
    let mut name = String::with_capacity(ns.len());
    for (i, c) in ns.chars().enumerate() {
        match c {
            '/' | '\\' | '\0' | '%' => name.push_str(&format!("%{:02X}", c as u32)),
            '.' if i == 0 => name.push_str("%2E"),
            c => name.push(c),
        }
    }
    Ok(dbpath.join(ROLLBACK_DIR_NAME).join(name))
}

/// Writes `documents` (in order) as one new file of namespace `ns`; returns
/// its path. Durable before it returns.
pub fn write(dbpath: &Path, ns: &str, wall_ms: i64, documents: &[Document]) -> Result<PathBuf> {
    let mut file = RollbackFile::create(dbpath, ns, wall_ms)?;
    for document in documents {
        file.append(document)?;
    }
    file.finish()
}

/// One rollback file being written: documents are appended as they are
/// read, so a large rollback never holds its documents in memory.
pub struct RollbackFile {
    dir: PathBuf,
    path: PathBuf,
    temp: PathBuf,
    file: std::io::BufWriter<File>,
    documents: u64,
}

impl RollbackFile {
    /// Creates the namespace's directory (durably) and a temporary file.
    pub fn create(dbpath: &Path, ns: &str, wall_ms: i64) -> Result<RollbackFile> {
        let dir = namespace_dir(dbpath, ns)?;
        create_dir_durably(dbpath, &dir)?;
        remove_unfinished(&dir)?;
        let path = free_name(&dir, &file_stem(wall_ms))?;
        let temp = path.with_extension(format!("bson{TEMP_SUFFIX}"));
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(&temp)?;
        Ok(RollbackFile {
            dir,
            path,
            temp,
            file: std::io::BufWriter::new(file),
            documents: 0,
        })
    }

    pub fn append(&mut self, document: &Document) -> Result<()> {
        let mut bytes = Vec::new();
        document
            .to_writer(&mut bytes)
            .map_err(|err| StorageError::Io(std::io::Error::other(err.to_string())))?;
        self.file.write_all(&bytes)?;
        self.documents += 1;
        Ok(())
    }

    pub fn documents(&self) -> u64 {
        self.documents
    }

    /// Flushes, fsyncs, renames to the final name and fsyncs the directory.
    pub fn finish(self) -> Result<PathBuf> {
        let file = self
            .file
            .into_inner()
            .map_err(|err| StorageError::Io(err.into_error()))?;
        file.sync_all()?;
        drop(file);
        fs::rename(&self.temp, &self.path)?;
        File::open(&self.dir)?.sync_all()?;
        Ok(self.path)
    }
}

/// Removes the temporary files an earlier attempt left unfinished (a
/// rollback that failed, for lack of space say, before its rename): never
/// a record of anything, and the rollback that follows writes its own.
fn remove_unfinished(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.to_string_lossy().ends_with(&format!(".bson{TEMP_SUFFIX}")) {
            fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// `stem.bson`, or `stem.N.bson` for the first N that is free.
fn free_name(dir: &Path, stem: &str) -> Result<PathBuf> {
    let first = dir.join(format!("{stem}.bson"));
    if !first.exists() {
        return Ok(first);
    }
    for n in 1..=SAME_NAME_FILES_MAX {
        let path = dir.join(format!("{stem}.{n}.bson"));
        if !path.exists() {
            return Ok(path);
        }
    }
    Err(StorageError::IllegalOperation(format!(
        "{SAME_NAME_FILES_MAX} rollback files named {stem} already exist in {}",
        dir.display()
    )))
}

/// Creates `dir` (under `dbpath`) and fsyncs each directory whose entry is
/// new, so that a file made inside survives a power loss with its path.
fn create_dir_durably(dbpath: &Path, dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut cursor = dir;
    while !cursor.exists() {
        missing.push(cursor.to_path_buf());
        match cursor.parent() {
            Some(parent) if parent.starts_with(dbpath) => cursor = parent,
            _ => break,
        }
    }
    for made in missing.iter().rev() {
        fs::create_dir(made).or_else(|err| if made.is_dir() { Ok(()) } else { Err(err) })?;
        if let Some(parent) = made.parent() {
            File::open(parent)?.sync_all()?;
        }
    }
    Ok(())
}

/// Every rollback file of `ns`, oldest name first (tests, tools).
pub fn list(dbpath: &Path, ns: &str) -> Result<Vec<PathBuf>> {
    let dir = namespace_dir(dbpath, ns)?;
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "bson"))
        .collect();
    files.sort();
    Ok(files)
}

/// The documents of one rollback file, in order.
pub fn read(path: &Path) -> Result<Vec<Document>> {
    let bytes = fs::read(path)?;
    let mut cursor = std::io::Cursor::new(&bytes[..]);
    let mut documents = Vec::new();
    while (cursor.position() as usize) < bytes.len() {
        let document = Document::from_reader(&mut cursor)
            .map_err(|err| StorageError::Corruption(format!("rollback file {}: {err}", path.display())))?;
        documents.push(document);
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn a_file_holds_the_documents_in_order_and_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let documents = vec![doc! {"_id": 1, "a": "x"}, doc! {"_id": 2, "b": [1, 2]}];
        let first = write(dir.path(), "db.c", 1_700_000_000_123, &documents).unwrap();
        assert_eq!(
            first,
            dir.path().join("rollback/db.c/removed.2023-11-14T22-13-20.123.bson")
        );
        assert_eq!(read(&first).unwrap(), documents);
        let second = write(dir.path(), "db.c", 1_700_000_000_123, &documents[..1]).unwrap();
        assert_ne!(
            first, second,
            "a second rollback in the same millisecond gets its own file"
        );
        assert_eq!(read(&second).unwrap(), documents[..1]);
        assert_eq!(list(dir.path(), "db.c").unwrap().len(), 2);
        assert!(list(dir.path(), "db.other").unwrap().is_empty());
    }

    #[test]
    fn an_unfinished_file_is_removed_by_the_next_rollback_of_its_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let mut unfinished = RollbackFile::create(dir.path(), "db.c", 5).unwrap();
        unfinished.append(&doc! {"_id": 1}).unwrap();
        drop(unfinished); // a rollback that failed before its rename
        let ns_dir = namespace_dir(dir.path(), "db.c").unwrap();
        assert_eq!(fs::read_dir(&ns_dir).unwrap().count(), 1);
        let finished = write(dir.path(), "db.c", 6, &[doc! {"_id": 2}]).unwrap();
        let names: Vec<PathBuf> = fs::read_dir(&ns_dir).unwrap().map(|entry| entry.unwrap().path()).collect();
        assert_eq!(names, vec![finished]);
    }

    #[test]
    fn a_namespace_never_climbs_out_of_the_rollback_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(ROLLBACK_DIR_NAME);
        for (ns, name) in [
            ("../x", "%2E.%2Fx"),
            ("db.a/b", "db.a%2Fb"),
            ("db.50%", "db.50%25"),
            ("db.c", "db.c"),
        ] {
            let path = write(dir.path(), ns, 0, &[doc! {"_id": 1}]).unwrap();
            let parent = path.parent().unwrap();
            assert_eq!(parent, root.join(name), "{ns}");
            assert_eq!(parent.parent().unwrap(), root, "{ns}");
        }
        assert!(write(dir.path(), "", 0, &[]).is_err());
    }
}
