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
    if (freopen(out, "w", stdout) != stdout) fail("freopen stdout");
    for (int i = 0; i < 2000; i++) printf(LINE, i, i * 7);
    puts("end");
    if (fclose(stdout) != 0) fail("fclose stdout");
    size_t n;
    char *want = expected_lines(2000, LINE, &n);
    strcpy(want + n, "end\n");
    n += 4;
    same_file(out, want, n, NULL);
    if (freopen(out, "r", stdin) != stdin) fail("freopen stdin");
    same_file(out, want, n, stdin);
    if (freopen(path(dir, "err.txt"), "w", stderr) != stderr) fail("freopen stderr");
    for (int i = 0; i < 100; i++) fprintf(stderr, "diagnostic %d\n", i);
    fputs("no fclose of stderr\n", stderr);
    return 0;
}

static int case_exit(const char *dir) {
    if (freopen(path(dir, "o.txt"), "w", stdout) != stdout) fail("freopen stdout");
    for (int i = 0; i < 50; i++) printf("buffered %d\n", i);
    return 0;
}

static int case_stream(const char *dir) {
    char line[256];
    FILE *f = fopen(path(dir, "a.txt"), "w");
    if (!f) fail("fopen a.txt");
    fputs("first file\n", f);
    if (freopen(path(dir, "b.txt"), "w", f) != f) fail("freopen onto b.txt");
    fputs("second file\n", f);
    if (ftell(f) != 12) fail("ftell after the reopen");
    if (freopen(NULL, "a", f) != f) fail("freopen NULL a");
    fputs("appended after a mode change\n", f);
    if (freopen(path(dir, "a.txt"), "r", f) != f) fail("freopen a.txt r");
    if (!fgets(line, sizeof line, f) || strcmp(line, "first file\n") != 0) fail("read a.txt back");
    if (fgetc(f) != EOF || !feof(f)) fail("a.txt EOF");
    if (freopen(path(dir, "b.txt"), "r+", f) != f) fail("freopen b.txt r+");
    if (feof(f)) fail("EOF indicator kept across freopen");
    if (fseek(f, 0, SEEK_SET) != 0) fail("fseek b.txt");
    fputs("SECOND", f);
    if (fseek(f, 0, SEEK_SET) != 0) fail("fseek b.txt again");
    if (!fgets(line, sizeof line, f) || strcmp(line, "SECOND file\n") != 0) fail("b.txt first line");
    if (!fgets(line, sizeof line, f) || strcmp(line, "appended after a mode change\n") != 0) fail("b.txt second line");
    if (freopen(path(dir, "c.txt"), "w+", f) != f) fail("freopen c.txt w+");
    fputs("written and read back\n", f);
    rewind(f);
    if (!fgets(line, sizeof line, f) || strcmp(line, "written and read back\n") != 0) fail("c.txt read back");
    if (fclose(f) != 0) fail("fclose");
    FILE *h = fopen(path(dir, "d.txt"), "w");
    if (!h) fail("fopen d.txt");
    fputs("d\n", h);
    errno = 0;
    if (freopen(path(dir, "a.txt"), "wx", h) != NULL || errno != EEXIST) fail("freopen wx of an existing file");
    same_file(path(dir, "a.txt"), "first file\n", 11, NULL);
    same_file(path(dir, "d.txt"), "d\n", 2, NULL);
    printf("stream ok\n");
    return 0;
}

static int case_append(const char *dir) {
    char *log = path(dir, "log.txt"), *log2 = path(dir, "log2.txt");
    FILE *f = fopen(log, "w");
    if (!f) fail("fopen log.txt");
    fputs("header\n", f);
    fclose(f);
    printf("before the reopen\n");
    fflush(stdout);
    if (freopen(log, "a", stdout) != stdout) fail("freopen stdout a");
    for (int i = 0; i < 500; i++) printf("appended %d\n", i);
    if (fclose(stdout) != 0) fail("fclose stdout");
    f = fopen(log, "a");
    if (!f) fail("fopen a");
    fputs("through fopen a\n", f);
    if (freopen(log2, "a", f) != f) fail("freopen log2 a");
    fputs("a new file\n", f);
    if (freopen(log, "a", f) != f) fail("freopen log a");
    fputs("again\n", f);
    fclose(f);
    static char all[16384];
    size_t at = snprintf(all, sizeof all, "header\n");
    for (int i = 0; i < 500; i++) at += snprintf(all + at, sizeof all - at, "appended %d\n", i);
    snprintf(all + at, sizeof all - at, "through fopen a\nagain\n");
    same_file(log, all, strlen(all), NULL);
    same_file(log2, "a new file\n", 11, NULL);
    if (freopen(path(dir, "log3.txt"), "a", stderr) != stderr) fail("freopen stderr a");
    fputs("stderr appends\n", stderr);
    return 0;
}

static int case_outside(const char *dir, const char *out) {
    char line[256];
    mkdir(out, 0755);
    char *x = path(out, "x.txt"), *y = path(out, "y.txt");
    if (freopen(x, "w", stdout) != stdout) fail("freopen stdout outside");
    printf("outside the prefix\n");
    if (fclose(stdout) != 0) fail("fclose stdout");
    same_file(x, "outside the prefix\n", 19, NULL);
    if (freopen(x, "r", stdin) != stdin) fail("freopen stdin outside");
    if (!fgets(line, sizeof line, stdin) || strcmp(line, "outside the prefix\n") != 0) fail("stdin outside");
    FILE *f = fopen(path(dir, "c.txt"), "w");
    if (!f) fail("fopen c.txt");
    fputs("captured\n", f);
    if (freopen(y, "w", f) != f) fail("freopen onto y.txt");
    fputs("moved outside\n", f);
    if (freopen(NULL, "a", f) != f) fail("freopen NULL a outside");
    fputs("and appended\n", f);
    fclose(f);
    same_file(y, "moved outside\nand appended\n", 27, NULL);
    same_file(path(dir, "c.txt"), "captured\n", 9, NULL);
    return 0;
}

static int case_child(const char *dir) {
    char *out = path(dir, "out.txt");
    if (freopen(out, "w", stdout) != stdout) fail("freopen stdout");
    printf("parent before\n");
    fflush(stdout);
    if (system("echo child; printf 'child printf\\n'") != 0) fail("system");
    printf("parent after\n");
    if (freopen(NULL, "a", stdout) != stdout) fail("freopen NULL a");
    printf("after the mode change\n");
    if (fclose(stdout) != 0) fail("fclose");
    const char *want = "parent before\nchild\nchild printf\nparent after\nafter the mode change\n";
    same_file(out, want, strlen(want), NULL);
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
    if (!strcmp(c, "refused")) return case_refused(dir);
    fail("unknown case");
}
