// Drives a fuzz target without libFuzzer (the suite's GCC build): every file of the corpus
// given, then random mutations of them (bit flips, byte changes, cuts, insertions, splices)
// from a fixed seed, for --seconds. Exits non-zero only by crashing.
//
//   frame_codec_fuzzer --seconds=5 tests/fuzz/corpus/frame_codec_fuzzer
//   frame_codec_fuzzer --write_seeds=tests/fuzz/corpus/frame_codec_fuzzer
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "tests/fuzz/fuzz_target.h"

namespace {

std::string ReadWhole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::string Mutate(std::string input, const std::vector<std::string>& corpus,
                   std::mt19937_64& rng) {
  auto below = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  const int mutations = 1 + static_cast<int>(below(4));
  for (int m = 0; m < mutations; ++m) {
    switch (below(7)) {
      case 0:  // flip a bit
        if (!input.empty()) input[below(input.size())] ^= static_cast<char>(1 << below(8));
        break;
      case 1:  // an interesting byte
        if (!input.empty()) {
          static const char kBytes[] = {0, 1, 0x7f, static_cast<char>(0x80),
                                        static_cast<char>(0xff)};
          input[below(input.size())] = kBytes[below(sizeof(kBytes))];
        }
        break;
      case 2:  // cut a range out
        if (!input.empty()) {
          const size_t at = below(input.size());
          input.erase(at, 1 + below(input.size() - at));
        }
        break;
      case 3: {  // insert random bytes
        std::string bytes(1 + below(16), '\0');
        for (char& c : bytes) c = static_cast<char>(rng());
        input.insert(below(input.size() + 1), bytes);
        break;
      }
      case 4:  // repeat a range
        if (!input.empty() && input.size() < (1 << 16)) {
          const size_t at = below(input.size());
          const std::string range = input.substr(at, 1 + below(input.size() - at));
          input.insert(below(input.size() + 1), range);
        }
        break;
      case 5: {  // splice with another input
        const std::string& other = corpus[below(corpus.size())];
        input = input.substr(0, below(input.size() + 1)) + other.substr(below(other.size() + 1));
        break;
      }
      case 6:  // truncate
        input.resize(below(input.size() + 1));
        break;
    }
  }
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--seconds=", 0) == 0) {
      seconds = std::stod(arg.substr(10));
    } else if (arg.rfind("--write_seeds=", 0) == 0) {
      const std::filesystem::path dir = arg.substr(14);
      std::filesystem::create_directories(dir);
      const std::vector<std::string> seeds = HetpsFuzzSeeds();
      for (size_t s = 0; s < seeds.size(); ++s) {
        std::ofstream(dir / ("seed-" + std::to_string(s)), std::ios::binary) << seeds[s];
      }
      std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
      return 0;
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        corpus.push_back(ReadWhole(entry.path()));
      }
    } else {
      corpus.push_back(ReadWhole(arg));
    }
  }
  for (const std::string& seed : HetpsFuzzSeeds()) corpus.push_back(seed);
  for (const std::string& input : corpus) Run(input);
  std::mt19937_64 rng(20261201);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = corpus.size();
  while (std::chrono::steady_clock::now() < end) {
    for (int batch = 0; batch < 64; ++batch, ++runs) {
      Run(Mutate(corpus[rng() % corpus.size()], corpus, rng));
    }
  }
  std::printf("%llu inputs (%zu from the corpus), no crash\n",
              static_cast<unsigned long long>(runs), corpus.size());
  return 0;
}
