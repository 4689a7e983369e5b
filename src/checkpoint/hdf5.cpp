// HDF5 helpers for checkpoints: identifiers, errors, types and attributes.
#include "checkpoint/hdf5.hpp"

#include "paramwin/checkpoint.hpp"

namespace paramwin::detail {

namespace {

// The innermost (first) message of HDF5's error stack: the most specific one.
herr_t first_message(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err->desc != nullptr) {
    *out = std::string(err->func_name != nullptr ? err->func_name : "?") + ": " + err->desc;
  }
  return 0;
}

H5Id scalar_space(const std::string& path) {
  return h5_check(H5Screate(H5S_SCALAR), H5Sclose, path, "H5Screate");
}

H5Id open_attr(hid_t obj, const char* name, const std::string& path) {
  if (H5Aexists(obj, name) <= 0) {
    throw CheckpointError("paramwin: checkpoint '" + path + "': attribute '" + name +
                          "' missing (not a paramwin checkpoint, or damaged)");
  }
  return h5_check(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose, path,
                  std::string("opening attribute ") + name);
}

template <class T>
void write_scalar(hid_t obj, const char* name, hid_t type, T value, const std::string& path) {
  const H5Id space = scalar_space(path);
  const H5Id attr = h5_check(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                             H5Aclose, path, std::string("creating attribute ") + name);
  h5_check(H5Awrite(attr.get(), type, &value), path, std::string("writing attribute ") + name);
}

template <class T>
T read_scalar(hid_t obj, const char* name, hid_t type, const std::string& path) {
  const H5Id attr = open_attr(obj, name, path);
  const H5Id space = h5_check(H5Aget_space(attr.get()), H5Sclose, path, "H5Aget_space");
  if (H5Sget_simple_extent_npoints(space.get()) != 1) {
    throw CheckpointError("paramwin: checkpoint '" + path + "': attribute '" + name +
                          "' is not a scalar");
  }
  T value{};
  h5_check(H5Aread(attr.get(), type, &value), path, std::string("reading attribute ") + name);
  return value;
}

}  // namespace

void h5_quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void h5_fail(const std::string& path, const std::string& what) {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_message, &message);
  H5Eclear2(H5E_DEFAULT);
  throw CheckpointError("paramwin: checkpoint '" + path + "': " + what + " failed" +
                        (message.empty() ? std::string() : " (HDF5: " + message + ")"));
}

H5Id h5_check(hid_t id, H5Id::Closer close, const std::string& path, const std::string& what) {
  if (id < 0) h5_fail(path, what);
  return H5Id(id, close);
}

void h5_check(herr_t status, const std::string& path, const std::string& what) {
  if (status < 0) h5_fail(path, what);
}

H5Id h5_type(DType dtype) {
  const std::string path = "(type)";
  switch (dtype) {
    case DType::float32: return h5_check(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, path, "H5Tcopy");
    case DType::float64: return h5_check(H5Tcopy(H5T_IEEE_F64LE), H5Tclose, path, "H5Tcopy");
    case DType::float16:
    case DType::bfloat16: {
      H5Id t = h5_check(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, path, "H5Tcopy");
      // Sign bit 15; half: 5 exponent bits at 10, 10 mantissa bits, bias 15; bfloat16: 8 at 7,
      // 7 mantissa bits, bias 127. Fields first, then the size (HDF5 checks they fit).
      const bool half = dtype == DType::float16;
      const std::size_t epos = half ? 10 : 7;
      const std::size_t esize = half ? 5 : 8;
      const std::size_t msize = half ? 10 : 7;
      h5_check(H5Tset_fields(t.get(), 15, epos, esize, 0, msize), path, "H5Tset_fields");
      h5_check(H5Tset_precision(t.get(), 16), path, "H5Tset_precision");
      h5_check(H5Tset_offset(t.get(), 0), path, "H5Tset_offset");
      h5_check(H5Tset_size(t.get(), 2), path, "H5Tset_size");
      h5_check(H5Tset_ebias(t.get(), half ? 15 : 127), path, "H5Tset_ebias");
      return t;
    }
  }
  throw CheckpointError("paramwin: checkpoint: unknown dtype");
}

void write_attr(hid_t obj, const char* name, std::uint64_t value, const std::string& path) {
  write_scalar(obj, name, H5T_NATIVE_UINT64, value, path);
}
void write_attr(hid_t obj, const char* name, std::int64_t value, const std::string& path) {
  write_scalar(obj, name, H5T_NATIVE_INT64, value, path);
}
void write_attr(hid_t obj, const char* name, double value, const std::string& path) {
  write_scalar(obj, name, H5T_NATIVE_DOUBLE, value, path);
}
void write_attr(hid_t obj, const char* name, const std::string& value, const std::string& path) {
  // A fixed-length string (h5py reads it as bytes; variable-length strings cannot be written
  // collectively as cheaply).
  const H5Id type = h5_check(H5Tcopy(H5T_C_S1), H5Tclose, path, "H5Tcopy");
  h5_check(H5Tset_size(type.get(), std::max<std::size_t>(value.size(), 1)), path, "H5Tset_size");
  h5_check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), path, "H5Tset_strpad");
  const H5Id space = scalar_space(path);
  const H5Id attr =
      h5_check(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
               path, std::string("creating attribute ") + name);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  h5_check(H5Awrite(attr.get(), type.get(), padded.data()), path,
           std::string("writing attribute ") + name);
}

std::uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& path) {
  return read_scalar<std::uint64_t>(obj, name, H5T_NATIVE_UINT64, path);
}
std::int64_t read_attr_i64(hid_t obj, const char* name, const std::string& path) {
  return read_scalar<std::int64_t>(obj, name, H5T_NATIVE_INT64, path);
}
double read_attr_f64(hid_t obj, const char* name, const std::string& path) {
  return read_scalar<double>(obj, name, H5T_NATIVE_DOUBLE, path);
}
std::string read_attr_str(hid_t obj, const char* name, const std::string& path) {
  const H5Id attr = open_attr(obj, name, path);
  const H5Id type = h5_check(H5Aget_type(attr.get()), H5Tclose, path, "H5Aget_type");
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) {
    throw CheckpointError("paramwin: checkpoint '" + path + "': attribute '" + name +
                          "' is not a fixed-length string");
  }
  const std::size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  h5_check(H5Aread(attr.get(), type.get(), value.data()), path,
           std::string("reading attribute ") + name);
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

H5Id h5_mpio_fapl(MPI_Comm comm, const std::string& path) {
  H5Id fapl = h5_check(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, path, "H5Pcreate(file access)");
  h5_check(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), path, "H5Pset_fapl_mpio");
  return fapl;
}

std::string h5_escape(const std::string& name) {
  std::string out;
  for (const char c : name) {
    if (c == '/') out += "%2F";
    else if (c == '%') out += "%25";
    else out += c;
  }
  return out.empty() ? std::string("%00") : out;
}

}  // namespace paramwin::detail
