// Force-included by scripts/tidy.sh for clang-tidy 14 only: GCC 12's <source_location>
// defines std::source_location only where __builtin_source_location exists, which clang has
// from version 15, so clang 14 cannot parse the library's window constructors without this.
// The same interface, from the builtins clang 14 has; the real header stays empty there.
#pragma once
#if defined(__clang__) && __clang_major__ < 15 && !__has_builtin(__builtin_source_location)
#include <cstdint>
namespace std {  // analysis only: never part of a build
struct source_location {
  static consteval source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           uint_least32_t line = __builtin_LINE(),
                                           uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location s;
    s.file_ = file;
    s.function_ = function;
    s.line_ = line;
    s.column_ = column;
    return s;
  }
  constexpr source_location() noexcept = default;
  [[nodiscard]] constexpr uint_least32_t line() const noexcept { return line_; }
  [[nodiscard]] constexpr uint_least32_t column() const noexcept { return column_; }
  [[nodiscard]] constexpr const char* file_name() const noexcept { return file_; }
  [[nodiscard]] constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  uint_least32_t line_ = 0;
  uint_least32_t column_ = 0;
};
}  // namespace std
#endif
