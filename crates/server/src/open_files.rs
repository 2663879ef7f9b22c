//! The open-file limit of the processes that drain (docs/server.md
//! "Limits"): `paralog server` (and so `paralog run`'s server, which is
//! one), `paralog recover` and `paralog stream drain` raise their soft
//! RLIMIT_NOFILE to the hard one at start. A drain keeps few files open
//! (a stream's round opens the segments it reads one at a time, a release
//! holds at most `paralog_stream::release::MAX_GONE` locks), but a node
//! with many producers, streams and drain workers at once can still reach
//! a soft limit of 1,024 (the usual default) while the hard one is far
//! higher. Only the soft limit is raised (an unprivileged process may go
//! up to the hard one), only in these processes: the program `paralog run`
//! starts keeps the limits it was given. Never an error: a process that
//! cannot raise it runs with what it has, as before.

/// Raise the soft open-file limit to the hard one (on Linux at most
/// `fs.nr_open`, the kernel's cap, when the hard one is unlimited). Says
/// what it did at debug level; returns the soft limit now, if it could be
/// read.
pub fn raise_soft_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills a struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::debug!(error = %e, "open-file limit: getrlimit failed; left as it is");
        return None;
    }
    let want = if r.rlim_max == libc::RLIM_INFINITY {
        // setrlimit refuses a soft limit above fs.nr_open.
        match nr_open() {
            Some(n) => n,
            None => {
                tracing::debug!(soft = r.rlim_cur, "open-file limit: the hard limit is unlimited and fs.nr_open unreadable; left as it is");
                return Some(r.rlim_cur);
            }
        }
    } else {
        r.rlim_max
    };
    if r.rlim_cur >= want {
        tracing::debug!(
            soft = r.rlim_cur,
            hard = r.rlim_max,
            "open-file limit: the soft limit is already the hard one"
        );
        return Some(r.rlim_cur);
    }
    let old = r.rlim_cur;
    r.rlim_cur = want;
    // SAFETY: setrlimit reads a struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::debug!(soft = old, hard = r.rlim_max, error = %e, "open-file limit: could not raise the soft limit; left as it is");
        return Some(old);
    }
    tracing::debug!(
        from = old,
        to = want,
        hard = r.rlim_max,
        "open-file limit: soft limit raised to the hard one"
    );
    Some(want)
}

fn nr_open() -> Option<libc::rlim_t> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    /// Afterwards the soft limit is the hard one (or the kernel's cap),
    /// and a second call changes nothing. It only raises the test
    /// process's limit, so the other tests of this binary are unharmed;
    /// a lowered limit is tested on the commands (tests/stream/
    /// local_retention.py "open-file limit").
    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let now = super::raise_soft_limit().expect("getrlimit works");
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills a struct we own.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
        assert_eq!(r.rlim_cur, now);
        if r.rlim_max != libc::RLIM_INFINITY {
            assert_eq!(r.rlim_cur, r.rlim_max);
        }
        assert_eq!(super::raise_soft_limit(), Some(now));
    }
}
