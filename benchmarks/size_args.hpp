// What the device benchmarks (device_bench.cpp, torch_device_bench.cpp) share: medians of
// timings and their command lines' sizes ("100M,250M").
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

}  // namespace paramwin::bench
