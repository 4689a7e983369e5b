#pragma once
// Thin RAII and error handling over the HDF5 C API for checkpoints: every failing call becomes
// a CheckpointError naming the call, the object and HDF5's innermost message.
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "paramwin/dtype.hpp"

namespace paramwin::detail {

/// One HDF5 identifier and the function that closes it. Move-only; closing never throws.
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer close) : id_(id), close_(close) {}
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  ~H5Id() { reset(); }
  /// Closes now; returns false when HDF5 reported an error.
  bool reset() noexcept {
    bool ok = true;
    if (id_ >= 0 && close_ != nullptr) ok = close_(id_) >= 0;
    id_ = H5I_INVALID_HID;
    return ok;
  }
  [[nodiscard]] hid_t get() const noexcept { return id_; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

/// Turns off HDF5's printing of its error stack (errors become exceptions instead).
void h5_quiet();
/// Throws CheckpointError "paramwin: checkpoint 'path': <what> failed: <HDF5 message>".
[[noreturn]] void h5_fail(const std::string& path, const std::string& what);
/// @p id wrapped with @p close, or h5_fail when it is negative.
[[nodiscard]] H5Id h5_check(hid_t id, H5Id::Closer close, const std::string& path,
                            const std::string& what);
/// h5_fail when @p status is negative.
void h5_check(herr_t status, const std::string& path, const std::string& what);

/// The HDF5 type of @p dtype: native float32/float64, IEEE half and bfloat16 as custom floats
/// (h5py reads the half as float16). Owned by the caller.
[[nodiscard]] H5Id h5_type(DType dtype);

/// Scalar attributes of @p obj (written collectively: the same value on every rank).
void write_attr(hid_t obj, const char* name, std::uint64_t value, const std::string& path);
void write_attr(hid_t obj, const char* name, std::int64_t value, const std::string& path);
void write_attr(hid_t obj, const char* name, double value, const std::string& path);
void write_attr(hid_t obj, const char* name, const std::string& value, const std::string& path);
[[nodiscard]] std::uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& path);
[[nodiscard]] std::int64_t read_attr_i64(hid_t obj, const char* name, const std::string& path);
[[nodiscard]] double read_attr_f64(hid_t obj, const char* name, const std::string& path);
[[nodiscard]] std::string read_attr_str(hid_t obj, const char* name, const std::string& path);

/// A file access property list for MPI-IO over @p comm.
[[nodiscard]] H5Id h5_mpio_fapl(MPI_Comm comm, const std::string& path);

/// Dataset name of layer @p name ('/' and '%' escaped as %2F and %25).
[[nodiscard]] std::string h5_escape(const std::string& name);

}  // namespace paramwin::detail
