/* exit_open: writes with write() and returns from main without closing
 * (the kernel closes at exit). Usage: exit_open FILE */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); return 1; }
    const char *m = "written, never closed\n";
    if (write(fd, m, strlen(m)) != (ssize_t)strlen(m)) { perror("write"); return 1; }
    return 0;
}
