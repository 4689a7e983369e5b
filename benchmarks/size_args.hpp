// What the benchmarks with their own command lines share (device_bench.cpp,
// torch_device_bench.cpp; hyper_bench.cpp takes the median): medians of timings, and the
// command lines' sizes ("100M,250M") and repetitions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace paramwin::bench {

/// The median of @p v (the upper one of an even count); 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// "100M" -> 100000000 (suffixes K, M, G; none: as written).
inline double parse_count(const std::string& s) {
  const char unit = s.empty() ? ' ' : s.back();
  const double scale = unit == 'M' ? 1e6 : unit == 'G' ? 1e9 : unit == 'K' ? 1e3 : 1.0;
  return std::stod(s) * scale;
}

/// "a,b,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = list.find(',', pos);
    out.push_back(list.substr(pos, comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

/// Takes argv[i] (and its value, advancing @p i) when it is `--sizes LIST` or `--reps N` (at
/// least 5 is kept); returns whether it did.
inline bool size_or_reps(int argc, char** argv, int& i, std::vector<std::string>& sizes,
                         int& reps) {
  const std::string arg = argv[i];
  if (i + 1 >= argc) return false;
  if (arg == "--sizes") {
    sizes = split_list(argv[++i]);
  } else if (arg == "--reps") {
    reps = std::max(5, std::stoi(argv[++i]));
  } else {
    return false;
  }
  return true;
}

}  // namespace paramwin::bench
