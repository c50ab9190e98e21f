// safetensors files: the mmap-backed reader and the atomic writer.
#include "io/safetensors.h"


#include <cerrno>
#include <cstring>

#include "diffq/error.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace diffq::io {

namespace {
constexpr const char* kCtx = "safetensors";
const Metadata kEmptyMetadata;
}  // namespace

// ---- reading ---------------------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.file_ = MappedFile::open(path, kCtx);
  f.header_ = parse_safetensors(f.file_->data(), f.file_->size(), path.filename().string());
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_.emplace(f.header_.tensors[i].name, i);
  return f;
}

const Metadata& SafetensorsFile::metadata() const {
  return header_.metadata ? *header_.metadata : kEmptyMetadata;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.tensors.size());
  for (const auto& e : header_.tensors) out.push_back(e.name);
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return index_.count(std::string(name)) != 0;
}

const SafetensorsEntry& SafetensorsFile::entry(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  check(it != index_.end(), kCtx, "no tensor '", name, "' in ", path_.string());
  return header_.tensors[it->second];
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry& e = entry(name);
  if (!e.dtype) {
    std::string supported;
    for (int i = 0; i < kNumDTypes; ++i)
      supported += cat(i ? ", " : "", safetensors_dtype_name(DType(i)));
    fail(kCtx, "tensor '", e.name, "' in ", path_.string(), " has unsupported dtype ",
         e.dtype_name, " (diffq supports ", supported, ")");
  }
  const DType dt = *e.dtype;
  uint8_t* p = file_->mutable_data() + header_.data_offset() + e.begin;
  if (e.nbytes() == 0) p = nullptr;
  const Shape strides = contiguous_strides(e.shape);
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(dt) == 0) {
    auto storage = Storage::borrow(p, e.nbytes(), Device::cpu(), file_);
    return Tensor(std::move(storage), e.shape, strides, 0, dt);
  }
  // Misaligned (not produced by the Python writer): copy so typed loads stay well-defined.
  Tensor t = Tensor::empty(e.shape, dt);
  std::memcpy(t.data_ptr(), p, e.nbytes());
  return t;
}

StateDict SafetensorsFile::tensors() const {
  StateDict out;
  for (const auto& e : header_.tensors) out.emplace(e.name, tensor(e.name));
  return out;
}

// ---- writing ---------------------------------------------------------------------------------------

namespace {
// Feeds the bytes of `t` (CPU, any strides) to `sink` in logical (row-major) order.
void write_tensor_bytes(const std::function<void(const void*, size_t)>& sink, const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const size_t es = dtype_size(t.dtype());
  const auto* base = static_cast<const uint8_t*>(t.data_ptr());
  if (t.is_contiguous()) {
    sink(base, size_t(n) * es);
    return;
  }
  // Gather rows of the innermost dimension (recursing over the outer ones) into a bounded buffer.
  const int64_t rank = t.dim();
  const auto& shape = t.shape();
  const auto& strides = t.strides();
  const int64_t esz = int64_t(es);
  std::vector<uint8_t> buf;
  buf.reserve(size_t(1) << 20);
  auto gather = [&](auto&& self, const uint8_t* p, int64_t d) -> void {
    if (d == rank - 1) {
      if (strides[size_t(d)] == 1) {
        buf.insert(buf.end(), p, p + shape[size_t(d)] * esz);
      } else {
        for (int64_t i = 0; i < shape[size_t(d)]; ++i) {
          const uint8_t* e = p + i * strides[size_t(d)] * esz;
          buf.insert(buf.end(), e, e + esz);
        }
      }
      if (buf.size() >= (size_t(1) << 20)) {
        sink(buf.data(), buf.size());
        buf.clear();
      }
      return;
    }
    for (int64_t i = 0; i < shape[size_t(d)]; ++i) self(self, p + i * strides[size_t(d)] * esz, d + 1);
  };
  gather(gather, base, 0);
  if (!buf.empty()) sink(buf.data(), buf.size());
}
}  // namespace

void write_safetensors(const std::function<void(const void*, size_t)>& sink,
                       const NamedTensors& tensors, const std::optional<Metadata>& metadata) {
  std::vector<size_t> order;
  const std::string header = safetensors_header_json(tensors, metadata, &order);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  sink(len, 8);
  sink(header.data(), header.size());
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    write_tensor_bytes(sink, t.device().is_cpu() ? t : t.to(Device::cpu()));
  }
}

std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors,
                                           const std::optional<Metadata>& metadata) {
  std::vector<uint8_t> out;
  write_safetensors(
      [&](const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        out.insert(out.end(), b, b + n);
      },
      tensors, metadata);
  return out;
}

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::optional<Metadata>& metadata) {
  // Validate (names, dtypes) before creating anything on disk.
  (void)safetensors_header_json(tensors, metadata);
  io::write_file_atomically(path, kCtx, [&](const io::ByteSink& sink) { write_safetensors(sink, tensors, metadata); });
}

void save_safetensors(const std::filesystem::path& path, const StateDict& tensors,
                      const std::optional<Metadata>& metadata) {
  save_safetensors(path, NamedTensors(tensors.begin(), tensors.end()), metadata);
}

}  // namespace diffq::io
