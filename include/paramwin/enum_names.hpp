#pragma once
/// @file enum_names.hpp
/// One name table per public enumeration: the canonical name of each value (what event
/// logs, reports and the string options print), the aliases parsers also accept, and what
/// the enumeration is called in error messages. Each enumeration's header specialises
/// `enum_table`; `enum_name`, `parse_enum` and `enum_valid_names` serve every one of them,
/// and the named functions (`dtype_name`, `parse_selection`, ...) are these.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace paramwin {

/// One spelling of one value.
template <class E>
struct EnumName {
  E value;                ///< the value
  std::string_view name;  ///< its spelling
};

/// The names of enumeration @p E.
template <class E>
struct EnumTable {
  std::string_view what{};                    ///< in messages: "unknown <what> 'x'"
  std::span<const EnumName<E>> names{};       ///< one per value, in declaration order
  std::span<const EnumName<E>> aliases = {};  ///< more spellings the parsers accept
};

/// Specialised beside every public enumeration; empty (and so not a NamedEnum) otherwise.
template <class E>
inline constexpr EnumTable<E> enum_table{};

/// An enumeration with a name table.
template <class E>
concept NamedEnum = std::is_enum_v<E> && !enum_table<E>.names.empty();

/// The canonical name of @p value; "invalid" for a value outside the enumeration.
template <NamedEnum E>
[[nodiscard]] constexpr std::string_view enum_name(E value) noexcept {
  for (const EnumName<E>& n : enum_table<E>.names) {
    if (n.value == value) {
      return n.name;
    }
  }
  return "invalid";
}

/// Whether @p value is one of the enumeration's values (a value cast from an integer may
/// not be).
template <NamedEnum E>
[[nodiscard]] constexpr bool enum_valid(E value) noexcept {
  for (const EnumName<E>& n : enum_table<E>.names) {
    if (n.value == value) {
      return true;
    }
  }
  return false;
}

/// Every accepted spelling of @p E, canonical names first, separated by ", " (for messages
/// and docs).
template <NamedEnum E>
[[nodiscard]] std::string enum_valid_names() {
  std::string out;
  for (const auto& list : {enum_table<E>.names, enum_table<E>.aliases}) {
    for (const EnumName<E>& n : list) {
      out.append(out.empty() ? "" : ", ").append(n.name);
    }
  }
  return out;
}

namespace detail {
/// Throws InvalidArgument "paramwin: unknown <what> '<name>' (valid: <valid>)".
[[noreturn]] void throw_unknown_name(std::string_view what, std::string_view name,
                                     std::string_view valid);
}  // namespace detail

/// The value spelled @p name (a canonical name or an alias), or nothing.
template <NamedEnum E>
[[nodiscard]] constexpr std::optional<E> find_enum(std::string_view name) noexcept {
  for (const auto& list : {enum_table<E>.names, enum_table<E>.aliases}) {
    for (const EnumName<E>& n : list) {
      if (n.name == name) {
        return n.value;
      }
    }
  }
  return std::nullopt;
}

/// The value spelled @p name (a canonical name or an alias); InvalidArgument listing every
/// valid spelling otherwise.
template <NamedEnum E>
[[nodiscard]] E parse_enum(std::string_view name) {
  if (const std::optional<E> value = find_enum<E>(name)) {
    return *value;
  }
  detail::throw_unknown_name(enum_table<E>.what, name, enum_valid_names<E>());
}

}  // namespace paramwin
