//! The bench's child processes (servers and clients), owned so that none outlives the run:
//! dropping one kills and reaps it, and each is killed by the kernel if the bench itself
//! dies first (`PR_SET_PDEATHSIG`), so not even a `kill -9` of the bench leaves an orphan.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A child process that is killed and reaped when dropped.
pub struct Owned {
    child: Child,
    /// What it is, for messages ("the torch server", "client process 2").
    pub what: String,
}

impl Owned {
    /// Starts `cmd`, tied to this process's life; the error says what could not start and
    /// why. Call it from the main thread: the kernel signals the child when the thread that
    /// forked it ends.
    pub fn spawn(cmd: &mut Command, what: String) -> Result<Owned, String> {
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
            .map_err(|e| format!("cannot start {what}: {e}"))?;
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

/// The lines a process's stderr kept last, and whether it has ended.
#[derive(Clone, Default)]
pub struct Tail(Arc<(Mutex<Kept>, Condvar)>);

/// What a [`Tail`] holds under its lock.
#[derive(Default)]
struct Kept {
    lines: VecDeque<String>,
    ended: bool,
}

/// The stderr lines a [`Tail`] keeps.
const TAIL_LINES: usize = 12;

impl Tail {
    /// Copies `err` to this process's stderr, as if inherited, keeping its last lines; the
    /// thread ends with the child's stderr.
    pub fn forward(err: ChildStderr) -> Tail {
        let tail = Tail::default();
        let kept = Arc::clone(&tail.0);
        std::thread::spawn(move || {
            let mut r = BufReader::new(err);
            let mut buf = Vec::new();
            while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                let _ = std::io::stderr().write_all(&buf);
                let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                if let Ok(mut k) = kept.0.lock() {
                    if k.lines.len() == TAIL_LINES {
                        k.lines.pop_front();
                    }
                    k.lines.push_back(line);
                }
                buf.clear();
            }
            if let Ok(mut k) = kept.0.lock() {
                k.ended = true;
            }
            kept.1.notify_all();
        });
        tail
    }

    /// The lines kept, oldest first; first waiting at most `wait` for the end of stderr
    /// (a process that has exited may have lines still in the pipe).
    pub fn lines(&self, wait: Duration) -> Vec<String> {
        let (lock, ended) = &*self.0;
        let Ok(k) = lock.lock() else {
            return Vec::new();
        };
        match ended.wait_timeout_while(k, wait, |k| !k.ended) {
            Ok((k, _)) => k.lines.iter().cloned().collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Writes `line` to each of `pipes`, each result in order. From a thread that blocks SIGPIPE:
/// the tool restores SIGPIPE's default at start, and a child that has ended must make the
/// write fail (EPIPE), not end the bench; the signal stays pending on that thread and ends
/// with it.
pub fn tell(pipes: &mut [&mut ChildStdin], line: &str) -> Vec<std::io::Result<()>> {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: the set is initialised by sigemptyset before use; the mask is this
            // thread's own.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGPIPE);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            pipes
                .iter_mut()
                .map(|p| writeln!(p, "{line}").and_then(|()| p.flush()))
                .collect()
        })
        .join()
        .unwrap_or_else(|_| Vec::new())
    })
}
