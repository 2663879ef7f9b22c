/* execl, execlp and execle (variadic: glibc builds the vector and calls its
 * own execve inside). In a child each: a file written under DIR and left
 * open, then the exec of a shell that copies it and prints its arguments
 * (more than fit in registers) and its environment (the program's, plus
 * FORM); and execl of a script
 * written into DIR. Every output must be the direct run's.
 * Usage: execl_forms DIR */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;

static void write_file(const char *name, const char *text, mode_t mode, int keep_open) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        perror(path);
        exit(2);
    }
    if (!keep_open)
        close(fd);
}

static void wait_child(pid_t pid, const char *form) {
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: the child failed\n", form);
        exit(3);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: execl_forms DIR\n");
        return 2;
    }
    /* Relative names: what is written holds no path of the run's. */
    if (chdir(argv[1]) != 0) {
        perror(argv[1]);
        return 2;
    }
    dir = ".";
    char script[8192];
    const char *forms[] = {"execl", "execlp", "execle"};
    for (int i = 0; i < 3; i++) {
        const char *form = forms[i];
        char name[64], text[128];
        snprintf(name, sizeof name, "%s.txt", form);
        snprintf(text, sizeof text, "written by the parent before %s\n", form);
        snprintf(script, sizeof script,
                 "cat %s/%s.txt > %s/%s.copy; echo \"$0 $1 $2 $3 $4 $5 $6 $7 $8 $9 ${FORM:-none}\" >> %s/%s.copy",
                 dir, form, dir, form, dir, form);
        pid_t pid = fork();
        if (pid == 0) {
            write_file(name, text, 0644, 1);
            /* The environment passed on (LD_PRELOAD in it: an exec that
             * drops it runs without capture, named MISSED), plus FORM. */
            extern char **environ;
            size_t n = 0;
            while (environ[n])
                n++;
            char **env = calloc(n + 2, sizeof *env);
            memcpy(env, environ, n * sizeof *env);
            env[n] = "FORM=from-execle";
            if (i == 0)
                execl("/bin/sh", "sh", "-c", script, "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8",
                      (char *)NULL);
            else if (i == 1)
                execlp("sh", "sh", "-c", script, "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8",
                       (char *)NULL);
            else
                execle("/bin/sh", "sh", "-c", script, "e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8",
                       (char *)NULL, env);
            perror(form);
            _exit(4);
        }
        wait_child(pid, form);
    }
    /* A script written into DIR, run by execl. */
    snprintf(script, sizeof script, "#!/bin/sh\necho \"script ran with $1\" > %s/script.out\n", dir);
    write_file("run.sh", script, 0755, 0);
    pid_t pid = fork();
    if (pid == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/run.sh", dir);
        execl(path, "run.sh", "its-argument", (char *)NULL);
        perror(path);
        _exit(4);
    }
    wait_child(pid, "execl of a script");
    printf("execl forms done\n");
    return 0;
}
