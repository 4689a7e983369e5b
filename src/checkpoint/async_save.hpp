#pragma once
// Asynchronous checkpoint saves (CheckpointOptions::async): the agent's step pauses only to
// copy its parameters, state and blobs; one thread per agent then writes them with
// write_checkpoint on a communicator of its own while training goes on.
#include <mpi.h>

#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/file.hpp"
#include "mpi/handles.hpp"
#include "paramwin/layout.hpp"

namespace paramwin::detail {

/// One agent's background checkpoint writer. At most one save is in flight: stage() refuses
/// a new one until the previous one was collected with wait() (AgentCore waits first). Move-free
/// (owned through a pointer by AgentCore).
class AsyncCheckpoint {
 public:
  /// Duplicates @p comm for the writer's collectives (MPI-IO, the agreements), so that they
  /// never match the trainer's own calls. @note Collective over @p comm.
  explicit AsyncCheckpoint(MPI_Comm comm);
  AsyncCheckpoint(const AsyncCheckpoint&) = delete;
  AsyncCheckpoint& operator=(const AsyncCheckpoint&) = delete;
  AsyncCheckpoint(AsyncCheckpoint&&) = delete;
  AsyncCheckpoint& operator=(AsyncCheckpoint&&) = delete;
  /// Waits for a save in flight; an error nobody collected is printed to stderr (a
  /// destructor cannot throw).
  ~AsyncCheckpoint();

  /// Copies @p record (parameters, state, blobs) for a save into @p path: the pause of an
  /// asynchronous save. The previous save must have been collected with wait(). Local; the
  /// caller agrees on its success before launch().
  void stage(const std::string& path, const Layout& layout, const AgentRecord& record,
             const SaveSettings& settings);
  /// Starts writing the staged save, then rotating settings.checkpoint's pattern, on the
  /// writer thread. @note Collective: every rank of the communicator launches the same save.
  void launch();
  /// True while a save was started and not yet collected with wait().
  [[nodiscard]] bool pending() const noexcept { return thread_.joinable(); }
  /// Waits for the save in flight (if any) and returns its error: "" when it succeeded or
  /// nothing was in flight. The same on every rank (the writer agrees on it).
  [[nodiscard]] std::string wait();

 private:
  void run();

  Comm comm_;
  std::thread thread_;
  // The save in flight, owned: the trainer may change its memory as soon as stage() returns.
  std::string path_;
  Layout layout_;
  SaveSettings settings_;
  std::vector<std::vector<std::byte>> bytes_;
  AgentRecord record_;
  std::string error_;
};

}  // namespace paramwin::detail
