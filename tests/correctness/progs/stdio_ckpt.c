/* stdio_ckpt: a C program that checkpoints the way C codes do, through
 * stdio only. Usage: stdio_ckpt DIR
 *
 * DIR/ckpt.bin   fopen "wb", fwrite 3 blocks, fseek back and rewrite the
 *                middle one, ftell checked, fflush, fclose;
 * DIR/log.txt    fopen "w" + fprintf, then fopen "a" twice (append mode);
 * DIR/rw.bin     fopen "w+": write, rewind, read back before close;
 * DIR/fd.bin     open() + fdopen() of the descriptor, fileno() checked;
 * then every file is read back with fopen "rb" and checked.
 * Exit status 1 (and a line naming the check) on any mismatch. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 100000

static int fail(const char *what) { fprintf(stderr, "stdio_ckpt: %s\n", what); exit(1); }

static void fill(unsigned char *b, int seed) { for (int i = 0; i < BLOCK; i++) b[i] = (unsigned char)(i * 7 + seed); }

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: stdio_ckpt DIR");
    char p[4096];
    static unsigned char buf[BLOCK], back[3 * BLOCK];

    snprintf(p, sizeof p, "%s/ckpt.bin", argv[1]);
    FILE *f = fopen(p, "wb");
    if (!f) fail("fopen ckpt.bin");
    for (int k = 0; k < 3; k++) { fill(buf, k); if (fwrite(buf, 1, BLOCK, f) != BLOCK) fail("fwrite"); }
    if (ftell(f) != 3 * BLOCK) fail("ftell after writes");
    if (fseek(f, BLOCK, SEEK_SET) != 0) fail("fseek");
    fill(buf, 9);
    if (fwrite(buf, 1, BLOCK, f) != BLOCK) fail("fwrite rewrite");
    if (ftell(f) != 2 * BLOCK) fail("ftell after rewrite");
    if (fflush(f) != 0) fail("fflush");
    if (fsync(fileno(f)) != 0) fail("fsync(fileno)");
    if (fclose(f) != 0) fail("fclose");

    snprintf(p, sizeof p, "%s/log.txt", argv[1]);
    f = fopen(p, "w");
    if (!f) fail("fopen log.txt");
    fprintf(f, "step %d energy %.6f\n", 0, 1.5);
    fclose(f);
    for (int s = 1; s <= 2; s++) {
        f = fopen(p, "a");
        if (!f) fail("fopen a");
        fputs("appended ", f);
        fprintf(f, "step %d energy %.6f\n", s, 1.5 * s);
        fclose(f);
    }

    snprintf(p, sizeof p, "%s/rw.bin", argv[1]);
    f = fopen(p, "w+");
    if (!f) fail("fopen w+");
    fill(buf, 3);
    fwrite(buf, 1, BLOCK, f);
    rewind(f);
    memset(back, 0, BLOCK);
    if (fread(back, 1, BLOCK, f) != BLOCK || memcmp(back, buf, BLOCK) != 0) fail("read back before close");
    fclose(f);

    snprintf(p, sizeof p, "%s/fd.bin", argv[1]);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) fail("open fd.bin");
    f = fdopen(fd, "w");
    if (!f) fail("fdopen");
    if (fileno(f) != fd) fail("fileno of fdopen");
    fprintf(f, "through fdopen %d\n", 42);
    fclose(f);

    /* Read everything back through stdio. */
    snprintf(p, sizeof p, "%s/ckpt.bin", argv[1]);
    f = fopen(p, "rb");
    if (!f) fail("fopen rb");
    if (fread(back, 1, 3 * BLOCK, f) != 3 * BLOCK) fail("fread ckpt.bin");
    fill(buf, 0); if (memcmp(back, buf, BLOCK)) fail("block 0");
    fill(buf, 9); if (memcmp(back + BLOCK, buf, BLOCK)) fail("block 1 (rewritten)");
    fill(buf, 2); if (memcmp(back + 2 * BLOCK, buf, BLOCK)) fail("block 2");
    if (fgetc(f) != EOF) fail("EOF");
    fclose(f);
    snprintf(p, sizeof p, "%s/log.txt", argv[1]);
    f = fopen(p, "r");
    char line[256]; int lines = 0;
    while (f && fgets(line, sizeof line, f)) lines++;
    if (!f || lines != 3) fail("log.txt has 3 lines");
    fclose(f);
    printf("stdio_ckpt ok\n");
    return 0;
}
