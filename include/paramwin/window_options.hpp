#pragma once
/// @file window_options.hpp
/// Options fixed when a window is created: transport, wire format, exposure, layout check,
/// identity, progress thread.

#include <cstdint>
#include <string>
#include <string_view>

#include "paramwin/enum_names.hpp"

namespace paramwin {

/// How a donor's memory is read.
enum class Transport : std::uint8_t {
  automatic = 0,  ///< shared memory for donors on this node, RMA (MPI_Get) for the others
  shm = 1,        ///< shared memory only; a donor on another node is an error
  rma = 2,        ///< MPI_Get for every donor (the multi-node path, testable on one node)
};

/// Element format of the published copy (the bytes readers move).
enum class WireFormat : std::uint8_t {
  native = 0,    ///< each layer in its own dtype
  bfloat16 = 1,  ///< float32 layers stored as bfloat16 (float64/16-bit layers stay native)
  float16 = 2,   ///< float32 layers stored as IEEE float16 (float64/16-bit layers stay native)
};

/// How an agent exposes its parameters.
enum class Exposure : std::uint8_t {
  snapshot = 0,  ///< publish copies into a versioned double buffer: readers never see a torn state
  live = 1,      ///< the window memory *is* the trainer's parameters (live_span): publish is free,
                 ///< readers see whatever is there, with no snapshot guarantee
};

/// How strictly window creation compares layouts across ranks.
enum class LayoutCheck : std::uint8_t {
  strict = 0,     ///< every rank must have the same layout (else LayoutMismatch everywhere)
  per_donor = 1,  ///< layouts may differ; a pull from an incompatible donor is a DonorError
};

/// Where a window's snapshot slots live (docs/gpu.md).
enum class Memory : std::uint8_t {
  host = 0,  ///< host memory shared with the node's ranks (the default)
  /// The publishing rank's GPU (a device window): publish copies device parameters into
  /// device slots, same-node readers map them once with CUDA IPC and pull straight into
  /// their own device memory. Needs a build with CUDA (PARAMWIN_WITH_CUDA) and a device.
  cuda = 1,
};

/// WindowOptions::cuda_device: the device current on the creating thread.
inline constexpr int kCurrentDevice = -1;

/// Largest WindowOptions::progress_interval_us (one second).
inline constexpr unsigned kMaxProgressIntervalUs = 1000000;
namespace detail {
inline constexpr EnumName<Transport> kTransportNames[] = {{Transport::automatic, "auto"},
                                                          {Transport::shm, "shm"},
                                                          {Transport::rma, "rma"}};
inline constexpr EnumName<Transport> kTransportAliases[] = {{Transport::automatic, "automatic"}};
inline constexpr EnumName<WireFormat> kWireFormatNames[] = {{WireFormat::native, "native"},
                                                            {WireFormat::bfloat16, "bfloat16"},
                                                            {WireFormat::float16, "float16"}};
inline constexpr EnumName<Exposure> kExposureNames[] = {{Exposure::snapshot, "snapshot"},
                                                        {Exposure::live, "live"}};
inline constexpr EnumName<Memory> kMemoryNames[] = {{Memory::host, "host"}, {Memory::cuda, "cuda"}};
inline constexpr EnumName<LayoutCheck> kLayoutCheckNames[] = {{LayoutCheck::strict, "strict"},
                                                              {LayoutCheck::per_donor,
                                                               "per_donor"}};
}  // namespace detail
/// Names of Transport.
template <>
inline constexpr EnumTable<Transport> enum_table<Transport>{"transport", detail::kTransportNames,
                                                            detail::kTransportAliases};
/// Names of WireFormat.
template <>
inline constexpr EnumTable<WireFormat> enum_table<WireFormat>{"wire format",
                                                              detail::kWireFormatNames};
/// Names of Exposure.
template <>
inline constexpr EnumTable<Exposure> enum_table<Exposure>{"exposure", detail::kExposureNames};
/// Names of Memory.
template <>
inline constexpr EnumTable<Memory> enum_table<Memory>{"memory", detail::kMemoryNames};
/// Names of LayoutCheck.
template <>
inline constexpr EnumTable<LayoutCheck> enum_table<LayoutCheck>{"layout check",
                                                                detail::kLayoutCheckNames};

/// Lower-case name of @p transport ("auto", "shm", "rma").
[[nodiscard]] constexpr std::string_view transport_name(Transport transport) noexcept {
  return enum_name(transport);
}

/// When a reader judges another agent a suspect (RosterEntry::suspect; docs/elastic.md).
/// Judged by each reader from what it observes, with no messages: the owner's heartbeat
/// (one per set_status: every agent step) has not changed for
/// max(suspect_seconds, suspect_beats x its average time between heartbeats), or, on the
/// same host, its process is gone.
struct LivenessOptions {
  /// Lower bound of the silence, in seconds (0: no judgement by silence, the pid check only).
  double suspect_seconds = 10.0;
  /// The silence in the owner's own heartbeat intervals, when that is longer.
  double suspect_beats = 20.0;
};

/// Options fixed when a window is created.
///
/// Window creation agrees on some fields across the ranks before anything else (one
/// MPI_Allreduce) and throws InvalidArgument on every rank when they differ: verify,
/// layout_check, memory and the window's identity (name, or creation site when unnamed, and
/// creation count, see name). The others are this rank's own choice and may differ between ranks:
/// transport, exposure (readers learn each donor's exposure from its header),
/// stage_through_host, progress_thread, progress_interval_us and abort_on_unwind; wire is
/// compared with the layout (LayoutMismatch under LayoutCheck::strict, an incompatible donor
/// under LayoutCheck::per_donor).
struct WindowOptions {
  Transport transport = Transport::automatic;      ///< donor transport
  WireFormat wire = WireFormat::native;            ///< published element format
  LayoutCheck layout_check = LayoutCheck::strict;  ///< when layouts are compared
  bool verify = true;                      ///< self-check remote reads at creation (recommended)
  bool stage_through_host = false;         ///< force the host staging path (tests the device path)
  Exposure exposure = Exposure::snapshot;  ///< snapshot (copying publish) or live (zero-copy)
  /// Start a thread that polls MPI so that RMA readers are served while this rank computes
  /// (needs MPI_THREAD_MULTIPLE). See docs/rma-semantics.md.
  bool progress_thread = false;
  unsigned progress_interval_us = 200;  ///< sleep between two polls of the progress thread
  /// The window's name, for its identity check and its error messages (default: unnamed).
  /// Window creation is collective, so the windows of one communicator pair up by the
  /// order in which they are created; creation compares each window's identity and the
  /// number of windows created on the communicator so far across ranks, and throws
  /// InvalidArgument on every rank ("windows must be created in the same order on every
  /// rank") when they differ, before any memory is allocated. A named window's identity is
  /// its name alone, so the ranks may create it from different places in the code. An
  /// unnamed window has no identity but its position: it must be created at the same place
  /// on every rank (the constructor's std::source_location: file, line and column; the same
  /// program), and no two unnamed windows with one layout may be alive at once over the same
  /// processes (the second throws InvalidArgument on every rank: "name your windows"). Name
  /// windows that the ranks create from different places (different branches, MPMD
  /// programs) and windows that live at the same time.
  std::string name{};
  /// When an exception unwinds this rank past the window (its destructor runs during stack
  /// unwinding) on a communicator of more than one rank, print the diagnostic the
  /// destructor prints then (see ~ParameterWindow) and end the whole job with
  /// MPI_Abort(MPI_COMM_WORLD, 1) instead of waiting in the collective free for ranks that
  /// may never come (for batch jobs that should fail fast; it aborts even when every rank
  /// unwinds together). Setting the environment variable PARAMWIN_ABORT_ON_UNWIND to
  /// anything but "" or "0" when the window is created turns it on too. This rank's own
  /// choice (not compared across ranks).
  bool abort_on_unwind = false;
  /// Where the snapshot slots live: Memory::host, or Memory::cuda for a device window
  /// (docs/gpu.md): then publish and pull take device memory (LayerRef with
  /// paramwin::device_memory, or a Kokkos view of a CUDA space) on cuda_device, and
  /// Exposure::live is refused. The same on every rank.
  Memory memory = Memory::host;
  /// Memory::cuda: the device ordinal of this rank's slots (kCurrentDevice: the device
  /// current on the creating thread). This rank's own choice (ranks may use different GPUs).
  int cuda_device = kCurrentDevice;
  /// Memory::cuda: the CUDA stream (a cudaStream_t) that publish and pull enqueue their
  /// copies and kernels on, so that they are ordered after the caller's work on it; nullptr:
  /// the legacy default stream (ordered after every blocking stream of the device). Both
  /// calls return only once their work on it has completed.
  void* cuda_stream = nullptr;
  /// When this rank judges another agent a suspect (its own choice, not compared across ranks).
  LivenessOptions liveness{};
};

}  // namespace paramwin
