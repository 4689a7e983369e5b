// Asynchronous checkpoint saves: the copy on the caller's thread, write_checkpoint and the
// keep-last-N rotation on the writer's (see async_save.hpp; docs/checkpoints.md, "Asynchronous
// saves"). Needs MPI_THREAD_MULTIPLE (checked when the agent is created): the writer's
// collectives run on a duplicated communicator beside the trainer's MPI calls. HDF5 is called
// by one thread at a time: a load or another save of the agent waits for the writer first.
#include "checkpoint/async_save.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

#include "checkpoint/path.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

AsyncCheckpoint::AsyncCheckpoint(MPI_Comm comm) : comm_(Comm::dup(comm)) {}

AsyncCheckpoint::~AsyncCheckpoint() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (!error_.empty()) {
    std::fprintf(stderr,
                 "paramwin: an asynchronous checkpoint save failed and was never "
                 "collected (Agent::wait_checkpoint): %s\n",
                 error_.c_str());
  }
}

void AsyncCheckpoint::stage(const std::string& path, const Layout& layout,
                            const AgentRecord& record, const SaveSettings& settings) {
  if (thread_.joinable()) {
    throw CheckpointError("paramwin: asynchronous checkpoint: a save is still in flight");
  }
  path_ = path;
  layout_ = layout;
  settings_ = settings;
  bytes_.resize(record.ordered.size());
  std::vector<ConstLayerRef> copies;
  for (std::size_t l = 0; l < record.ordered.size(); ++l) {
    const ConstLayerRef& r = record.ordered[l];
    const std::size_t n = r.count() * dtype_size(r.dtype());
    bytes_[l].resize(n);
    if (n != 0) std::memcpy(bytes_[l].data(), r.data(), n);
    copies.emplace_back(r.name(), bytes_[l].data(), r.count(), r.dtype());
  }
  record_ = record;
  // The copies are in the bound layers' order, of the same layout.
  record_.ordered = BoundLayersAccess::make(std::move(copies), record.ordered.layout_fingerprint());
}

void AsyncCheckpoint::launch() {
  error_.clear();
  thread_ = std::thread([this] { run(); });
}

void AsyncCheckpoint::run() {
  try {
    write_checkpoint(comm_.get(), path_, layout_, record_, settings_);
    std::string error;
    if (comm_.rank() == 0) {
      error = rotate_checkpoints(settings_.checkpoint.path, settings_.checkpoint.keep);
    }
    agree_or_throw<CheckpointError>(comm_.get(), error.empty() ? error
                                                               : "paramwin: checkpoint '" + path_ +
                                                                     "' saved, but " + error);
  } catch (const std::exception& e) {
    error_ = e.what();
  } catch (...) {
    error_ = "paramwin: asynchronous checkpoint '" + path_ + "': unknown exception";
  }
}

std::string AsyncCheckpoint::wait() {
  if (!thread_.joinable()) return {};
  thread_.join();
  return std::exchange(error_, {});
}

}  // namespace paramwin::detail
