//! The usage spool: the router appends every usage record to a local file before its call's
//! end reaches the caller, and removes the file once JetStream has stored every record in it.
//! A router killed while NATS is unreachable (its records still queued in memory) therefore
//! loses none: the file outlives the process, and any router sharing the directory, this one
//! after a restart included, publishes it again.
//!
//! Files are segments named `usage-<uuid>.spool`, one JSON record per line. The writer holds an
//! exclusive `flock` on each of its segments for as long as it may still need it, so a segment
//! that can be locked (by another process, or by the writer itself through a second handle) is
//! one whose writer died, or let go of with records not known to be stored. A segment is
//! created as `.open`, locked, then renamed, so no one takes a file its writer has not locked
//! yet. A new segment is started every [`SEGMENT_RECORDS`] records or [`SEGMENT_AGE`]; an old
//! one is removed once it is no longer current and every record in it is stored.
//!
//! Records are written (not synced): they survive the process, not the machine. A record
//! published twice (its writer died after JetStream stored it, before removing the file) is
//! stored once: the `usage` table's key is the record id.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use weft_core::UsageRecord;

/// A segment takes at most this many records before the next is started.
pub const SEGMENT_RECORDS: usize = 4096;
/// A segment takes records for at most this long before the next is started.
pub const SEGMENT_AGE: Duration = Duration::from_secs(5);
/// An `.open` file older than this, that no one holds, is a writer's that died creating it.
const OPENING_STALE: Duration = Duration::from_secs(60);

const SPOOL_EXT: &str = "spool";
const OPENING_EXT: &str = "open";

/// One process's spool in a directory (shared with other routers of the same deployment).
pub struct Spool {
    dir: PathBuf,
    current: Mutex<Option<Current>>,
}

struct Current {
    seg: Arc<Segment>,
    records: usize,
    opened: Instant,
}

/// A segment file this process writes and holds locked; removed when the last reference goes,
/// unless [`Segment::keep`] was called.
pub struct Segment {
    path: PathBuf,
    file: File,
    keep: AtomicBool,
}

impl Segment {
    /// Leaves the file in place when this segment is dropped (its lock released): a record in
    /// it was not stored, so a reclaim (this router's or another's) publishes it later.
    fn keep(&self) {
        self.keep.store(true, Ordering::Relaxed);
    }
}

/// Records appended to a segment, held until JetStream has stored them. A ticket dropped
/// without [`Ticket::stored`] (the publish gave up, the task was dropped at shutdown, it
/// panicked) keeps its segment's file for a reclaim: a file goes only when every record in it
/// is known to be stored.
pub struct Ticket {
    seg: Arc<Segment>,
    stored: bool,
}

impl Ticket {
    /// JetStream stored these records.
    pub fn stored(mut self) {
        self.stored = true;
    }

    pub fn path(&self) -> &Path {
        &self.seg.path
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.stored {
            self.seg.keep();
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if !self.keep.load(Ordering::Relaxed)
            && let Err(e) = fs::remove_file(&self.path)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove a usage spool file whose records are stored");
        }
        // The lock is released when `file` closes, after the removal.
    }
}

impl Spool {
    /// Opens (creating) `dir` and starts a segment in it, so an unwritable directory is found
    /// at start rather than at the first call.
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let spool = Self {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
        };
        let seg = spool.new_segment()?;
        *spool.lock() = Some(Current {
            seg,
            records: 0,
            opened: Instant::now(),
        });
        Ok(spool)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_segment(&self) -> io::Result<Arc<Segment>> {
        let opening = self.dir.join(format!(
            "usage-{}.{OPENING_EXT}",
            uuid::Uuid::now_v7().simple()
        ));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&opening)?;
        file.try_lock().map_err(|e| match e {
            TryLockError::Error(e) => e,
            TryLockError::WouldBlock => io::Error::other("a new spool file is locked by another"),
        })?;
        let path = opening.with_extension(SPOOL_EXT);
        fs::rename(&opening, &path)?;
        Ok(Arc::new(Segment {
            path,
            file,
            keep: AtomicBool::new(false),
        }))
    }

    /// Appends `recs`, one JSON line each, to the current segment (starting a new one when it
    /// is full or old); the ticket is held until the records are stored.
    pub fn append(&self, recs: &[UsageRecord]) -> io::Result<Ticket> {
        let mut buf = Vec::with_capacity(recs.len() * 384);
        for r in recs {
            serde_json::to_writer(&mut buf, r)?;
            buf.push(b'\n');
        }
        let mut retired = None;
        let mut cur = self.lock();
        let fresh = cur
            .as_ref()
            .is_some_and(|c| c.records < SEGMENT_RECORDS && c.opened.elapsed() < SEGMENT_AGE);
        if !fresh {
            // The old segment is dropped after the lock is released (removing its file when
            // every record in it is stored), not under it.
            retired = cur.take();
            *cur = Some(Current {
                seg: self.new_segment()?,
                records: 0,
                opened: Instant::now(),
            });
        }
        let Some(c) = cur.as_mut() else {
            return Err(io::Error::other("no usage spool segment"));
        };
        if let Err(e) = (&c.seg.file).write_all(&buf) {
            // A partial line may be left: the next records go to a new segment, and the reader
            // skips a line it cannot decode.
            *cur = None;
            return Err(e);
        }
        c.records += recs.len();
        let ticket = Ticket {
            seg: c.seg.clone(),
            stored: false,
        };
        drop(cur);
        drop(retired);
        Ok(ticket)
    }

    /// Lets go of the current segment when it is old, so an idle router holds none: its file
    /// goes once its records are stored, or becomes claimable if some were not.
    pub fn retire_stale(&self) {
        let mut cur = self.lock();
        let retired = if cur
            .as_ref()
            .is_some_and(|c| c.opened.elapsed() >= SEGMENT_AGE)
        {
            cur.take()
        } else {
            None
        };
        drop(cur);
        drop(retired);
    }

    /// The segment files in the directory, to [`claim`] one at a time; removes `.open` files a
    /// writer died creating. Blocking file I/O.
    pub fn segments(&self) -> io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some(SPOOL_EXT) => out.push(path),
                Some(OPENING_EXT) => remove_stale_opening(&path),
                _ => {}
            }
        }
        out.sort();
        Ok(out)
    }

    /// Takes over every segment no live writer holds (their writers died or gave them up).
    /// Blocking file I/O.
    pub fn claim_orphans(&self) -> io::Result<Vec<Claimed>> {
        let mut out = Vec::new();
        for path in self.segments()? {
            if let Some(c) = claim(&path)? {
                out.push(c);
            }
        }
        Ok(out)
    }
}

/// A segment taken over from a writer that is gone: its records, and the lock held until
/// [`Claimed::done`] removes it (or it is dropped, leaving it for a later try).
pub struct Claimed {
    path: PathBuf,
    _file: File,
    pub records: Vec<UsageRecord>,
    /// Lines that did not decode (a write cut short by the writer's death), skipped.
    pub bad_lines: usize,
}

impl Claimed {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record is stored: removes the file (then releases its lock).
    pub fn done(self) -> io::Result<()> {
        fs::remove_file(&self.path)
    }
}

/// Locks and reads the segment `path` when no one holds it; `None` when its writer is alive or
/// it was removed meanwhile. Blocking file I/O.
pub fn claim(path: &Path) -> io::Result<Option<Claimed>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    // Its writer may have removed it between our open and our lock: then this handle is to a
    // file no longer in the directory, whose records are stored.
    match fs::metadata(path) {
        Ok(m) if m.ino() == file.metadata()?.ino() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut records = Vec::new();
    let mut bad_lines = 0;
    for line in io::BufReader::new(&file).split(b'\n') {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<UsageRecord>(&line) {
            Ok(r) => records.push(r),
            Err(_) => bad_lines += 1,
        }
    }
    Ok(Some(Claimed {
        path: path.to_path_buf(),
        _file: file,
        records,
        bad_lines,
    }))
}

/// Removes an `.open` file old enough that its writer must have died between creating and
/// renaming it. The age is read before the lock is tried, so a writer that has just created
/// one never finds it locked by this.
fn remove_stale_opening(path: &Path) {
    let stale = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age >= OPENING_STALE);
    if !stale {
        return;
    }
    let Ok(file) = File::open(path) else { return };
    if file.try_lock().is_err() {
        return;
    }
    if let Err(e) = fs::remove_file(path) {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a stale usage spool file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u64) -> UsageRecord {
        UsageRecord {
            id: uuid::Uuid::now_v7(),
            at_ms: 1_700_000_000_000,
            tenant: "acme".into(),
            subject: "svc".into(),
            token_id: None,
            kind: "chat".into(),
            provider: "mock".into(),
            model: "mock-1".into(),
            requested_model: "default".into(),
            input_tokens: n,
            output_tokens: 1,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            latency_ms: 1,
            cost_usd: 0.0,
            outcome: "ok".into(),
        }
    }

    fn files(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    }

    fn tmpdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("weft-spool-{}", uuid::Uuid::now_v7().simple()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_live_writers_segment_cannot_be_claimed_and_a_dead_ones_can() {
        let dir = tmpdir();
        let a = Spool::open(&dir).unwrap();
        let b = Spool::open(&dir).unwrap();
        let recs = [rec(1), rec(2)];
        let t = a.append(&recs).unwrap();
        // B sees A's segment held, and its own.
        assert!(b.claim_orphans().unwrap().is_empty());
        // A gives its records up (a publish failed, or its task was dropped): the file stays
        // and B can take it.
        drop(t);
        drop(a);
        let claimed = b.claim_orphans().unwrap();
        assert_eq!(claimed.len(), 1);
        let ids: Vec<_> = claimed[0].records.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![recs[0].id, recs[1].id]);
        assert_eq!(claimed[0].bad_lines, 0);
        // While B holds it, no one else takes it.
        let c = Spool::open(&dir).unwrap();
        assert!(c.claim_orphans().unwrap().is_empty());
        let path = claimed[0].path().to_path_buf();
        for cl in claimed {
            cl.done().unwrap();
        }
        assert!(!path.exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_segment_whose_records_are_stored_is_removed_and_a_torn_line_is_skipped() {
        let dir = tmpdir();
        let a = Spool::open(&dir).unwrap();
        let t = a.append(&[rec(1)]).unwrap();
        let path = t.path().to_path_buf();
        t.stored();
        // Still the current segment: kept for the next records.
        assert!(path.exists());
        drop(a);
        // The process is done with it and every batch was stored: gone.
        assert!(!path.exists());

        // A writer killed mid-line: the whole lines are read, the torn one counted.
        let a = Spool::open(&dir).unwrap();
        let t = a.append(&[rec(1), rec(2)]).unwrap();
        (&t.seg.file).write_all(b"{\"id\":\"0190").unwrap();
        drop(t);
        drop(a);
        let b = Spool::open(&dir).unwrap();
        let claimed = b.claim_orphans().unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].records.len(), 2);
        assert_eq!(claimed[0].bad_lines, 1);
        drop(claimed);
        drop(b);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_full_segment_gives_way_to_a_new_one() {
        let dir = tmpdir();
        let a = Spool::open(&dir).unwrap();
        let batch: Vec<_> = (0..SEGMENT_RECORDS as u64).map(rec).collect();
        let first = a.append(&batch).unwrap();
        let second = a.append(&[rec(0)]).unwrap();
        assert_ne!(first.path(), second.path());
        assert_eq!(files(&dir).len(), 2);
        // The first is no longer current: once its batch is stored, it goes.
        let p = first.path().to_path_buf();
        first.stored();
        assert!(!p.exists());
        assert_eq!(files(&dir), vec![second.path().to_path_buf()]);
        second.stored();
        drop(a);
        assert!(files(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_segment_with_one_unstored_batch_stays_for_a_reclaim() {
        let dir = tmpdir();
        let a = Spool::open(&dir).unwrap();
        let stored = a.append(&[rec(1)]).unwrap();
        let dropped = a.append(&[rec(2)]).unwrap();
        let path = stored.path().to_path_buf();
        stored.stored();
        // Its task went away (a shutdown) before JetStream answered.
        drop(dropped);
        drop(a);
        assert!(path.exists());
        let b = Spool::open(&dir).unwrap();
        let claimed = b.claim_orphans().unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].records.len(), 2);
        drop(claimed);
        drop(b);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_idle_router_lets_its_old_segment_go() {
        let dir = tmpdir();
        let a = Spool::open(&dir).unwrap();
        let t = a.append(&[rec(1)]).unwrap();
        let path = t.path().to_path_buf();
        drop(t);
        // Not stale yet: still held.
        a.retire_stale();
        assert!(a.claim_orphans().unwrap().is_empty());
        // Stale: let go, so its unstored record can be claimed (here by the same router).
        a.lock().as_mut().unwrap().opened -= SEGMENT_AGE;
        a.retire_stale();
        let claimed = a.claim_orphans().unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].path(), path);
        fs::remove_dir_all(&dir).unwrap();
    }
}
