#include "troupe/graph/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {

// safetensors dtype names <-> ours.
const std::vector<std::pair<DType, const char*>>& dtype_names() {
  static const std::vector<std::pair<DType, const char*>> names{
      {DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"}, {DType::f64, "F64"},
      {DType::i32, "I32"}, {DType::i64, "I64"}, {DType::u8, "U8"}};
  return names;
}
const char* file_dtype(DType d) {
  for (const auto& [ours, theirs] : dtype_names())
    if (ours == d) return theirs;
  fail(ErrorKind::unsupported, "safetensors: dtype ", dtype_name(d), " has no safetensors name");
}
DType parse_file_dtype(const std::string& s, const std::string& source, const std::string& tensor) {
  for (const auto& [ours, theirs] : dtype_names())
    if (s == theirs) return ours;
  fail(ErrorKind::io, source, ": tensor '", printable(tensor), "' has dtype '", printable(s),
       "', which Troupe does not read (supported: F32 F16 BF16 F64 I32 I64 U8)");
}

// Throws an io Error naming `path` and the system's reason.
[[noreturn]] void io_fail(const std::string& path, const std::string& what) {
  fail(ErrorKind::io, path, ": ", what, ": ", std::strerror(errno));
}

void write_all(int fd, const char* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) io_fail(path, "cannot write");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void fsync_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) io_fail(dir, "cannot open the folder to sync it");
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

namespace {

// The file's first part (its header's length and the JSON header, padded) for `tensors`, whose
// dense CPU copies it leaves in `dense` for the data that follows; `where` names the data in errors.
std::string file_header(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata,
                        std::vector<Tensor>& dense, const std::string& where) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TROUPE_CHECK(name != "__metadata__" && !name.empty(), invalid_argument, "save_safetensors ", where,
                 ": invalid tensor name '", name, "'");
    TROUPE_CHECK(t.defined(), invalid_argument, "save_safetensors ", where, ": tensor '", name, "' is undefined");
    dense.push_back(t.to(Device::cpu()).contiguous());
    const std::size_t n = dense.back().nbytes();
    header[name] = {{"dtype", file_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned, as the format advises
  const std::uint64_t len = json.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + json;
}

}  // namespace

std::string safetensors_bytes(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> dense;
  std::string out = file_header(tensors, metadata, dense, "(in memory)");
  for (const Tensor& t : dense) out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> dense;
  const std::string header = file_header(tensors, metadata, dense, path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) io_fail(tmp, "cannot create");
  try {
    write_all(fd, header.data(), header.size(), tmp);
    for (const Tensor& t : dense) write_all(fd, static_cast<const char*>(t.raw_data()), t.nbytes(), tmp);
    if (::fsync(fd) != 0) io_fail(tmp, "cannot sync");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_fail(path, "cannot rename the written file into place");
  }
  fsync_dir(path);
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_fail(path, "cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  TROUPE_CHECK(!in.bad(), io, path, ": read failed");
  return parse_safetensors(buf.str(), path);
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& source) {
  TROUPE_CHECK(bytes.size() >= 8, io, source, ": ", bytes.size(),
               " bytes is too short for a safetensors file (it starts with an 8-byte header length)");
  std::uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  TROUPE_CHECK(len <= bytes.size() - 8, io, source, ": header length ", len, " runs past the end of the file (",
               bytes.size(), " bytes); the file is truncated or not safetensors");
  const std::size_t data_start = 8 + static_cast<std::size_t>(len);
  const std::size_t data_size = bytes.size() - data_start;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + static_cast<std::ptrdiff_t>(data_start));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, source, ": the header is not valid JSON (", printable(e.what(), 400), ")");
  }
  TROUPE_CHECK(header.is_object(), io, source, ": the header must be a JSON object");

  SafetensorsFile file;
  struct Span {
    std::size_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      TROUPE_CHECK(entry.is_object(), io, source, ": __metadata__ must be an object of strings");
      for (const auto& [k, v] : entry.items()) {
        TROUPE_CHECK(v.is_string(), io, source, ": __metadata__ value '", printable(k), "' is not a string");
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = source + ": tensor '" + printable(name) + "'";
    TROUPE_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                     entry.contains("data_offsets"),
                 io, where, " needs dtype, shape and data_offsets");
    TROUPE_CHECK(entry["dtype"].is_string(), io, where, ": dtype must be a string");
    const DType dtype = parse_file_dtype(entry["dtype"].get<std::string>(), source, name);
    Shape shape;
    TROUPE_CHECK(entry["shape"].is_array(), io, where, ": shape must be an array");
    for (const auto& d : entry["shape"]) {
      // JSON parses non-negative integers as unsigned; 2^63 and above do not fit a dimension.
      TROUPE_CHECK(d.is_number_unsigned() && d.get<std::uint64_t>() <= std::uint64_t(INT64_MAX), io, where,
                   ": shape ", entry["shape"].dump(), " must hold integers from 0 to 2^63 - 1");
      shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
    }
    const auto& off = entry["data_offsets"];
    TROUPE_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), io,
                 where, ": data_offsets must be [begin, end]");
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    TROUPE_CHECK(begin <= end && end <= data_size, io, where, ": data_offsets [", begin, ", ", end,
                 "] lie outside the data section of ", data_size, " bytes");
    std::uint64_t expected = 0;
    try {
      expected = shape_nbytes(shape, dtype_size(dtype));
    } catch (const Error& e) {
      fail(ErrorKind::io, where, ": ", e.message());
    }
    TROUPE_CHECK(end - begin == expected, io, where, ": ", end - begin, " bytes for ", dtype_name(dtype),
                 shape_str(shape), ", which needs ", expected);
    Tensor t = Tensor::empty(shape, dtype);
    std::memcpy(t.raw_data(), bytes.data() + data_start + begin, static_cast<std::size_t>(expected));
    file.tensors.emplace(name, t);
    spans.push_back({static_cast<std::size_t>(begin), static_cast<std::size_t>(end), name});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i)
    TROUPE_CHECK(spans[i].begin >= spans[i - 1].end, io, source, ": tensors '", printable(spans[i - 1].name), "' and '",
                 printable(spans[i].name), "' overlap in the data section");
  return file;
}

}  // namespace troupe::graph
