#pragma once
// Keep-last-N rotation of a checkpoint pattern (the public half is in checkpoint.hpp).
#include <string>

namespace paramwin::detail {

/// Deletes the checkpoints of @p pattern but the newest @p keep (nothing when keep <= 0);
/// returns the first error ("" when none). Local: rank 0 calls it after a save.
[[nodiscard]] std::string rotate_checkpoints(const std::string& pattern, int keep);

}  // namespace paramwin::detail
