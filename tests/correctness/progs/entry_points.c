/* entry_points: writes and reads DIR/e.bin through the entry points capture
 * took over from "not handled": pwritev2 (at an offset, at the file offset
 * with -1, with RWF_DSYNC), preadv2, sendfile and copy_file_range from a
 * file outside the prefix, splice from a pipe, lio_listio, syncfs,
 * sync_file_range, faccessat; mkstemps (renamed to DIR/renamed.dat) and
 * mkostemp (unlinked) under DIR, euidaccess. Usage: entry_points DIR SRCFILE
 * (SRCFILE: any file of at least 64 KiB outside DIR, e.g. the python3 binary). Checks what it reads
 * back; exit 1 with a line on a mismatch. */
#define _GNU_SOURCE
#include <aio.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <unistd.h>

static int fail(const char *what) { perror(what); exit(1); }

/* glibc's fortified dprintf (what -D_FORTIFY_SOURCE=2 makes of dprintf). */
extern int __dprintf_chk(int fd, int flag, const char *fmt, ...);

static int no_dots(const struct dirent *e) { return e->d_name[0] != '.'; }

/* scandir and scandirat (by path, and "." of a directory descriptor) of a
   directory whose files exist in capture's view only (a separate remote):
   the names, filtered and sorted, printed for the comparison with the
   direct run; tmpfile with TMPDIR in that directory: written, read back,
   and gone at fclose (it leaves nothing in the tree). */
static void listing_case(const char *dir) {
    struct dirent **names;
    int n = scandir(dir, &names, no_dots, alphasort);
    if (n < 0) fail("scandir");
    printf("scandir:");
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]->d_name);
        free(names[i]);
    }
    printf("\n");
    free(names);
    n = scandirat(AT_FDCWD, dir, &names, NULL, alphasort);
    if (n < 0) fail("scandirat");
    int dots = 0;
    for (int i = 0; i < n; i++) {
        dots += names[i]->d_name[0] == '.';
        free(names[i]);
    }
    free(names);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0) fail("open of the directory");
    int m = scandirat(dfd, ".", &names, no_dots, alphasort);
    if (m < 0) fail("scandirat of a directory descriptor");
    printf("scandirat: %d entries with . and .. (%d dots), %d without:", n, dots, m);
    for (int i = 0; i < m; i++) {
        printf(" %s", names[i]->d_name);
        free(names[i]);
    }
    printf("\n");
    free(names);
    close(dfd);
    setenv("TMPDIR", dir, 1);
    FILE *t = tmpfile();
    if (!t) fail("tmpfile");
    char got[32] = {0};
    if (fputs("temporary bytes", t) < 0 || fflush(t) || fseek(t, 0, SEEK_SET) || !fgets(got, sizeof got, t) ||
        strcmp(got, "temporary bytes"))
        fail("tmpfile round trip");
    fclose(t);
}

static int vd(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vdprintf(fd, fmt, ap);
    va_end(ap);
    return n;
}

/* dprintf, vdprintf and __dprintf_chk into a captured file: integer,
   floating and string arguments, more of each than the registers hold (the
   rest are on the stack), a text longer than any stdio buffer; read back. */
static void dprintf_case(const char *dir) {
    char q[4096];
    snprintf(q, sizeof q, "%s/dprintf.txt", dir);
    int df = open(q, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (df < 0) fail("open for dprintf");
    static char big[200000];
    memset(big, 'z', sizeof big - 1);
    int n = 0, k;
    if ((k = dprintf(df, "int %d, long %ld, str %s, char %c\n", 42, 1234567890123L, "hello", 'x')) <= 0) fail("dprintf");
    n += k;
    k = dprintf(df, "%.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f | %d %d %d %d %d %d %d %d %s\n",
                1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 1, 2, 3, 4, 5, 6, 7, 8, "end");
    if (k <= 0) fail("dprintf with stack arguments");
    n += k;
    if ((k = vd(df, "vdprintf %s %d %.1f\n", "args", 7, 0.25)) <= 0) fail("vdprintf");
    n += k;
    if ((k = __dprintf_chk(df, 1, "chk %d %s %.3f\n", 99, "fortified", 3.0)) <= 0) fail("__dprintf_chk");
    n += k;
    if ((k = dprintf(df, "%s\n", big)) != (int)sizeof big) fail("dprintf of a long text");
    n += k;
    if (lseek(df, 0, SEEK_END) != n) fail("size after dprintf");
    char head[64];
    if (pread(df, head, 17, 0) != 17 || memcmp(head, "int 42, long 1234", 17)) fail("read back after dprintf");
    if (close(df) != 0) fail("close after dprintf");
    if (dprintf(1, "dprintf to stdout %d\n", 5) != 20) fail("dprintf to stdout");
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    char p[4096];
    snprintf(p, sizeof p, "%s/e.bin", argv[1]);
    int fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0644);
    int src = open(argv[2], O_RDONLY);
    if (fd < 0 || src < 0) fail("open");
    char a[100], b[100];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    struct iovec v[2] = {{a, sizeof a}, {b, sizeof b}};
    if (pwritev2(fd, v, 2, 1000, 0) != 200) fail("pwritev2 at 1000");
    if (pwritev2(fd, v, 1, -1, 0) != 100) fail("pwritev2 at the file offset");
    if (pwritev2(fd, v + 1, 1, 5000, RWF_DSYNC) != 100) fail("pwritev2 RWF_DSYNC");
    char back[200];
    struct iovec r = {back, sizeof back};
    if (preadv2(fd, &r, 1, 1000, 0) != 200 || memcmp(back, a, 100) || memcmp(back + 100, b, 100)) fail("preadv2");
    off_t in_off = 0;
    if (lseek(fd, 8192, SEEK_SET) != 8192) fail("lseek");
    if (sendfile(fd, src, &in_off, 30000) != 30000 || in_off != 30000) fail("sendfile");
    loff_t ci = 100, co = 40000;
    if (copy_file_range(src, &ci, fd, &co, 20000, 0) != 20000 || co != 60000) fail("copy_file_range");
    int pp[2];
    if (pipe(pp)) fail("pipe");
    if (write(pp[1], "through a pipe\n", 15) != 15) fail("pipe write");
    loff_t so = 70000;
    if (splice(pp[0], NULL, fd, &so, 15, 0) != 15) fail("splice");
    struct aiocb cb;
    memset(&cb, 0, sizeof cb);
    cb.aio_fildes = fd;
    cb.aio_buf = a;
    cb.aio_nbytes = 50;
    cb.aio_offset = 80000;
    cb.aio_lio_opcode = LIO_WRITE;
    struct aiocb *list[1] = {&cb};
    if (lio_listio(LIO_WAIT, list, 1, NULL) != 0 || aio_return(&cb) != 50) fail("lio_listio");
    if (syncfs(fd) != 0) fail("syncfs");
    if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0) fail("sync_file_range");
    if (faccessat(AT_FDCWD, p, F_OK, 0) != 0) fail("faccessat");
    close(fd);
    close(src);
    char t[4096], q[4096];
    snprintf(t, sizeof t, "%s/tmpXXXXXX.dat", argv[1]);
    int tf = mkstemps(t, 4);
    if (tf < 0 || strstr(t, "XXXXXX") || strcmp(t + strlen(t) - 4, ".dat")) fail("mkstemps");
    if (write(tf, "temporary\n", 10) != 10 || close(tf) != 0) fail("write to the mkstemps file");
    snprintf(q, sizeof q, "%s/renamed.dat", argv[1]);
    if (rename(t, q) != 0) fail("rename of the mkstemps file");
    if (euidaccess(q, R_OK) != 0) fail("euidaccess");
    snprintf(t, sizeof t, "%s/oXXXXXX", argv[1]);
    tf = mkostemp(t, O_CLOEXEC | O_APPEND);
    if (tf < 0 || write(tf, "gone\n", 5) != 5 || close(tf) != 0 || unlink(t) != 0) fail("mkostemp");
    dprintf_case(argv[1]);
    listing_case(argv[1]);
    printf("entry points ok\n");
    return 0;
}
