//! The next definition of each wrapped libc symbol (`dlsym(RTLD_NEXT)`),
//! looked up once. The one table of wrapped symbols is in `paralog-settings`
//! (`crates/settings/src/symbols.rs`), so that `paralog check-symbols` can
//! read its names without linking this library; it is expanded here.

use std::sync::atomic::{AtomicUsize, Ordering};

macro_rules! real_symbols {
    ($( $name:ident : fn($($arg:ty),*) -> $ret:ty ;)*) => {
        $(
            #[allow(non_snake_case, dead_code)]
            pub fn $name() -> Option<unsafe extern "C" fn($($arg),*) -> $ret> {
                static ADDR: AtomicUsize = AtomicUsize::new(0);
                let mut a = ADDR.load(Ordering::Relaxed);
                if a == 0 {
                    a = lookup(concat!(stringify!($name), "\0"));
                    ADDR.store(a, Ordering::Relaxed);
                }
                if a == usize::MAX {
                    None
                } else {
                    // SAFETY: dlsym returned the address of this very symbol,
                    // whose C prototype is the one the table declares.
                    Some(unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(a) })
                }
            }
        )*
    };
}

use libc::{
    aiocb, c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, pid_t, size_t, ssize_t,
    timespec, DIR, FILE,
};

paralog_settings::wrapped_symbols!(real_symbols);

fn lookup(name: &str) -> usize {
    // SAFETY: `name` is NUL-terminated (built with concat! above).
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) };
    if p.is_null() {
        usize::MAX
    } else {
        p as usize
    }
}
