/* identity: two opens of one path report the same st_dev/st_ino (HDF5
 * relies on it), a different path another. Usage: identity DIR */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/one.bin", argv[1]);
    snprintf(b, sizeof b, "%s/two.bin", argv[1]);
    int f1 = open(a, O_CREAT | O_RDWR, 0644), f2 = open(a, O_RDWR), f3 = open(b, O_CREAT | O_RDWR, 0644);
    struct stat s1, s2, s3, sp;
    if (f1 < 0 || f2 < 0 || f3 < 0 || fstat(f1, &s1) || fstat(f2, &s2) || fstat(f3, &s3) || stat(a, &sp)) { perror("identity"); return 1; }
    if (s1.st_dev != s2.st_dev || s1.st_ino != s2.st_ino) { fprintf(stderr, "identity: two opens of one path differ\n"); return 1; }
    if (sp.st_ino != s1.st_ino) { fprintf(stderr, "identity: stat and fstat differ\n"); return 1; }
    if (s1.st_ino == s3.st_ino && s1.st_dev == s3.st_dev) { fprintf(stderr, "identity: two paths share an inode\n"); return 1; }
    if (write(f1, "x", 1) != 1) return 1;
    close(f1); close(f2); close(f3);
    printf("identity ok\n");
    return 0;
}
