#pragma once
/// @file detail/agent_core.hpp
/// Non-template body of Agent: the step logic over a type-erased window.

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/event.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

/// The window operations the agent needs, independent of the memory space.
class WindowAccess {
 public:
  WindowAccess() = default;
  WindowAccess(const WindowAccess&) = delete;
  WindowAccess& operator=(const WindowAccess&) = delete;
  WindowAccess(WindowAccess&&) = delete;
  WindowAccess& operator=(WindowAccess&&) = delete;
  virtual ~WindowAccess() = default;

  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual const Layout& layout() const = 0;
  [[nodiscard]] virtual std::uint64_t version() const = 0;
  [[nodiscard]] virtual RosterEntry roster(int rank) const = 0;
  [[nodiscard]] virtual std::vector<RosterEntry> roster_all() const = 0;
  virtual void set_status(const AgentStatus& status) = 0;
  virtual PublishResult publish(std::span<const ConstLayerRef> layers) = 0;
  virtual PullResult pull(std::span<const int> donors, std::span<const LayerRef> out,
                          const PullOptions& options) = 0;
};

/// WindowAccess over a ParameterWindow<MemorySpace> (or anything with the same members).
template <class Window>
class WindowAccessOf final : public WindowAccess {
 public:
  explicit WindowAccessOf(Window& window) : w_(window) {}
  [[nodiscard]] int rank() const override { return w_.rank(); }
  [[nodiscard]] const Layout& layout() const override { return w_.layout(); }
  [[nodiscard]] std::uint64_t version() const override { return w_.version(); }
  [[nodiscard]] RosterEntry roster(int rank) const override { return w_.roster(rank); }
  [[nodiscard]] std::vector<RosterEntry> roster_all() const override { return w_.roster_all(); }
  void set_status(const AgentStatus& status) override { w_.set_status(status); }
  PublishResult publish(std::span<const ConstLayerRef> layers) override {
    return w_.publish(layers);
  }
  PullResult pull(std::span<const int> donors, std::span<const LayerRef> out,
                  const PullOptions& options) override {
    return w_.pull(donors, out, options);
  }

 private:
  Window& w_;
};

/// Checks @p params against @p layout (count of layers, all named or none, element counts,
/// dtypes) and throws InvalidArgument naming @p caller. Agents check before a step changes
/// anything: the window checks the same on publish, but only after the step has decided,
/// aged the agent and updated its roster.
void check_step_params(const Layout& layout, std::span<const LayerRef> params,
                       std::string_view caller);
/// @copydoc check_step_params(const Layout&, std::span<const LayerRef>, std::string_view)
void check_step_params(const Layout& layout, std::span<const ConstLayerRef> params,
                       std::string_view caller);

/// @p path with every "{rank}" replaced by @p rank (event log paths).
[[nodiscard]] std::string expand_rank(std::string path, int rank);

/// Whether the publishing cadence @p p asks for a publish, @p steps_since_publish steps and
/// @p since_last_publish after the latest one.
[[nodiscard]] bool publish_due(const PublishOptions& p, std::int64_t steps_since_publish,
                               std::chrono::steady_clock::duration since_last_publish);

/// Policy, statistics, event log and publishing state of one agent.
class AgentCore {
 public:
  /// Validates @p options (InvalidArgument) and opens the event log.
  AgentCore(AgentOptions options, int rank, int population);

  /// Validates on every rank of @p comm and throws InvalidArgument on every rank if any
  /// rank's options are invalid (so that the window creation that follows cannot hang).
  /// @note Collective over @p comm.
  [[nodiscard]] static AgentCore create_collective(MPI_Comm comm, AgentOptions options);

  StepEvent step(WindowAccess& w, std::int64_t iteration, double metric,
                 std::span<const LayerRef> params);
  PublishResult publish(WindowAccess& w, std::span<const ConstLayerRef> params);
  void leave(WindowAccess& w);

  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  [[nodiscard]] const AgentStats& stats() const noexcept { return stats_; }
  void set_event_log(EventLog log) noexcept { log_ = std::move(log); }

 private:
  using Clock = std::chrono::steady_clock;

  struct Rebirth {
    bool done = false;
    std::string note;
  };
  Rebirth rebirth(WindowAccess& w, std::span<const LayerRef> params, StepEvent& event);
  bool publish_due(Clock::time_point now) const;
  void do_publish(WindowAccess& w, std::span<const LayerRef> params, StepEvent& event);
  void set_status(WindowAccess& w, AgentState state, std::int64_t iteration, double metric);
  std::uint64_t fingerprint(WindowAccess& w);

  Policy policy_;
  AgentStats stats_;
  EventLog log_;
  std::uint64_t fingerprint_ = 0;
  bool have_fingerprint_ = false;
  bool publish_pending_ = true;  // first step always publishes
  bool left_ = false;            // leave() was called: step() is refused from then on
  std::int64_t steps_since_publish_ = 0;
  Clock::time_point last_publish_{};
  std::vector<ConstLayerRef> const_refs_;
};

}  // namespace paramwin::detail
