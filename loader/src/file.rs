//! What kind of file a library path names, found without opening it, and an open that
//! cannot block.
//!
//! Opening a FIFO for reading waits for a writer, and `dlopen` opens the file it is given the
//! same way: a library path that names a FIFO (or a symlink to one) would hang the loader
//! forever. So every path the loader is about to read or hand to `dlopen` is first classified
//! with [`kind`] (`stat`, following symlinks, which opens nothing), and anything but a regular
//! file is refused; [`open_nonblocking`] then opens it with `O_NONBLOCK`, so that a path
//! replaced by a FIFO between the two cannot block either, and the caller checks again what
//! it opened.

use std::fmt;
use std::fs::{self, File, FileType, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The kind of file a path names (after following symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// A regular file: the only kind a shared library can be.
    Regular,
    /// A directory.
    Directory,
    /// A FIFO (named pipe): opening it for reading waits for a writer.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device (`/dev/null`, a terminal).
    CharDevice,
    /// A block device (a disk).
    BlockDevice,
    /// A type the operating system reports that is none of the above.
    Other,
}

impl FileKind {
    /// The kind of a file type, as `std::fs::metadata` (or `File::metadata`) reports it.
    pub fn of(t: FileType) -> FileKind {
        if t.is_file() {
            FileKind::Regular
        } else if t.is_dir() {
            FileKind::Directory
        } else if t.is_fifo() {
            FileKind::Fifo
        } else if t.is_socket() {
            FileKind::Socket
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::Other
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "a file of an unknown type",
        })
    }
}

/// The refusal of a path of `kind` (not [`FileKind::Regular`]), as the loader's errors say it.
pub(crate) struct NotRegular(pub(crate) FileKind);

impl fmt::Display for NotRegular {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, not a regular file; a shared library file was expected",
            self.0
        )
    }
}

/// The kind of file at `path`, following symlinks, without opening it.
pub fn kind(path: &Path) -> io::Result<FileKind> {
    fs::metadata(path).map(|m| FileKind::of(m.file_type()))
}

/// Opens `path` for reading with `O_NONBLOCK`, so that the open returns at once whatever the
/// file is (a FIFO without a writer included). Reads of a regular file ignore the flag; the
/// caller checks the opened file's kind before reading.
pub fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn kinds_read_as_the_loader_names_them() {
        assert_eq!(kind(Path::new("/")).unwrap(), FileKind::Directory);
        assert_eq!(kind(Path::new("/dev/null")).unwrap(), FileKind::CharDevice);
        assert_eq!(FileKind::Fifo.to_string(), "a FIFO (named pipe)");
        assert_eq!(FileKind::CharDevice.to_string(), "a character device");
    }

    /// The flag is this target's `O_NONBLOCK`: opening a FIFO with no writer returns.
    #[test]
    fn opening_a_fifo_does_not_wait_for_a_writer() {
        let dir = std::env::temp_dir().join(format!("oxccl-file-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let (tx, rx) = mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let opened =
                open_nonblocking(&path).map(|f| FileKind::of(f.metadata().unwrap().file_type()));
            let _ = tx.send(opened);
        });
        let opened = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the open returned (it would block without O_NONBLOCK)");
        assert_eq!(opened.unwrap(), FileKind::Fifo);
        let _ = fs::remove_dir_all(&dir);
    }
}
