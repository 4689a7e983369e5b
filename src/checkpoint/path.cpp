// Checkpoint path patterns ("{step}"), the newest checkpoint of a pattern, and keep-last-N.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <vector>

#include "checkpoint/path.hpp"
#include "paramwin/checkpoint.hpp"

namespace paramwin {

namespace {

constexpr std::string_view kToken = "{step}";
constexpr std::size_t kDigits = 12;

// The checkpoints of @p pattern in its directory, as (step, path), oldest first.
std::vector<std::pair<std::int64_t, std::filesystem::path>> matches(const std::string& pattern) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> out;
  const std::filesystem::path p(pattern);
  const std::string file = p.filename().string();
  const std::size_t at = file.find(kToken);
  if (at == std::string::npos) {
    if (std::filesystem::is_regular_file(p)) out.emplace_back(0, p);
    return out;
  }
  const std::string prefix = file.substr(0, at);
  const std::string suffix = file.substr(at + kToken.size());
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != prefix.size() + kDigits + suffix.size() || !name.starts_with(prefix) ||
        !name.ends_with(suffix) || !entry.is_regular_file()) {
      continue;
    }
    const std::string digits = name.substr(prefix.size(), kDigits);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    out.emplace_back(std::stoll(digits),
                     p.has_parent_path() ? entry.path() : std::filesystem::path(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string checkpoint_path(const std::string& pattern, std::int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%012lld", static_cast<long long>(step));
  std::string out = pattern;
  for (std::size_t at = out.find(kToken); at != std::string::npos; at = out.find(kToken, at)) {
    out.replace(at, kToken.size(), digits);
  }
  return out;
}

std::string newest_checkpoint(const std::string& pattern) {
  const auto all = matches(pattern);
  return all.empty() ? std::string() : all.back().second.string();
}

namespace detail {

std::string rotate_checkpoints(const std::string& pattern, int keep) {
  if (keep <= 0) return {};
  auto all = matches(pattern);
  std::string error;
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i].second, ec);
    if (ec && error.empty()) {
      error = "removing old checkpoint '" + all[i].second.string() + "' failed: " + ec.message();
    }
  }
  return error;
}

}  // namespace detail

}  // namespace paramwin
