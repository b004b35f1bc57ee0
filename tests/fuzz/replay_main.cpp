// Regression driver for a libFuzzer target without libFuzzer: feeds every
// regular file of the given directories (or the given files) to
// LLVMFuzzerTestOneInput once. Any violated invariant aborts the process, so
// CTest sees the failure; the name of the input is printed first.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
bool run_file(const std::filesystem::path& f) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "replay: cannot read %s\n", f.string().c_str());
        return false;
    }
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "replay: %s\n", f.string().c_str()); // names the input if it aborts
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    return true;
}
} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <corpus dir or file>...\n", argv[0]);
        return 2;
    }
    std::size_t runs = 0;
    for (int i = 1; i < argc; ++i) {
        const std::filesystem::path p(argv[i]);
        std::vector<std::filesystem::path> files;
        if (std::filesystem::is_directory(p)) {
            for (const auto& e : std::filesystem::directory_iterator(p))
                if (e.is_regular_file()) files.push_back(e.path());
        } else {
            files.push_back(p);
        }
        std::sort(files.begin(), files.end());
        for (const auto& f : files) {
            if (!run_file(f)) return 1;
            ++runs;
        }
    }
    // An empty corpus would make this test pass while checking nothing.
    if (runs == 0) {
        std::fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    std::printf("replay: %zu inputs OK\n", runs);
    return 0;
}
