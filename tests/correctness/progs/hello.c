/* A program built into the prefix and run from there (posix_programs,
   exec): prints its argv. */
#include <stdio.h>

int main(int argc, char **argv) {
    for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "hello: ", argv[i]);
    printf("\n");
    return 0;
}
