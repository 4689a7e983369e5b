// Names of the public enumerations, and their parsers.
#include <string>

#include "paramwin/dtype.hpp"
#include "paramwin/error.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin {

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
  }
  return "invalid";
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::float32, DType::float64, DType::bfloat16, DType::float16}) {
    if (name == dtype_name(d)) {
      return d;
    }
  }
  throw InvalidArgument("unknown dtype '" + std::string(name) +
                        "' (valid: float32, float64, bfloat16, float16)");
}

std::string_view transport_name(Transport transport) noexcept {
  switch (transport) {
    case Transport::automatic: return "auto";
    case Transport::shm: return "shm";
    case Transport::rma: return "rma";
  }
  return "invalid";
}

std::string_view landing_name(Landing landing) noexcept {
  switch (landing) {
    case Landing::automatic: return "auto";
    case Landing::transactional: return "transactional";
    case Landing::direct: return "direct";
  }
  return "invalid";
}

std::string_view state_name(AgentState state) noexcept {
  switch (state) {
    case AgentState::fresh: return "fresh";
    case AgentState::active: return "active";
    case AgentState::rebirth: return "rebirth";
    case AgentState::left: return "left";
    case AgentState::paused: return "paused";
  }
  return "invalid";
}

}  // namespace paramwin
