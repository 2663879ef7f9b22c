//! The one table of wrapped libc symbols, with their C prototypes (the
//! 64-bit and fortified variants included). The capture library expands it
//! into its real-symbol lookups (`crates/capture/src/real.rs`); `SYMBOLS`,
//! the names alone, feeds `paralog check-symbols` and docs/capture.md.

/// Hands the table to the macro `$then`, as `name: fn(args) -> ret;`
/// lines. The prototypes name libc's types as the expanding module imports
/// them (`c_char`, `off64_t`, `aiocb`, ...) or as `libc::stat`.
#[macro_export]
macro_rules! wrapped_symbols {
    ($then:ident) => {
        $then! {
            open: fn(*const c_char, c_int, mode_t) -> c_int;
            open64: fn(*const c_char, c_int, mode_t) -> c_int;
            openat: fn(c_int, *const c_char, c_int, mode_t) -> c_int;
            openat64: fn(c_int, *const c_char, c_int, mode_t) -> c_int;
            __open_2: fn(*const c_char, c_int) -> c_int;
            __open64_2: fn(*const c_char, c_int) -> c_int;
            __openat_2: fn(c_int, *const c_char, c_int) -> c_int;
            __openat64_2: fn(c_int, *const c_char, c_int) -> c_int;
            creat: fn(*const c_char, mode_t) -> c_int;
            creat64: fn(*const c_char, mode_t) -> c_int;
            mkstemp: fn(*mut c_char) -> c_int;
            mkstemp64: fn(*mut c_char) -> c_int;
            mkostemp: fn(*mut c_char, c_int) -> c_int;
            mkostemp64: fn(*mut c_char, c_int) -> c_int;
            mkstemps: fn(*mut c_char, c_int) -> c_int;
            mkstemps64: fn(*mut c_char, c_int) -> c_int;
            mkostemps: fn(*mut c_char, c_int, c_int) -> c_int;
            mkostemps64: fn(*mut c_char, c_int, c_int) -> c_int;
            fcntl: fn(c_int, c_int, libc::c_ulong) -> c_int;
            fcntl64: fn(c_int, c_int, libc::c_ulong) -> c_int;
            close: fn(c_int) -> c_int;
            write: fn(c_int, *const c_void, size_t) -> ssize_t;
            read: fn(c_int, *mut c_void, size_t) -> ssize_t;
            pwrite: fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
            pwrite64: fn(c_int, *const c_void, size_t, off64_t) -> ssize_t;
            pread: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
            pread64: fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t;
            writev: fn(c_int, *const iovec, c_int) -> ssize_t;
            readv: fn(c_int, *const iovec, c_int) -> ssize_t;
            pwritev: fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
            pwritev64: fn(c_int, *const iovec, c_int, off64_t) -> ssize_t;
            preadv: fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
            preadv64: fn(c_int, *const iovec, c_int, off64_t) -> ssize_t;
            lseek: fn(c_int, off_t, c_int) -> off_t;
            lseek64: fn(c_int, off64_t, c_int) -> off64_t;
            fsync: fn(c_int) -> c_int;
            fdatasync: fn(c_int) -> c_int;
            ftruncate: fn(c_int, off_t) -> c_int;
            ftruncate64: fn(c_int, off64_t) -> c_int;
            truncate: fn(*const c_char, off_t) -> c_int;
            truncate64: fn(*const c_char, off64_t) -> c_int;
            fallocate: fn(c_int, c_int, off_t, off_t) -> c_int;
            fallocate64: fn(c_int, c_int, off64_t, off64_t) -> c_int;
            posix_fallocate: fn(c_int, off_t, off_t) -> c_int;
            posix_fallocate64: fn(c_int, off64_t, off64_t) -> c_int;
            stat: fn(*const c_char, *mut libc::stat) -> c_int;
            stat64: fn(*const c_char, *mut libc::stat64) -> c_int;
            lstat: fn(*const c_char, *mut libc::stat) -> c_int;
            lstat64: fn(*const c_char, *mut libc::stat64) -> c_int;
            fstat: fn(c_int, *mut libc::stat) -> c_int;
            fstat64: fn(c_int, *mut libc::stat64) -> c_int;
            fstatat: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
            fstatat64: fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
            __xstat: fn(c_int, *const c_char, *mut libc::stat) -> c_int;
            __xstat64: fn(c_int, *const c_char, *mut libc::stat64) -> c_int;
            __lxstat: fn(c_int, *const c_char, *mut libc::stat) -> c_int;
            __lxstat64: fn(c_int, *const c_char, *mut libc::stat64) -> c_int;
            __fxstat: fn(c_int, c_int, *mut libc::stat) -> c_int;
            __fxstat64: fn(c_int, c_int, *mut libc::stat64) -> c_int;
            __fxstatat: fn(c_int, c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
            __fxstatat64: fn(c_int, c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
            statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
            statfs: fn(*const c_char, *mut libc::statfs) -> c_int;
            statfs64: fn(*const c_char, *mut libc::statfs64) -> c_int;
            fstatfs: fn(c_int, *mut libc::statfs) -> c_int;
            fstatfs64: fn(c_int, *mut libc::statfs64) -> c_int;
            statvfs: fn(*const c_char, *mut libc::statvfs) -> c_int;
            statvfs64: fn(*const c_char, *mut libc::statvfs64) -> c_int;
            fstatvfs: fn(c_int, *mut libc::statvfs) -> c_int;
            fstatvfs64: fn(c_int, *mut libc::statvfs64) -> c_int;
            dup: fn(c_int) -> c_int;
            dup2: fn(c_int, c_int) -> c_int;
            dup3: fn(c_int, c_int, c_int) -> c_int;
            flock: fn(c_int, c_int) -> c_int;
            lockf: fn(c_int, c_int, off_t) -> c_int;
            aio_write: fn(*mut aiocb) -> c_int;
            aio_write64: fn(*mut aiocb) -> c_int;
            aio_read: fn(*mut aiocb) -> c_int;
            aio_read64: fn(*mut aiocb) -> c_int;
            aio_error: fn(*const aiocb) -> c_int;
            aio_error64: fn(*const aiocb) -> c_int;
            aio_return: fn(*mut aiocb) -> ssize_t;
            aio_return64: fn(*mut aiocb) -> ssize_t;
            aio_suspend: fn(*const *const aiocb, c_int, *const timespec) -> c_int;
            aio_suspend64: fn(*const *const aiocb, c_int, *const timespec) -> c_int;
            aio_cancel: fn(c_int, *mut aiocb) -> c_int;
            aio_cancel64: fn(c_int, *mut aiocb) -> c_int;
            unlink: fn(*const c_char) -> c_int;
            unlinkat: fn(c_int, *const c_char, c_int) -> c_int;
            access: fn(*const c_char, c_int) -> c_int;
            faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int;
            euidaccess: fn(*const c_char, c_int) -> c_int;
            eaccess: fn(*const c_char, c_int) -> c_int;
            pwritev2: fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
            pwritev64v2: fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
            preadv2: fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
            preadv64v2: fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
            syncfs: fn(c_int) -> c_int;
            sync_file_range: fn(c_int, off64_t, off64_t, c_uint) -> c_int;
            sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
            sendfile64: fn(c_int, c_int, *mut off64_t, size_t) -> ssize_t;
            copy_file_range: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
            splice: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
            lio_listio: fn(c_int, *const *mut aiocb, c_int, *mut libc::sigevent) -> c_int;
            lio_listio64: fn(c_int, *const *mut aiocb, c_int, *mut libc::sigevent) -> c_int;
            rename: fn(*const c_char, *const c_char) -> c_int;
            renameat: fn(c_int, *const c_char, c_int, *const c_char) -> c_int;
            renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int;
            link: fn(*const c_char, *const c_char) -> c_int;
            mkdir: fn(*const c_char, mode_t) -> c_int;
            mkdirat: fn(c_int, *const c_char, mode_t) -> c_int;
            rmdir: fn(*const c_char) -> c_int;
            mkdtemp: fn(*mut c_char) -> *mut c_char;
            symlink: fn(*const c_char, *const c_char) -> c_int;
            realpath: fn(*const c_char, *mut c_char) -> *mut c_char;
            canonicalize_file_name: fn(*const c_char) -> *mut c_char;
            readlink: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
            readlinkat: fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t;
            symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int;
            chmod: fn(*const c_char, mode_t) -> c_int;
            fchmod: fn(c_int, mode_t) -> c_int;
            fchmodat: fn(c_int, *const c_char, mode_t, c_int) -> c_int;
            umask: fn(mode_t) -> mode_t;
            utimensat: fn(c_int, *const c_char, *const timespec, c_int) -> c_int;
            futimens: fn(c_int, *const timespec) -> c_int;
            utimes: fn(*const c_char, *const libc::timeval) -> c_int;
            lutimes: fn(*const c_char, *const libc::timeval) -> c_int;
            futimes: fn(c_int, *const libc::timeval) -> c_int;
            futimesat: fn(c_int, *const c_char, *const libc::timeval) -> c_int;
            utime: fn(*const c_char, *const libc::utimbuf) -> c_int;
            opendir: fn(*const c_char) -> *mut DIR;
            fdopendir: fn(c_int) -> *mut DIR;
            readdir: fn(*mut DIR) -> *mut libc::dirent;
            readdir64: fn(*mut DIR) -> *mut libc::dirent64;
            closedir: fn(*mut DIR) -> c_int;
            dirfd: fn(*mut DIR) -> c_int;
            rewinddir: fn(*mut DIR) -> ();
            getdents64: fn(c_int, *mut c_void, size_t) -> ssize_t;
            chdir: fn(*const c_char) -> c_int;
            fchdir: fn(c_int) -> c_int;
            getcwd: fn(*mut c_char, size_t) -> *mut c_char;
            scandir: fn(*const c_char, *mut *mut *mut libc::dirent64, *mut c_void, *mut c_void) -> c_int;
            scandir64: fn(*const c_char, *mut *mut *mut libc::dirent64, *mut c_void, *mut c_void) -> c_int;
            scandirat: fn(c_int, *const c_char, *mut *mut *mut libc::dirent64, *mut c_void, *mut c_void) -> c_int;
            scandirat64: fn(c_int, *const c_char, *mut *mut *mut libc::dirent64, *mut c_void, *mut c_void) -> c_int;
            ftw: fn(*const c_char, *mut c_void, c_int) -> c_int;
            ftw64: fn(*const c_char, *mut c_void, c_int) -> c_int;
            nftw: fn(*const c_char, *mut c_void, c_int, c_int) -> c_int;
            nftw64: fn(*const c_char, *mut c_void, c_int, c_int) -> c_int;
            glob: fn(*const c_char, c_int, *mut c_void, *mut c_void) -> c_int;
            glob64: fn(*const c_char, c_int, *mut c_void, *mut c_void) -> c_int;
            linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int;
            mmap: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
            mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void;
            fopen: fn(*const c_char, *const c_char) -> *mut FILE;
            fopen64: fn(*const c_char, *const c_char) -> *mut FILE;
            fdopen: fn(c_int, *const c_char) -> *mut FILE;
            freopen: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
            freopen64: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
            fclose: fn(*mut FILE) -> c_int;
            fileno: fn(*mut FILE) -> c_int;
            fileno_unlocked: fn(*mut FILE) -> c_int;
            vdprintf: fn(c_int, *const c_char, *mut c_void) -> c_int;
            __vdprintf_chk: fn(c_int, c_int, *const c_char, *mut c_void) -> c_int;
            dprintf: fn(c_int, *const c_char) -> c_int;
            __dprintf_chk: fn(c_int, c_int, *const c_char) -> c_int;
            posix_spawn: fn(*mut pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int;
            posix_spawnp: fn(*mut pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int;
            system: fn(*const c_char) -> c_int;
            execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
            execv: fn(*const c_char, *const *const c_char) -> c_int;
            execvp: fn(*const c_char, *const *const c_char) -> c_int;
            execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
            fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
            execl: fn(*const c_char, *const c_char) -> c_int;
            execlp: fn(*const c_char, *const c_char) -> c_int;
            execle: fn(*const c_char, *const c_char) -> c_int;
            getxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t;
            lgetxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t;
            listxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
            llistxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
            setxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int;
            lsetxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int;
            removexattr: fn(*const c_char, *const c_char) -> c_int;
            lremovexattr: fn(*const c_char, *const c_char) -> c_int;
            fsetxattr: fn(c_int, *const c_char, *const c_void, size_t, c_int) -> c_int;
            fremovexattr: fn(c_int, *const c_char) -> c_int;
            vfork: fn() -> pid_t;
            wait: fn(*mut c_int) -> pid_t;
            waitpid: fn(pid_t, *mut c_int, c_int) -> pid_t;
            wait3: fn(*mut c_int, c_int, *mut libc::rusage) -> pid_t;
            wait4: fn(pid_t, *mut c_int, c_int, *mut libc::rusage) -> pid_t;
            waitid: fn(libc::idtype_t, libc::id_t, *mut libc::siginfo_t, c_int) -> c_int;
            _exit: fn(c_int) -> ();
            _Exit: fn(c_int) -> ();
        }
    };
}

macro_rules! names {
    ($( $name:ident : fn($($arg:ty),*) -> $ret:ty ;)*) => {
        /// Every symbol the capture library defines, for reports and docs.
        pub const SYMBOLS: &[&str] = &[$(stringify!($name)),*];
    };
}

wrapped_symbols!(names);

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for s in super::SYMBOLS {
            assert!(seen.insert(s), "{s} is listed twice");
        }
        assert!(super::SYMBOLS.contains(&"write") && super::SYMBOLS.contains(&"__open64_2"));
    }
}
