// fstream_ckpt: C++ streams. Usage: fstream_ckpt DIR
// DIR/state.bin  std::ofstream binary writes; then std::fstream in|out
//                rewrites a range with seekp; read back with std::ifstream.
// DIR/report.txt std::ofstream text, then std::ios::app.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

static void fail(const char *what) { std::cerr << "fstream_ckpt: " << what << "\n"; std::exit(1); }

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: fstream_ckpt DIR");
    std::string dir = argv[1];
    std::vector<double> v(50000);
    for (size_t i = 0; i < v.size(); i++) v[i] = 0.5 * double(i);
    {
        std::ofstream out(dir + "/state.bin", std::ios::binary);
        if (!out) fail("ofstream");
        out.write(reinterpret_cast<const char *>(v.data()), std::streamsize(v.size() * sizeof(double)));
        if (!out) fail("write");
    }
    {
        std::fstream io(dir + "/state.bin", std::ios::in | std::ios::out | std::ios::binary);
        if (!io) fail("fstream");
        io.seekp(8 * 1000);
        double x = -1.0;
        for (int i = 0; i < 10; i++) io.write(reinterpret_cast<const char *>(&x), sizeof x);
        io.seekg(8 * 999);
        double y = 0;
        io.read(reinterpret_cast<char *>(&y), sizeof y);
        if (!io || y != 0.5 * 999) fail("read in fstream");
    }
    {
        std::ofstream t(dir + "/report.txt");
        t << "first line " << 1 << "\n";
    }
    {
        std::ofstream t(dir + "/report.txt", std::ios::app);
        t << "appended " << 2.5 << "\n";
    }
    std::ifstream in(dir + "/state.bin", std::ios::binary);
    std::vector<double> w(v.size());
    in.read(reinterpret_cast<char *>(w.data()), std::streamsize(w.size() * sizeof(double)));
    if (!in) fail("ifstream read");
    for (size_t i = 0; i < w.size(); i++) {
        double want = (i >= 1000 && i < 1010) ? -1.0 : 0.5 * double(i);
        if (w[i] != want) fail("content");
    }
    std::cout << "fstream_ckpt ok\n";
    return 0;
}
