/* static_write: a statically linked program (LD_PRELOAD cannot reach it)
 * writes FILE with stdio. Usage: static_write FILE */
#include <stdio.h>
int main(int c, char **v) { FILE *f = fopen(v[1], "w"); fputs("static\n", f); fclose(f); return 0; }
