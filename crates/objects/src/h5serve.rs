//! The HDF5 view program as a co-process (docs/objects-format.md "The HDF5
//! view's co-process"): `paralog-h5view serve` makes one view per request
//! on its standard input and answers each on its standard output, so the
//! program's start (exec and loading its 44 shared libraries: about 7 ms
//! of a 10 ms view, docs/objects.md "What a version costs") is paid once
//! per view maker (a store's views thread, a server's publisher), not once
//! per version.
//!
//! Started at the first view, restarted when it died (a request it was
//! serving is sent once more, then reported as the view's failure), and
//! ended by [`ViewServer::end`] or when dropped. Without it (the program
//! too old to serve, or not startable) the caller makes the view with the
//! one-shot `paralog-h5view make`, as before.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::hdf5::HELPER;

/// The protocol version the co-process announces first.
const HELLO: &str = "paralog-h5view serve 1";

/// How long a co-process told to quit may take before it is killed: it
/// only finishes the request it serves (none: requests are answered
/// before the next is sent), so this bounds a hung program only.
const QUIT_WAIT: Duration = Duration::from_secs(5);

/// What a request to the co-process came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Served {
    Made,
    /// The program's message (what the one-shot `make` prints on stderr).
    Failed(String),
    /// No co-process: make the view with the one-shot program.
    Unavailable,
}

/// One `paralog-h5view serve` co-process of one view maker. Only the
/// process that made it talks to it: a forked child that inherited it
/// falls back to the one-shot program.
#[derive(Debug)]
pub struct ViewServer {
    state: Mutex<State>,
    owner: u32,
}

#[derive(Debug, Default)]
struct State {
    running: Option<Coproc>,
    /// A program that does not serve (an older `paralog-h5view`): not
    /// started again for every view.
    no_serve: Option<PathBuf>,
}

#[derive(Debug)]
struct Coproc {
    helper: PathBuf,
    child: Child,
    sock: UnixStream,
    answers: BufReader<UnixStream>,
}

impl Default for ViewServer {
    fn default() -> Self {
        ViewServer::new()
    }
}

impl ViewServer {
    /// No co-process yet: it starts with the first view.
    pub fn new() -> ViewServer {
        ViewServer {
            state: Mutex::new(State::default()),
            owner: std::process::id(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make a view by `helper` serving: `args` are the one-shot `make`'s
    /// (after `make`), `input` its standard input, `out` the file it
    /// writes (removed before a request is sent again).
    pub(crate) fn make(&self, helper: &Path, args: &[Vec<u8>], input: &[u8], out: &Path) -> Served {
        if self.owner != std::process::id() {
            return Served::Unavailable;
        }
        let mut request = format!("make {} {}\n", args.len(), count_lines(input)).into_bytes();
        for a in args {
            request.extend_from_slice(a);
            request.push(b'\n');
        }
        request.extend_from_slice(input);
        let mut st = self.state();
        if st.no_serve.as_deref() == Some(helper) {
            return Served::Unavailable;
        }
        let mut died = String::new();
        for _ in 0..2 {
            if st.running.as_ref().is_none_or(|c| c.helper != helper) {
                if let Some(old) = st.running.take() {
                    old.quit();
                }
                match Coproc::start(helper) {
                    Ok(Some(c)) => st.running = Some(c),
                    Ok(None) => {
                        st.no_serve = Some(helper.to_path_buf());
                        return Served::Unavailable;
                    }
                    Err(_) => return Served::Unavailable,
                }
            }
            let c = st.running.as_mut().expect("started above");
            match c.request(&request) {
                Ok(served) => return served,
                Err(e) => {
                    let c = st.running.take().expect("running");
                    died = format!("{e}; {}", c.reap());
                    // What it left of the view before it died.
                    let _ = std::fs::remove_file(out);
                }
            }
        }
        Served::Failed(format!(
            "{HELPER} serve ended while making the view, twice (the last: {died})"
        ))
    }

    /// End the co-process (it starts again with the next view).
    pub fn end(&self) {
        let running = self.state().running.take();
        if let Some(c) = running {
            if self.owner == std::process::id() {
                c.quit();
            } else {
                // A forked child's copy: its parent's child, not ours.
                std::mem::forget(c.child);
            }
        }
    }
}

impl Drop for ViewServer {
    fn drop(&mut self) {
        self.end();
    }
}

fn count_lines(input: &[u8]) -> usize {
    input.iter().filter(|&&b| b == b'\n').count()
}

impl Coproc {
    /// Start `helper serve`; `None`: it does not serve (it did not
    /// announce the protocol: an older program, or not this program).
    fn start(helper: &Path) -> std::io::Result<Option<Coproc>> {
        let (sock, theirs) = UnixStream::pair()?;
        let theirs_out = theirs.try_clone()?;
        let child = Command::new(helper)
            .arg("serve")
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::from(OwnedFd::from(theirs_out)))
            .stderr(Stdio::null())
            .spawn()?;
        let mut c = Coproc {
            helper: helper.to_path_buf(),
            child,
            answers: BufReader::new(sock.try_clone()?),
            sock,
        };
        let mut hello = String::new();
        let said = c.answers.read_line(&mut hello);
        if matches!(said, Ok(n) if n > 0) && hello.trim_end() == HELLO {
            return Ok(Some(c));
        }
        c.reap();
        Ok(None)
    }

    /// Send a request and read its answer; an error: the co-process is
    /// gone (or said something that is no answer).
    fn request(&mut self, request: &[u8]) -> std::io::Result<Served> {
        send_all(&self.sock, request)?;
        let mut head = String::new();
        if self.answers.read_line(&mut head)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "it closed its output",
            ));
        }
        let head = head.trim_end();
        if head == "ok" {
            return Ok(Served::Made);
        }
        let n = head
            .strip_prefix("fail ")
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("it answered {head:?}"),
                )
            })?;
        let mut said = Vec::new();
        (&mut self.answers).take(n).read_to_end(&mut said)?;
        if said.len() as u64 != n {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "its answer was cut short",
            ));
        }
        Ok(Served::Failed(
            String::from_utf8_lossy(&said).trim().to_owned(),
        ))
    }

    /// Kill it (it may be alive but lost) and collect its status.
    fn reap(mut self) -> String {
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(s) => format!("it ended ({s})"),
            Err(e) => format!("its end unknown ({e})"),
        }
    }

    /// Ask it to quit, and collect it; killed if it takes longer than
    /// [`QUIT_WAIT`] (a program's exit must not hang on it).
    fn quit(mut self) {
        let _ = send_all(&self.sock, b"quit\n");
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        let until = Instant::now() + QUIT_WAIT;
        while Instant::now() < until {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        self.reap();
    }
}

/// Write all of `buf` without SIGPIPE: a co-process that died must be an
/// error of the request, not kill the program that makes views (a C or
/// Fortran program keeps SIGPIPE's default action).
fn send_all(sock: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` bytes and the descriptor
        // is the stream's own, open while `sock` is borrowed.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}
