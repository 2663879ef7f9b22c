/* ftw, nftw and nftw64 over a tree whose files exist in capture's view only
   (a separate remote): files written and closed, nested directories, a
   link, a dangling link. Each walk's visits (type flag, level, path below
   DIR, size of regular files) are printed sorted, for the comparison with
   the direct run (readdir order differs); the walk checks itself what
   sorting hides: FTW_DEPTH reports a directory after its entries,
   FTW_CHDIR stands in the entry's directory, FTW_SKIP_SUBTREE and
   FTW_STOP take effect.
   Usage: walk DIR */
#define _GNU_SOURCE
#define _LARGEFILE64_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *root;
static char *lines[256];
static int nlines, bad;
static char order[256][512]; /* every visit, in order, for FTW_DEPTH */
static int norder;

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static void file(const char *rel, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) fail(p);
}

static int record(const char *path, const struct stat *sb, int flag, struct FTW *ftw, int chdir_check) {
    const char *rel = path + strlen(root);
    char line[600];
    snprintf(line, sizeof line, "%d %d %s %lld", flag, ftw ? ftw->level : -1, *rel ? rel : "(root)",
             flag == FTW_F ? (long long)sb->st_size : -1LL);
    if (nlines < 256) lines[nlines++] = strdup(line);
    if (norder < 256) snprintf(order[norder++], 512, "%d %s", flag, rel);
    if (ftw && strcmp(path + ftw->base, strrchr(path, '/') ? strrchr(path, '/') + 1 : path)) {
        printf("base %d wrong for %s\n", ftw->base, rel);
        bad = 1;
    }
    if (chdir_check && flag != FTW_SLN) {
        struct stat here;
        if (lstat(path + ftw->base, &here) != 0) {
            printf("FTW_CHDIR: %s not in the current directory\n", rel);
            bad = 1;
        }
    }
    return 0;
}

static int plain(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    return record(p, sb, flag, ftw, 0);
}
static int in_dir(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    return record(p, sb, flag, ftw, 1);
}
static int old(const char *p, const struct stat *sb, int flag) { return record(p, sb, flag, NULL, 0); }
static int skip_sub(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    record(p, sb, flag, ftw, 0);
    return flag == FTW_D && !strcmp(p + ftw->base, "a") ? FTW_SKIP_SUBTREE : FTW_CONTINUE;
}
static int stop_at(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    record(p, sb, flag, ftw, 0);
    return !strcmp(p + ftw->base, "deep.txt") ? 42 : 0;
}
static int walk64(const char *p, const struct stat64 *sb, int flag, struct FTW *ftw) {
    return record(p, (const struct stat *)sb, flag, ftw, 0);
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void show(const char *name, int rc) {
    qsort(lines, nlines, sizeof *lines, cmp);
    printf("%s: rc %d, %d visits\n", name, rc, nlines);
    for (int i = 0; i < nlines; i++) {
        printf("  %s\n", lines[i]);
        free(lines[i]);
    }
    nlines = 0;
}

/* FTW_DEPTH: every visit below a directory comes before the directory's. */
static void depth_order(void) {
    for (int i = 0; i < norder; i++) {
        const char *rel = strchr(order[i], ' ') + 1;
        size_t n = strlen(rel);
        for (int j = i + 1; j < norder; j++) {
            const char *other = strchr(order[j], ' ') + 1;
            if (!strncmp(other, rel, n) && other[n] == '/') {
                printf("FTW_DEPTH: %s visited after %s\n", other, rel);
                bad = 1;
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    root = argv[1];
    char p[512];
    const char *dirs[] = {"a", "a/b", "a/b/c", "e"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
        if (mkdir(p, 0755)) fail(p);
    }
    file("top.txt", "top level\n");
    file("a/one.txt", "one\n");
    file("a/b/two.txt", "two two\n");
    file("a/b/c/deep.txt", "the deepest file\n");
    snprintf(p, sizeof p, "%s/link", root);
    if (symlink("a/one.txt", p)) fail("symlink");
    snprintf(p, sizeof p, "%s/dangling", root);
    if (symlink("nowhere", p)) fail("symlink");

    show("nftw", nftw(root, plain, 4, 0));
    show("nftw FTW_PHYS", nftw(root, plain, 4, FTW_PHYS));
    norder = 0;
    show("nftw FTW_PHYS|FTW_DEPTH", nftw(root, plain, 2, FTW_PHYS | FTW_DEPTH));
    depth_order();
    char cwd[512], after[512];
    if (!getcwd(cwd, sizeof cwd)) fail("getcwd");
    show("nftw FTW_CHDIR", nftw(root, in_dir, 4, FTW_CHDIR | FTW_PHYS));
    if (!getcwd(after, sizeof after) || strcmp(cwd, after)) printf("FTW_CHDIR left the cwd at %s\n", after), bad = 1;
    show("nftw FTW_ACTIONRETVAL skip a", nftw(root, skip_sub, 4, FTW_ACTIONRETVAL | FTW_PHYS));
    int rc = nftw(root, stop_at, 4, FTW_PHYS);
    nlines = 0; /* which entries came before the stop depends on readdir order */
    printf("nftw stopped: rc %d\n", rc);
    show("ftw", ftw(root, old, 4));
    snprintf(p, sizeof p, "%s/a/", root);
    show("nftw64 of a/", nftw64(p, walk64, 4, FTW_PHYS));
    snprintf(p, sizeof p, "%s/top.txt", root);
    show("nftw of a file", nftw(p, plain, 4, 0));
    snprintf(p, sizeof p, "%s/missing", root);
    rc = nftw(p, plain, 4, 0);
    printf("nftw of a missing path: rc %d\n", rc);
    printf(bad ? "walk checks FAILED\n" : "walk checks ok\n");
    return bad;
}
