// ElasticAveragingAgent: the options checked on every process against the population's
// slots, the slots' AveragingAgents made from their epoch's window, and the step (the
// membership first, then the population's members set for the topology).
#include "paramwin/elastic_averaging.hpp"

#include <mpi.h>

#include <cstdint>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/agent_options.hpp"
#include "paramwin/error.hpp"
#include "paramwin/window_core.hpp"

namespace paramwin {

namespace {

/// What is wrong with @p options for an elastic population of @p slots slots ("" if
/// nothing): collectives, and the topology of every slot.
std::string check_elastic(const AveragingOptions& options, int slots) {
  if (options.warmup_steps > 0 || options.cooldown_steps > 0 || options.symmetric) {
    return "paramwin: ElasticAveragingAgent: warm-up, cool-down and symmetric averaging are "
           "collective over the population, which a dead process would hang; set "
           "warmup_steps and cooldown_steps to 0 and symmetric to false";
  }
  for (int slot = 0; slot < slots; ++slot) {
    std::string bad = check_options(options, slot, slots);
    if (bad.starts_with("paramwin: ")) {
      bad.erase(0, 10);
    }
    if (!bad.empty()) {
      return "paramwin: ElasticAveragingAgent: slot " + std::to_string(slot) + " of " +
             std::to_string(slots) + ": " + bad;
    }
  }
  return {};
}

/// @p options checked on every process of @p world (InvalidArgument on every process), and
/// one layout and wire format everywhere (LayoutMismatch on every process). Collective.
AveragingOptions checked(MPI_Comm world, const Layout& layout, AveragingOptions options,
                         const MembershipOptions& membership) {
  int size = 0;
  detail::check_mpi(MPI_Comm_size(world, &size), "MPI_Comm_size");
  const int slots = membership.members > 0 ? membership.members : size;
  detail::agree_or_throw<InvalidArgument>(world, check_elastic(options, slots));
  const std::uint64_t mine[2] = {layout.fingerprint(),
                                 static_cast<std::uint64_t>(options.window.wire)};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size));
  detail::check_mpi(MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, world),
                    "MPI_Allgather");
  for (std::size_t r = 1; 2 * r < all.size(); ++r) {
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) {
      throw LayoutMismatch("paramwin: ElasticAveragingAgent: every process needs the same "
                           "layout, but process " +
                           std::to_string(r) +
                           "'s layout (or wire format) differs from process 0's");
    }
  }
  return options;
}

/// The slots' agents' options for ElasticSlots: only the roster reads' bound matters.
AgentOptions slot_options(const AveragingOptions& options) {
  AgentOptions a;
  a.read.roster_timeout_seconds = options.timeout_seconds;
  return a;
}

}  // namespace

ElasticAveragingAgent::ElasticAveragingAgent(MPI_Comm world, Layout layout,
                                             AveragingOptions options, MembershipOptions membership)
    // Rvalue references: checked() reads layout and membership before anything is moved.
    : ElasticAveragingAgent(world, std::move(layout),
                            checked(world, layout, std::move(options), membership),
                            std::move(membership), 0) {}

ElasticAveragingAgent::ElasticAveragingAgent(MPI_Comm world, Layout&& layout,
                                             const AveragingOptions& options,
                                             MembershipOptions&& membership, int /*checked*/)
    : base(
          world,
          [layout = std::move(layout), options,
           slots = membership.members](MPI_Comm comm, const WindowOptions& w, bool /*joining*/) {
            // The only collective: the window's creation, which the members make too (one
            // site on every process: the windows pair up by it).
            const std::source_location site = std::source_location::current();
            Window window(comm, layout, w, site);
            // The standing window's slots at the start: world ranks [0, members) (a new
            // window's ranks are the slots). ElasticAveragingAgent::step follows the epochs.
            std::vector<int> initial;
            for (int r = 0; slots > 0 && slots < window.size() && r < slots; ++r) {
              initial.push_back(r);
            }
            return AveragingAgent(std::move(window), options, std::move(initial));
          },
          options.window, std::move(membership), slot_options(options)) {}

void ElasticAveragingAgent::republish(AveragingAgent& slot, std::span<const LayerRef> params) {
  if (slot.joining()) {
    return;  // nothing of its own to show yet: its join reads the members
  }
  std::vector<ConstLayerRef> out;
  out.reserve(params.size());
  for (const LayerRef& p : params) {
    out.push_back(p.as_const());
  }
  (void)slot.publish(out);
}

void ElasticAveragingAgent::finish(std::span<const LayerRef> params) {
  this->finish_taking_epochs([&](AveragingAgent& slot) { republish(slot, params); });
}

AveragingRound ElasticAveragingAgent::step(std::span<const LayerRef> params) {
  AveragingAgent& a = this->before_step([&](AveragingAgent& slot) { republish(slot, params); });
  if (this->standing() && members_epoch_ != membership().epoch()) {
    a.set_members(membership().members());  // the slots' ranks in the one window
    members_epoch_ = membership().epoch();
  }
  return a.step(params);
}

}  // namespace paramwin
