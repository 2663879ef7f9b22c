/* A write through io_uring (the raw system calls, no liburing): it passes
 * every wrapper, so under capture its bytes land in the placeholder and the
 * file's consistency point (its close) must refuse the epoch, naming the
 * file, instead of losing or committing them silently.
 * Usage: uring_write FILE   (prints what write, io_uring and close said) */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: uring_write FILE\n");
        return 2;
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "through write\n", 14) != 14) {
        perror(argv[1]);
        return 2;
    }
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ring = (int)syscall(__NR_io_uring_setup, 4, &p);
    if (ring < 0) {
        printf("io_uring unavailable: %s\n", strerror(errno));
        return 4;
    }
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
        perror("mmap of the rings");
        return 2;
    }
    static const char text[] = "through io_uring\n";
    unsigned tail = *(unsigned *)(sq + p.sq_off.tail);
    unsigned idx = tail & *(unsigned *)(sq + p.sq_off.ring_mask);
    memset(&sqes[idx], 0, sizeof sqes[idx]);
    sqes[idx].opcode = IORING_OP_WRITE;
    sqes[idx].fd = fd;
    sqes[idx].addr = (unsigned long)text;
    sqes[idx].len = sizeof text - 1;
    sqes[idx].off = 14;
    ((unsigned *)(sq + p.sq_off.array))[idx] = idx;
    __atomic_store_n((unsigned *)(sq + p.sq_off.tail), tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) {
        perror("io_uring_enter");
        return 2;
    }
    unsigned head = *(unsigned *)(cq + p.cq_off.head);
    struct io_uring_cqe *cqe = (struct io_uring_cqe *)(cq + p.cq_off.cqes) +
                               (head & *(unsigned *)(cq + p.cq_off.ring_mask));
    printf("io_uring write: %d\n", cqe->res);
    __atomic_store_n((unsigned *)(cq + p.cq_off.head), head + 1, __ATOMIC_RELEASE);
    int rc = close(fd);
    printf("close: %s\n", rc == 0 ? "ok" : strerror(errno));
    return 0;
}
