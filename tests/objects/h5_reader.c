/* An unmodified HDF5 program, as any user would write it (tests/objects):
 * reads the dataset /data of FILE, whole or the hyperslab START COUNT
 * (comma-separated), and writes its values raw to OUT. No paralog in it. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int list(const char *s, hsize_t *v, int max)
{
    int n = 0;
    for (char *p = (char *)s; *p && n < max; p++) {
        v[n++] = strtoull(p, &p, 10);
        if (*p != ',')
            break;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: h5_reader FILE OUT [START COUNT]\n");
        return 2;
    }
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, "/data", H5P_DEFAULT);
    if (d < 0)
        return 1;
    hid_t t = H5Dget_type(d), fs = H5Dget_space(d);
    int rank = H5Sget_simple_extent_ndims(fs);
    hsize_t start[32], count[32];
    H5Sget_simple_extent_dims(fs, count, NULL);
    memset(start, 0, sizeof start);
    if (argc == 5 && (list(argv[3], start, 32) != rank || list(argv[4], count, 32) != rank)) {
        fprintf(stderr, "h5_reader: START and COUNT need %d values\n", rank);
        return 2;
    }
    size_t n = H5Tget_size(t);
    for (int i = 0; i < rank; i++)
        n *= count[i];
    void *buf = malloc(n ? n : 1);
    hid_t ms = H5Screate_simple(rank, count, NULL);
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dread(d, t, ms, fs, H5P_DEFAULT, buf) < 0)
        return 1;
    FILE *o = fopen(argv[2], "wb");
    if (!o || fwrite(buf, 1, n, o) != n || fclose(o))
        return 1;
    H5Sclose(ms);
    H5Sclose(fs);
    H5Tclose(t);
    H5Dclose(d);
    H5Fclose(f);
    free(buf);
    return 0;
}
