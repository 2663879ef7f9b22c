//! One clear line on stderr per problem, written with a raw write(2) so that
//! reporting never re-enters the wrappers or takes a lock that a wrapper holds.

pub fn line(msg: &str) {
    let text = format!("paralog: {msg}\n");
    let mut rest = text.as_bytes();
    while !rest.is_empty() {
        // SAFETY: writing a valid buffer to fd 2.
        let n = unsafe { libc::syscall(libc::SYS_write, 2, rest.as_ptr(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}
