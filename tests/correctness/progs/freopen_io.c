/* freopen_io: freopen as programs use it. Usage: freopen_io CASE DIR [OUT]
 *
 * stdout   printf, then freopen(DIR/out.txt, "w", stdout), printf and puts
 *          (several buffers full), fclose(stdout); the file read back with
 *          fopen, and through stdin reopened onto it ("r"); stderr reopened
 *          onto DIR/err.txt and never closed (exit flushes it).
 * exit     freopen(DIR/o.txt, "w", stdout) and printf, no fflush, no fclose:
 *          the bytes are in stdio's buffer when main returns.
 * stream   a stream of fopen(DIR/a.txt) reopened onto DIR/b.txt, then mode
 *          changes (path NULL: "a"), back onto a.txt "r", b.txt "r+",
 *          c.txt "w+"; a "wx" onto an existing file fails with EEXIST.
 * append   stdout reopened "a" onto a file that has a header; an fopen "a"
 *          stream reopened "a" onto a new file and back; stderr "a".
 * outside  stdout reopened onto OUT/x.txt (OUT outside the prefix), read
 *          back through stdin; a stream of a file under DIR reopened onto
 *          OUT/y.txt and changed to "a" (path NULL).
 * child    stdout reopened onto DIR/out.txt, then shared with a child
 *          (system) that writes to it too, then a mode change (path NULL, "a").
 * seek     stdout reopened "w" onto DIR/w.txt, written out of sequence
 *          (fseek back), then "a" onto DIR/a.txt with an ftell after a
 *          write (glibc seeks to the end of what it writes into): capture
 *          must refuse both files loudly, not lose their bytes silently.
 * refused  freopen(DIR/rw.txt, "w+", stdout): says on stderr whether it was
 *          reopened or refused, then writes to stdout (still the old one if
 *          refused).
 * Every case checks what it wrote by reading it back; exit status 1 and a
 * line on the original stderr (or none once stderr is reopened) on a
 * mismatch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void fail(const char *what) {
    fprintf(stderr, "freopen_io: %s (errno %d)\n", what, errno);
    exit(1);
}

static char *path(const char *dir, const char *name) {
    static char p[8][4096];
    static int k;
    char *r = p[k++ % 8];
    snprintf(r, sizeof p[0], "%s/%s", dir, name);
    return r;
}

/* freopen, which must return the stream it was given. */
static void reopen(const char *p, const char *mode, FILE *f) {
    if (freopen(p, mode, f) != f) {
        fprintf(f == stderr ? stdout : stderr, "freopen_io: freopen of %s \"%s\" (errno %d)\n", p ? p : "NULL", mode,
                errno);
        exit(1);
    }
}

/* fopen, and a first line. */
static FILE *open_with(const char *p, const char *mode, const char *text) {
    FILE *f = fopen(p, mode);
    if (!f) fail(p);
    fputs(text, f);
    return f;
}

/* freopen, and a line into the reopened stream. */
static void reopen_with(const char *p, const char *mode, FILE *f, const char *text) {
    reopen(p, mode, f);
    fputs(text, f);
}

/* The whole content of a file read through a fresh stream. */
static char *slurp(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t r;
    while ((r = fread(b + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) b = realloc(b, cap *= 2);
    }
    *n = len;
    return b;
}

static void same_file(const char *p, const char *want, size_t wlen, FILE *through) {
    FILE *f = through ? through : fopen(p, "r");
    if (!f) fail("fopen for reading back");
    size_t n;
    char *got = slurp(f, &n);
    if (n != wlen || memcmp(got, want, n) != 0) fail(p);
    free(got);
    if (!through) fclose(f);
}

static char *expected_lines(int n, const char *fmt, size_t *len) {
    size_t cap = (size_t)n * 128 + 64, at = 0;
    char *b = malloc(cap);
    for (int i = 0; i < n; i++) at += snprintf(b + at, cap - at, fmt, i, i * 7);
    *len = at;
    return b;
}

#define LINE "line %d of the reopened stdout, value %d, padded to be longer ..........\n"

static int case_stdout(const char *dir) {
    printf("to the original stdout\n");
    fflush(stdout);
    char *out = path(dir, "out.txt");
    reopen(out, "w", stdout);
    for (int i = 0; i < 2000; i++) printf(LINE, i, i * 7);
    puts("end");
    if (fclose(stdout) != 0) fail("fclose stdout");
    size_t n;
    char *want = expected_lines(2000, LINE, &n);
    strcpy(want + n, "end\n");
    n += 4;
    same_file(out, want, n, NULL);
    reopen(out, "r", stdin);
    same_file(out, want, n, stdin);
    reopen(path(dir, "err.txt"), "w", stderr);
    for (int i = 0; i < 100; i++) fprintf(stderr, "diagnostic %d\n", i);
    fputs("no fclose of stderr\n", stderr);
    return 0;
}

static int case_exit(const char *dir) {
    reopen(path(dir, "o.txt"), "w", stdout);
    for (int i = 0; i < 50; i++) printf("buffered %d\n", i);
    return 0;
}

static int case_stream(const char *dir) {
    char line[256];
    FILE *f = open_with(path(dir, "a.txt"), "w", "first file\n");
    reopen_with(path(dir, "b.txt"), "w", f, "second file\n");
    if (ftell(f) != 12) fail("ftell after the reopen");
    reopen_with(NULL, "a", f, "appended after a mode change\n");
    reopen(path(dir, "a.txt"), "r", f);
    if (!fgets(line, sizeof line, f) || strcmp(line, "first file\n") != 0) fail("read a.txt back");
    if (fgetc(f) != EOF || !feof(f)) fail("a.txt EOF");
    reopen(path(dir, "b.txt"), "r+", f);
    if (feof(f)) fail("EOF indicator kept across freopen");
    if (fseek(f, 0, SEEK_SET) != 0) fail("fseek b.txt");
    fputs("SECOND", f);
    if (fseek(f, 0, SEEK_SET) != 0) fail("fseek b.txt again");
    if (!fgets(line, sizeof line, f) || strcmp(line, "SECOND file\n") != 0) fail("b.txt first line");
    if (!fgets(line, sizeof line, f) || strcmp(line, "appended after a mode change\n") != 0) fail("b.txt second line");
    reopen(path(dir, "c.txt"), "w+", f);
    fputs("written and read back\n", f);
    rewind(f);
    if (!fgets(line, sizeof line, f) || strcmp(line, "written and read back\n") != 0) fail("c.txt read back");
    if (fclose(f) != 0) fail("fclose");
    FILE *h = open_with(path(dir, "d.txt"), "w", "d\n");
    errno = 0;
    if (freopen(path(dir, "a.txt"), "wx", h) != NULL || errno != EEXIST) fail("freopen wx of an existing file");
    same_file(path(dir, "a.txt"), "first file\n", 11, NULL);
    same_file(path(dir, "d.txt"), "d\n", 2, NULL);
    printf("stream ok\n");
    return 0;
}

static int case_append(const char *dir) {
    char *log = path(dir, "log.txt"), *log2 = path(dir, "log2.txt");
    FILE *f = open_with(log, "w", "header\n");
    fclose(f);
    printf("before the reopen\n");
    fflush(stdout);
    reopen(log, "a", stdout);
    for (int i = 0; i < 500; i++) printf("appended %d\n", i);
    if (fclose(stdout) != 0) fail("fclose stdout");
    f = open_with(log, "a", "through fopen a\n");
    reopen_with(log2, "a", f, "a new file\n");
    reopen_with(log, "a", f, "again\n");
    fclose(f);
    static char all[16384];
    size_t at = snprintf(all, sizeof all, "header\n");
    for (int i = 0; i < 500; i++) at += snprintf(all + at, sizeof all - at, "appended %d\n", i);
    snprintf(all + at, sizeof all - at, "through fopen a\nagain\n");
    same_file(log, all, strlen(all), NULL);
    same_file(log2, "a new file\n", 11, NULL);
    reopen(path(dir, "log3.txt"), "a", stderr);
    fputs("stderr appends\n", stderr);
    return 0;
}

static int case_outside(const char *dir, const char *out) {
    char line[256];
    mkdir(out, 0755);
    char *x = path(out, "x.txt"), *y = path(out, "y.txt");
    reopen(x, "w", stdout);
    printf("outside the prefix\n");
    if (fclose(stdout) != 0) fail("fclose stdout");
    same_file(x, "outside the prefix\n", 19, NULL);
    reopen(x, "r", stdin);
    if (!fgets(line, sizeof line, stdin) || strcmp(line, "outside the prefix\n") != 0) fail("stdin outside");
    FILE *f = open_with(path(dir, "c.txt"), "w", "captured\n");
    reopen_with(y, "w", f, "moved outside\n");
    reopen_with(NULL, "a", f, "and appended\n");
    fclose(f);
    same_file(y, "moved outside\nand appended\n", 27, NULL);
    same_file(path(dir, "c.txt"), "captured\n", 9, NULL);
    return 0;
}

static int case_child(const char *dir) {
    char *out = path(dir, "out.txt");
    reopen(out, "w", stdout);
    printf("parent before\n");
    fflush(stdout);
    if (system("echo child; printf 'child printf\\n'") != 0) fail("system");
    printf("parent after\n");
    reopen(NULL, "a", stdout);
    printf("after the mode change\n");
    if (fclose(stdout) != 0) fail("fclose");
    const char *want = "parent before\nchild\nchild printf\nparent after\nafter the mode change\n";
    same_file(out, want, strlen(want), NULL);
    return 0;
}

static int case_seek(const char *dir) {
    reopen(path(dir, "w.txt"), "w", stdout);
    printf("abc\n");
    fseek(stdout, 10, SEEK_SET);
    printf("def\n");
    fseek(stdout, 1, SEEK_SET);
    printf("Z");
    char *a = path(dir, "a.txt");
    fclose(open_with(a, "w", "0123456789\n"));
    reopen(a, "a", stdout);
    printf("x\n");
    printf("at %ld\n", ftell(stdout));
    return 0;
}

static int case_refused(const char *dir) {
    FILE *r = freopen(path(dir, "rw.txt"), "w+", stdout);
    fprintf(stderr, "freopen w+ of stdout: %s\n", r ? "reopened" : strerror(errno));
    printf("written to stdout\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) fail("usage: freopen_io CASE DIR [OUT]");
    const char *c = argv[1], *dir = argv[2];
    if (!strcmp(c, "stdout")) return case_stdout(dir);
    if (!strcmp(c, "exit")) return case_exit(dir);
    if (!strcmp(c, "stream")) return case_stream(dir);
    if (!strcmp(c, "append")) return case_append(dir);
    if (!strcmp(c, "outside") && argc == 4) return case_outside(dir, argv[3]);
    if (!strcmp(c, "child")) return case_child(dir);
    if (!strcmp(c, "seek")) return case_seek(dir);
    if (!strcmp(c, "refused")) return case_refused(dir);
    fail("unknown case");
}
