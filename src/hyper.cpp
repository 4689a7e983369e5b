// Hyperparameters: declared scalars (int64 / float64) held as the 64-bit words a snapshot
// carries.
#include "paramwin/hyper.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>

#include "paramwin/error.hpp"

namespace paramwin {

std::string HyperSpec::describe() const { return name + " " + std::string(hyper_type_name(type)); }

Hyperparameters::Hyperparameters(std::shared_ptr<const std::vector<HyperSpec>> specs)
    : specs_(std::move(specs)), words_(specs_ ? specs_->size() : 0, 0) {
  for (std::size_t i = 0; i < words_.size(); ++i) {
    if ((*specs_)[i].type == HyperType::float64) words_[i] = std::bit_cast<std::uint64_t>(0.0);
  }
}

std::span<const HyperSpec> Hyperparameters::specs() const noexcept {
  return specs_ ? std::span<const HyperSpec>(*specs_) : std::span<const HyperSpec>();
}

const HyperSpec& Hyperparameters::spec(std::size_t i) const {
  if (i >= size()) {
    throw InvalidArgument("paramwin: hyperparameter index " + std::to_string(i) +
                          " out of range (" + std::to_string(size()) + " declared)");
  }
  return (*specs_)[i];
}

std::optional<std::size_t> Hyperparameters::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < size(); ++i) {
    if ((*specs_)[i].name == name) return i;
  }
  return std::nullopt;
}

std::size_t Hyperparameters::index_of(std::string_view name) const {
  if (auto i = find(name)) return *i;
  std::string known;
  for (const HyperSpec& s : specs()) known += (known.empty() ? "'" : ", '") + s.name + "'";
  throw InvalidArgument("paramwin: unknown hyperparameter '" + std::string(name) +
                        "' (declared: " + (known.empty() ? "none" : known) + ")");
}

double Hyperparameters::as_double(std::size_t i) const {
  return spec(i).type == HyperType::int64
             ? static_cast<double>(std::bit_cast<std::int64_t>(words_[i]))
             : std::bit_cast<double>(words_[i]);
}

std::int64_t Hyperparameters::get_int(std::string_view name) const {
  const std::size_t i = index_of(name);
  if (spec(i).type != HyperType::int64) {
    throw InvalidArgument("paramwin: hyperparameter '" + std::string(name) +
                          "' is float64; use get()");
  }
  return std::bit_cast<std::int64_t>(words_[i]);
}

void Hyperparameters::set(std::size_t i, double value) {
  if (spec(i).type == HyperType::float64) {
    words_[i] = std::bit_cast<std::uint64_t>(value);
    return;
  }
  // 2^63 is exactly representable; values from it up do not fit an int64.
  if (!std::isfinite(value) || value != std::trunc(value) || value < -9.223372036854775808e18 ||
      value >= 9.223372036854775808e18) {
    throw InvalidArgument("paramwin: hyperparameter '" + (*specs_)[i].name + "' is int64; " +
                          std::to_string(value) + " is not an int64 value");
  }
  words_[i] = std::bit_cast<std::uint64_t>(static_cast<std::int64_t>(value));
}

void Hyperparameters::set_int(std::string_view name, std::int64_t value) {
  const std::size_t i = index_of(name);
  words_[i] = spec(i).type == HyperType::int64
                  ? std::bit_cast<std::uint64_t>(value)
                  : std::bit_cast<std::uint64_t>(static_cast<double>(value));
}

std::string Hyperparameters::describe() const {
  std::string out;
  for (std::size_t i = 0; i < size(); ++i) {
    if (i != 0) out += ' ';
    out += (*specs_)[i].name + "=";
    if ((*specs_)[i].type == HyperType::int64) {
      out += std::to_string(std::bit_cast<std::int64_t>(words_[i]));
    } else {
      char buf[32];
      const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, std::bit_cast<double>(words_[i]));
      out.append(buf, ec == std::errc() ? ptr : buf);
    }
  }
  return out;
}

bool operator==(const Hyperparameters& a, const Hyperparameters& b) {
  const std::span<const HyperSpec> sa = a.specs();
  const std::span<const HyperSpec> sb = b.specs();
  return std::equal(sa.begin(), sa.end(), sb.begin(), sb.end()) && a.words_ == b.words_;
}

}  // namespace paramwin
