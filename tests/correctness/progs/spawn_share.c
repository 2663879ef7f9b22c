/* spawn_share: a reopened stdout shared with children that write through
 * capture, the parent writing through glibc's stdio (past the wrappers)
 * before and after each child: posix_spawn + waitpid, fork + execv + wait,
 * fork + execv + waitid. Every child's bytes must stay where it wrote them.
 *
 * Usage: spawn_share DIR */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static pid_t child(const char *what) {
    char *args[] = {"/bin/echo", (char *)what, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        execv("/bin/echo", args);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/out.txt", argv[1]);
    if (!freopen(path, "w", stdout)) return 1;
    printf("parent before\n");
    fflush(stdout);
    pid_t pid;
    char *args[] = {"/bin/echo", "spawned child", NULL};
    if (posix_spawn(&pid, "/bin/echo", NULL, NULL, args, environ)) return 3;
    if (waitpid(pid, NULL, 0) != pid) return 4;
    printf("parent after spawn\n");
    fflush(stdout);
    pid = child("forked child");
    if (wait(NULL) != pid) return 5;
    printf("parent after fork\n");
    fflush(stdout);
    pid = child("waitid child");
    siginfo_t info;
    if (waitid(P_PID, (id_t)pid, &info, WEXITED)) return 6;
    printf("parent at the end\n");
    return fclose(stdout) ? 7 : 0;
}
