/* mmap_write: maps a file shared and writable and stores into it.
 * Usage: mmap_write FILE. Under capture the mmap must fail with a clear
 * error (exit 3 here), never a SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); return 1; }
    if (ftruncate(fd, 4096) != 0) { perror("ftruncate"); return 1; }
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { fprintf(stderr, "mmap_write: mmap refused: %s\n", strerror(errno)); return 3; }
    memcpy(p, "mapped", 6);
    munmap(p, 4096);
    close(fd);
    return 0;
}
