/* Temporary names under the prefix, as `sed -i`, `sort -o` and libraries'
 * safe saves make them: mkstemp + write + fsync + rename onto the final
 * name, mkostemps with a suffix and flags, mkdtemp with a file inside.
 * Prints what it checked; the names are random, so the tree keeps only
 * the final names. Usage: tempfiles DIR */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void save(const char *dir, const char *final, const char *text) {
    char tmpl[4096], dst[4096];
    snprintf(tmpl, sizeof tmpl, "%s/.%s.XXXXXX", dir, final);
    snprintf(dst, sizeof dst, "%s/%s", dir, final);
    int fd = mkstemp(tmpl);
    if (fd < 0) die("mkstemp");
    if (strstr(tmpl, "XXXXXX")) { fprintf(stderr, "template not filled: %s\n", tmpl); exit(1); }
    if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die("write");
    if (fsync(fd) != 0) die("fsync");
    if (close(fd) != 0) die("close");
    if (rename(tmpl, dst) != 0) die("rename");
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    const char *d = argv[1];
    save(d, "config.txt", "version 1\n");
    save(d, "config.txt", "version 2, replacing version 1\n");

    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/log-XXXXXX.csv", d);
    int fd = mkostemps(tmpl, 4, O_APPEND | O_CLOEXEC);
    if (fd < 0) die("mkostemps");
    if (strcmp(tmpl + strlen(tmpl) - 4, ".csv") != 0) { fprintf(stderr, "suffix lost: %s\n", tmpl); return 1; }
    if (write(fd, "a,b\n1,2\n", 8) != 8) die("write csv");
    close(fd);
    char final[4096];
    snprintf(final, sizeof final, "%s/log.csv", d);
    if (rename(tmpl, final) != 0) die("rename csv");

    snprintf(tmpl, sizeof tmpl, "%s/work.XXXXXX", d);
    if (!mkdtemp(tmpl)) die("mkdtemp");
    char inside[4096];
    snprintf(inside, sizeof inside, "%s/part.dat", tmpl);
    FILE *f = fopen(inside, "w");
    if (!f) die("fopen in mkdtemp dir");
    fputs("inside a mkdtemp directory\n", f);
    fclose(f);
    char dst[4096];
    snprintf(dst, sizeof dst, "%s/part.dat", d);
    if (rename(inside, dst) != 0) die("rename out of the mkdtemp dir");
    if (rmdir(tmpl) != 0) die("rmdir mkdtemp dir");

    /* A template without XXXXXX is refused, as glibc does. */
    snprintf(tmpl, sizeof tmpl, "%s/no-x", d);
    errno = 0;
    if (mkstemp(tmpl) != -1 || errno != EINVAL) { fprintf(stderr, "bad template accepted\n"); return 1; }
    puts("tempfiles ok");
    return 0;
}
