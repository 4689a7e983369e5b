// Device windows (Memory::cuda, docs/gpu.md): how the ranks of a node share their device
// slots. Each rank allocates its slots on its GPU and maps every other rank's of the node:
//   - VMM (the default where every rank's GPU and driver support it): cuMemCreate memory,
//     exported as a file descriptor, the descriptors passed over Unix sockets
//     (mpi/fd_exchange.hpp), imported and mapped. Read at the speed of a local copy.
//   - CUDA IPC (otherwise, or when VMM sharing fails: logged): cudaMalloc memory,
//     cudaIpcGetMemHandle / cudaIpcOpenMemHandle. Read 1.25x slower for 1 GB on an H200.
// PARAMWIN_DEVICE_SHARING=ipc|vmm forces one (vmm: no fallback, its failure is the error).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "mpi/fd_exchange.hpp"
#include "paramwin/error.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {
namespace {

enum class Sharing : std::uint8_t { automatic, ipc, vmm };

/// PARAMWIN_DEVICE_SHARING; @p error says why when its value is not one of the names.
Sharing sharing_asked(std::string& error) {
  const char* value = std::getenv("PARAMWIN_DEVICE_SHARING");
  const std::string_view v = value == nullptr ? std::string_view{} : std::string_view(value);
  if (v.empty() || v == "auto") return Sharing::automatic;
  if (v == "ipc") return Sharing::ipc;
  if (v == "vmm") return Sharing::vmm;
  error = "paramwin: PARAMWIN_DEVICE_SHARING=" + std::string(v) +
          " is not one of auto, ipc, vmm (how device windows share their slots in a node)";
  return Sharing::automatic;
}

}  // namespace

void WindowImpl::create_device_slots() {
  // Reached by every rank together (the agreements before it throw on all ranks alike), so
  // the collective free_device_slots() runs on every rank or on none.
  device_setup_ = true;
  const int node_size = node_comm_.size();
  std::string error;
  const Sharing asked = sharing_asked(error);
  // VMM only where every rank of the window can use it (a rank alone on its node shares
  // nothing: it allocates with cudaMalloc and does not object).
  std::string why_not_vmm;
  const bool can_vmm = node_size == 1 || (asked != Sharing::ipc &&
                                          cuda::vmm_supported(options_.cuda_device, &why_not_vmm));
  if (error.empty() && asked == Sharing::vmm && !can_vmm) {
    error = "paramwin: PARAMWIN_DEVICE_SHARING=vmm, but this rank's GPU cannot share VMM memory (" +
            why_not_vmm + ")";
  }
  agree_or_throw<InvalidArgument>(comm_.get(), error);
  const bool vmm = first_failing_rank(comm_.get(), can_vmm) < 0 && asked != Sharing::ipc;
  allocate_device_slots(vmm);  // no fallback when the memory itself cannot be had
  if (vmm) {
    try {
      map_device_slots(true);
      return;
    } catch (const std::exception& e) {
      // Thrown on every rank alike (map_device_slots agrees; the failing rank keeps its
      // exception's type, so any std::exception): undone alike, then IPC.
      if (asked == Sharing::vmm) throw;
      if (rank_ == 0) {
        std::fprintf(stderr,
                     "paramwin: %s created at %s: sharing its device slots as VMM memory "
                     "failed (%s); using CUDA IPC instead\n",
                     options_.name.empty() ? "an unnamed window"
                                           : ("window '" + options_.name + "'").c_str(),
                     site_.c_str(), e.what());
      }
      (void)free_device_slots();
      device_setup_ = true;
      allocate_device_slots(false);
    }
  }
  map_device_slots(false);
}

void WindowImpl::allocate_device_slots(bool vmm) {
  device_base_.assign(static_cast<std::size_t>(size_), nullptr);
  std::exception_ptr error;
  try {
    device_ = std::make_unique<cuda::Device>(options_.cuda_device, options_.cuda_stream,
                                             slot_count(options_.exposure) * slots_.stride,
                                             vmm && node_comm_.size() > 1);
  } catch (...) {
    error = std::current_exception();
  }
  agree_or_rethrow<Error>(comm_.get(), error);
  note_device_window();
}

void WindowImpl::map_device_slots(bool vmm) {
  const int node_size = node_comm_.size();
  device_base_[static_cast<std::size_t>(rank_)] = device_->slots();
  if (node_size == 1) return;
  std::exception_ptr error;
  cuda::IpcHandle mine{};
  int my_fd = -1;
  try {
    if (vmm) {
      my_fd = device_->export_slots_fd();
    } else {
      mine = device_->export_slots();
    }
  } catch (...) {
    error = std::current_exception();
  }
  const UniqueFd own_fd(my_fd);
  agree_or_rethrow<Error>(comm_.get(), error);
  // What a peer needs besides the descriptor: the size to map (VMM), or the IPC handle.
  std::vector<cuda::IpcHandle> handles(static_cast<std::size_t>(node_size));
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(node_size));
  std::vector<UniqueFd> fds;
  if (vmm) {
    const std::uint64_t size = device_->slots_size();
    check_mpi(MPI_Allgather(&size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T,
                            node_comm_.get()),
              "MPI_Allgather(device slot sizes)");
    try {
      fds = exchange_fds(node_comm_.get(), own_fd.get());
    } catch (...) {
      error = std::current_exception();
    }
    agree_or_rethrow<Error>(comm_.get(), error);  // the other nodes learn of it too
  } else {
    check_mpi(MPI_Allgather(mine.data(), static_cast<int>(cuda::kIpcHandleBytes), MPI_BYTE,
                            handles.data(), static_cast<int>(cuda::kIpcHandleBytes), MPI_BYTE,
                            node_comm_.get()),
              "MPI_Allgather(device slot handles)");
  }
  try {
    for (int i = 0; i < node_size; ++i) {
      const auto n = static_cast<std::size_t>(i);
      const int r = node_to_comm_[n];
      if (r == rank_) continue;
      device_base_[static_cast<std::size_t>(r)] =
          vmm ? device_->map_peer(fds[n].get(), sizes[n]) : device_->map_peer(handles[n]);
    }
  } catch (...) {
    error = std::current_exception();
  }
  agree_or_rethrow<Error>(comm_.get(), error);
}

MpiStatus WindowImpl::free_device_slots() noexcept {
  MpiStatus status;
  if (device_) {
    device_->unmap_peers();
  }
  // A rank frees its slots only once no peer maps them any more.
  if (device_setup_ && node_comm_) {
    status.note(MPI_Barrier(node_comm_.get()), "MPI_Barrier(device slots)");
  }
  device_setup_ = false;
  device_.reset();
  std::fill(device_base_.begin(), device_base_.end(), nullptr);
  return status;
}

}  // namespace paramwin::detail
