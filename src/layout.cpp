#include "paramwin/layout.hpp"

#include <algorithm>
#include <charconv>
#include <memory>
#include <sstream>

#include "paramwin/error.hpp"

namespace paramwin {
namespace {

constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

void mix(std::uint64_t& h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
}

void mix_u64(std::uint64_t& h, std::uint64_t v) { mix(h, &v, sizeof v); }

std::string shape_text(const std::vector<std::size_t>& shape) {
  if (shape.empty()) {
    return "scalar";
  }
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) {
      s += 'x';
    }
    s += std::to_string(shape[i]);
  }
  return s;
}

bool valid_name(std::string_view name) {
  if (name.empty()) {
    return false;
  }
  for (char c : name) {
    // serialize() separates fields with ' ' and layers with '\n'.
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string LayerSpec::describe() const {
  return "'" + name + "' [" + shape_text(shape) + " " + std::string(dtype_name(dtype)) + "]";
}

Layout& Layout::add(std::string name, std::vector<std::size_t> shape, DType dtype) {
  if (!valid_name(name)) {
    throw InvalidArgument("layer name '" + name + "' is invalid: names must be non-empty and " +
                          "contain no whitespace (layer " + std::to_string(layers_.size()) + ")");
  }
  if (find(name)) {
    throw InvalidArgument("duplicate layer name '" + name + "' (already layer " +
                          std::to_string(*find(name)) + ")");
  }
  if (dtype_size(dtype) == 0) {
    throw InvalidArgument("layer '" + name + "' has an invalid dtype");
  }
  std::size_t count = 1;
  for (std::size_t d : shape) {
    if (d != 0 && count > static_cast<std::size_t>(-1) / d) {
      throw InvalidArgument("layer '" + name + "': shape " + shape_text(shape) + " overflows");
    }
    count *= d;
  }
  // Checked before anything changes: a layout whose byte or element totals wrap around
  // would size windows and scratches from a small wrong number.
  constexpr std::size_t kMax = static_cast<std::size_t>(-1);
  const std::size_t esize = dtype_size(dtype);
  if (count > kMax / esize) {
    throw InvalidArgument("layer '" + name + "': shape " + shape_text(shape) + " of " +
                          std::string(dtype_name(dtype)) + " is more than 2^64 bytes");
  }
  const std::size_t bytes = count * esize;
  if (count > kMax - total_elements_ || bytes > kMax - total_bytes_) {
    throw InvalidArgument("layer '" + name + "': shape " + shape_text(shape) + " of " +
                          std::string(dtype_name(dtype)) + " would make the layout's total (" +
                          std::to_string(total_elements_) + " elements, " +
                          std::to_string(total_bytes_) + " bytes so far) overflow 2^64");
  }
  mix_u64(fingerprint_, name.size());
  mix(fingerprint_, name.data(), name.size());
  mix_u64(fingerprint_, shape.size());
  for (std::size_t d : shape) {
    mix_u64(fingerprint_, d);
  }
  mix_u64(fingerprint_, static_cast<std::uint64_t>(dtype));
  total_elements_ += count;
  total_bytes_ += bytes;
  layers_.push_back(LayerSpec{std::move(name), std::move(shape), count, dtype});
  return *this;
}

Layout& Layout::add_hyperparameter(std::string name, HyperType type) {
  const std::size_t n = hyper_ ? hyper_->size() : 0;
  if (!valid_name(name)) {
    throw InvalidArgument("hyperparameter name '" + name + "' is invalid: names must be " +
                          "non-empty and contain no whitespace (hyperparameter " +
                          std::to_string(n) + ")");
  }
  if (type != HyperType::int64 && type != HyperType::float64) {
    throw InvalidArgument("hyperparameter '" + name + "' has an invalid type");
  }
  std::vector<HyperSpec> specs = hyper_ ? *hyper_ : std::vector<HyperSpec>{};
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) {
      throw InvalidArgument("duplicate hyperparameter name '" + name +
                            "' (already hyperparameter " + std::to_string(i) + ")");
    }
  }
  if (specs.size() >= kMaxHyperparameters) {
    throw InvalidArgument("hyperparameter '" + name + "': a layout holds at most " +
                          std::to_string(kMaxHyperparameters) + " hyperparameters");
  }
  // A separate hash, combined in fingerprint(): the layers' hash does not depend on whether
  // a hyperparameter was declared before or after them.
  if (specs.empty()) hyper_fingerprint_ = 0xcbf29ce484222325ULL;
  mix_u64(hyper_fingerprint_, name.size());
  mix(hyper_fingerprint_, name.data(), name.size());
  mix_u64(hyper_fingerprint_, static_cast<std::uint64_t>(type));
  specs.push_back(HyperSpec{std::move(name), type});
  hyper_ = std::make_shared<const std::vector<HyperSpec>>(std::move(specs));
  return *this;
}

const std::vector<HyperSpec>& Layout::hyperparameters() const noexcept {
  static const std::vector<HyperSpec> kNone;
  return hyper_ ? *hyper_ : kNone;
}

Hyperparameters Layout::make_hyperparameters() const { return Hyperparameters(hyper_); }

std::uint64_t Layout::fingerprint() const noexcept {
  if (!hyper_) return fingerprint_;
  std::uint64_t h = fingerprint_;
  mix_u64(h, 0x6879706572ULL);  // "hyper": keeps {layers + hyper} apart from other layers
  mix_u64(h, hyper_fingerprint_);
  return h;
}

bool operator==(const Layout& a, const Layout& b) {
  return a.layers_ == b.layers_ && a.hyperparameters() == b.hyperparameters();
}

void Layout::throw_negative_count(const std::string& name, long long count) {
  throw InvalidArgument("layer '" + name + "' has a negative element count " +
                        std::to_string(count));
}

const LayerSpec& Layout::operator[](std::size_t i) const {
  if (i >= layers_.size()) {
    throw InvalidArgument("layer index " + std::to_string(i) + " out of range (layout has " +
                          std::to_string(layers_.size()) + " layers)");
  }
  return layers_[i];
}

std::optional<std::size_t> Layout::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].name == name) {
      return i;
    }
  }
  return std::nullopt;
}

std::size_t Layout::index_of(std::string_view name) const {
  if (auto i = find(name)) {
    return *i;
  }
  std::string known;
  for (const LayerSpec& l : layers_) {
    known += (known.empty() ? "'" : ", '") + l.name + "'";
  }
  throw InvalidArgument("unknown layer '" + std::string(name) +
                        "' (layers: " + (known.empty() ? "none" : known) + ")");
}

std::string Layout::serialize() const {
  std::ostringstream out;
  for (const LayerSpec& l : layers_) {
    out << l.name << ' ' << static_cast<int>(l.dtype) << ' ' << l.shape.size();
    for (std::size_t d : l.shape) {
      out << ' ' << d;
    }
    out << '\n';
  }
  for (const HyperSpec& h : hyperparameters()) {
    out << "%hyper " << h.name << ' ' << static_cast<int>(h.type) << '\n';
  }
  return out.str();
}

Layout Layout::deserialize(std::string_view text) {
  Layout layout;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (line.rfind("%hyper ", 0) == 0) {
      std::string tag;
      std::string name;
      int type = -1;
      std::string rest;
      if (!(fields >> tag >> name >> type) || (type != 0 && type != 1) || (fields >> rest)) {
        throw InvalidArgument("malformed serialized layout line '" + line + "'");
      }
      layout.add_hyperparameter(name, static_cast<HyperType>(type));
      continue;
    }
    std::string name;
    int dtype = 0;
    std::size_t rank = 0;
    if (!(fields >> name >> dtype >> rank) || dtype < 1 || dtype > 4) {
      throw InvalidArgument("malformed serialized layout line '" + line + "'");
    }
    std::vector<std::size_t> shape(rank);
    for (std::size_t& d : shape) {
      if (!(fields >> d)) {
        throw InvalidArgument("malformed serialized layout line '" + line + "'");
      }
    }
    layout.add(name, std::move(shape), static_cast<DType>(dtype));
  }
  return layout;
}

std::string Layout::first_difference(const Layout& a, const Layout& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (!(a.layers_[i] == b.layers_[i])) {
      return "layer " + std::to_string(i) + ": " + a.layers_[i].describe() + " vs " +
             b.layers_[i].describe();
    }
  }
  if (a.size() != b.size()) {
    const Layout& longer = a.size() > b.size() ? a : b;
    return "layer " + std::to_string(n) + ": " +
           (a.size() > b.size() ? longer.layers_[n].describe() + " vs missing"
                                : "missing vs " + longer.layers_[n].describe()) +
           " (" + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " layers)";
  }
  const std::vector<HyperSpec>& ha = a.hyperparameters();
  const std::vector<HyperSpec>& hb = b.hyperparameters();
  const std::size_t m = std::min(ha.size(), hb.size());
  for (std::size_t i = 0; i < m; ++i) {
    if (!(ha[i] == hb[i])) {
      return "hyperparameter " + std::to_string(i) + ": '" + ha[i].describe() + "' vs '" +
             hb[i].describe() + "'";
    }
  }
  if (ha.size() != hb.size()) {
    const HyperSpec& extra = ha.size() > hb.size() ? ha[m] : hb[m];
    return "hyperparameter " + std::to_string(m) + ": " +
           (ha.size() > hb.size() ? "'" + extra.describe() + "' vs missing"
                                  : "missing vs '" + extra.describe() + "'") +
           " (" + std::to_string(ha.size()) + " vs " + std::to_string(hb.size()) +
           " hyperparameters)";
  }
  return "";
}

}  // namespace paramwin
