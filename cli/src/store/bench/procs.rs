//! The bench's child processes (servers and clients), owned so that none outlives the run:
//! dropping one kills and reaps it, and each is killed by the kernel if the bench itself
//! dies first (`PR_SET_PDEATHSIG`), so not even a `kill -9` of the bench leaves an orphan.

use super::error::BenchError;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdout, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A child process that is killed and reaped when dropped.
pub struct Owned {
    child: Child,
    /// What it is, for messages ("the torch server", "client process 2").
    pub what: String,
}

impl Owned {
    /// Starts `cmd`, tied to this process's life. Call it from the main thread: the kernel
    /// signals the child when the thread that forked it ends.
    pub fn spawn(cmd: &mut Command, what: String) -> Result<Owned, BenchError> {
        let parent = std::process::id();
        // SAFETY: the hook runs between fork and exec and calls only prctl and getppid, both
        // async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The bench may have died before the line above: then nobody would kill us.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::other("the bench is gone"));
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::Start(format!("cannot start {what}: {e}")))?;
        Ok(Owned { child, what })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child itself (its pipes).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// How it ended ("exited (...)", "still running"), waiting a moment for a process that
    /// just closed its output: for messages about a process that fell silent.
    pub fn exit_note(&mut self) -> String {
        let start = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => return format!("exited ({st})"),
                Ok(None) if start.elapsed() < Duration::from_millis(500) => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => return "still running".into(),
                Err(e) => return format!("cannot be waited for: {e}"),
            }
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // An exited child refuses the kill; the wait reaps it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first line `out` prints, waiting at most `timeout` (a server prints its address
/// there once it listens).
pub fn first_line(out: ChildStdout, timeout: Duration) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    // The thread ends when the child's stdout closes, at the latest when the child is killed.
    std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut line = String::new();
        let got = r.read_line(&mut line).ok().filter(|n| *n > 0).map(|_| line);
        let _ = tx.send(got);
        // Drain the rest so that the child never blocks on a full pipe.
        std::io::copy(&mut r, &mut std::io::sink()).ok();
    });
    rx.recv_timeout(timeout).ok().flatten()
}
