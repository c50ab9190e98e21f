#include "io/gguf_writer.h"


#include <cerrno>
#include <cstring>
#include <set>

#include "diffq/error.h"
#include "io/atomic_file.h"

namespace diffq::io {

namespace {
constexpr const char* kCtx = "gguf";
constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;

GGUFValue scalar(GGUFValueType t) {
  GGUFValue v;
  v.type = t;
  return v;
}

bool is_unsigned(GGUFValueType t) {
  return t == GGUFValueType::uint8 || t == GGUFValueType::uint16 || t == GGUFValueType::uint32 ||
         t == GGUFValueType::uint64;
}

uint64_t unsigned_max(GGUFValueType t) {
  switch (t) {
    case GGUFValueType::uint8: return 0xFF;
    case GGUFValueType::uint16: return 0xFFFF;
    case GGUFValueType::uint32: return 0xFFFFFFFFu;
    default: return UINT64_MAX;
  }
}
std::pair<int64_t, int64_t> signed_range(GGUFValueType t) {
  switch (t) {
    case GGUFValueType::int8: return {INT8_MIN, INT8_MAX};
    case GGUFValueType::int16: return {INT16_MIN, INT16_MAX};
    case GGUFValueType::int32: return {INT32_MIN, INT32_MAX};
    default: return {INT64_MIN, INT64_MAX};
  }
}

void check_value(const GGUFValue& v, const std::string& key, int depth) {
  check(depth <= 16, kCtx, "metadata '", key, "' nests arrays deeper than 16");
  const auto t = v.type;
  check(uint32_t(t) <= 12, kCtx, "metadata '", key, "' has unknown value type ", uint32_t(t));
  if (is_unsigned(t)) {
    check(v.u <= unsigned_max(t), kCtx, "metadata '", key, "' value ", v.u, " does not fit ",
          gguf_value_type_name(t));
  } else if (v.is_integer()) {
    const auto [lo, hi] = signed_range(t);
    check(v.i >= lo && v.i <= hi, kCtx, "metadata '", key, "' value ", v.i, " does not fit ",
          gguf_value_type_name(t));
  } else if (t == GGUFValueType::array) {
    check(uint32_t(v.elem_type) <= 12, kCtx, "metadata '", key, "' has unknown array element type ",
          uint32_t(v.elem_type));
    check(v.raw == nullptr, kCtx, "metadata '", key,
          "' is a packed (read-only) array; build arrays with gguf_array()");
    for (const GGUFValue& item : v.items) {
      check(item.type == v.elem_type, kCtx, "metadata '", key, "' is an array of ",
            gguf_value_type_name(v.elem_type), " holding a ", gguf_value_type_name(item.type));
      check_value(item, key, depth + 1);
    }
  }
}

// Little-endian byte buffer for the header.
struct Out {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

void put_payload(Out& o, const GGUFValue& v) {
  switch (v.type) {
    case GGUFValueType::uint8: o.put<uint8_t>(uint8_t(v.u)); break;
    case GGUFValueType::int8: o.put<int8_t>(int8_t(v.i)); break;
    case GGUFValueType::uint16: o.put<uint16_t>(uint16_t(v.u)); break;
    case GGUFValueType::int16: o.put<int16_t>(int16_t(v.i)); break;
    case GGUFValueType::uint32: o.put<uint32_t>(uint32_t(v.u)); break;
    case GGUFValueType::int32: o.put<int32_t>(int32_t(v.i)); break;
    case GGUFValueType::uint64: o.put<uint64_t>(v.u); break;
    case GGUFValueType::int64: o.put<int64_t>(v.i); break;
    case GGUFValueType::float32: o.put<float>(float(v.f)); break;
    case GGUFValueType::float64: o.put<double>(v.f); break;
    case GGUFValueType::boolean: o.put<uint8_t>(v.b ? 1 : 0); break;
    case GGUFValueType::string: o.str(v.s); break;
    case GGUFValueType::array:
      o.put<uint32_t>(uint32_t(v.elem_type));
      o.put<uint64_t>(v.items.size());
      for (const GGUFValue& item : v.items) put_payload(o, item);
      break;
  }
}

uint64_t alignment_of(const GGUFMetadata& metadata) {
  for (const auto& [k, v] : metadata) {
    if (k != "general.alignment") continue;
    check(v.type == GGUFValueType::uint32, kCtx, "general.alignment must be a uint32 (as GGUF readers require), got ",
          gguf_value_type_name(v.type));
    check(v.u != 0 && (v.u & (v.u - 1)) == 0 && v.u <= (uint64_t(1) << 30), kCtx, "general.alignment is ",
          v.u, ", not a power of two");
    return v.u;
  }
  return kDefaultAlignment;
}

uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

struct Planned {
  const GGUFWriteTensor* t;
  Tensor bytes;  // contiguous CPU
  uint64_t nbytes, offset;
};

std::vector<Planned> plan(const std::vector<GGUFWriteTensor>& tensors, uint64_t alignment) {
  std::vector<Planned> out;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const GGUFWriteTensor& t : tensors) {
    check(!t.name.empty(), kCtx, "a tensor has an empty name");
    check(names.insert(t.name).second, kCtx, "the tensor '", t.name, "' is given twice");
    const GGMLTypeInfo* ty = ggml_type_info(t.type);
    check(ty != nullptr, kCtx, "tensor '", t.name, "' has unknown ggml type id ", t.type);
    check(!t.shape.empty() && t.shape.size() <= size_t(kMaxDims), kCtx, "tensor '", t.name, "' has ",
          t.shape.size(), " dims (GGUF holds 1 to ", kMaxDims, ")");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      check(d >= 0, kCtx, "tensor '", t.name, "' has a negative dim ", d);
      check(!__builtin_mul_overflow(numel, uint64_t(d), &numel), kCtx, "tensor '", t.name,
            "' has dims whose product overflows");
    }
    check(t.shape.back() % ty->block_size == 0, kCtx, "tensor '", t.name, "' (", ty->name, ") has rows of ",
          t.shape.back(), " elements, not a multiple of the block size ", ty->block_size);
    const uint64_t nbytes = numel / uint64_t(ty->block_size) * uint64_t(ty->type_size);
    check(t.data.defined(), kCtx, "tensor '", t.name, "' has no data");
    check(t.data.device().is_cpu(), kCtx, "tensor '", t.name, "' is on ", t.data.device().str(),
          "; write from host memory");
    check(uint64_t(t.data.nbytes()) == nbytes, kCtx, "tensor '", t.name, "' (", ty->name, ", shape ",
          shape_str(t.shape), ") needs ", nbytes, " bytes but its data has ", t.data.nbytes());
    out.push_back({&t, t.data.contiguous(), nbytes, offset});
    offset = pad_to(offset + nbytes, alignment);
  }
  return out;
}

}  // namespace

GGUFValue gguf_u8(uint8_t v) { auto r = scalar(GGUFValueType::uint8); r.u = v; return r; }
GGUFValue gguf_i8(int8_t v) { auto r = scalar(GGUFValueType::int8); r.i = v; return r; }
GGUFValue gguf_u16(uint16_t v) { auto r = scalar(GGUFValueType::uint16); r.u = v; return r; }
GGUFValue gguf_i16(int16_t v) { auto r = scalar(GGUFValueType::int16); r.i = v; return r; }
GGUFValue gguf_u32(uint32_t v) { auto r = scalar(GGUFValueType::uint32); r.u = v; return r; }
GGUFValue gguf_i32(int32_t v) { auto r = scalar(GGUFValueType::int32); r.i = v; return r; }
GGUFValue gguf_u64(uint64_t v) { auto r = scalar(GGUFValueType::uint64); r.u = v; return r; }
GGUFValue gguf_i64(int64_t v) { auto r = scalar(GGUFValueType::int64); r.i = v; return r; }
GGUFValue gguf_f32(float v) { auto r = scalar(GGUFValueType::float32); r.f = v; return r; }
GGUFValue gguf_f64(double v) { auto r = scalar(GGUFValueType::float64); r.f = v; return r; }
GGUFValue gguf_bool(bool v) { auto r = scalar(GGUFValueType::boolean); r.b = v; return r; }
GGUFValue gguf_string(std::string v) { auto r = scalar(GGUFValueType::string); r.s = std::move(v); return r; }
GGUFValue gguf_array(GGUFValueType elem_type, std::vector<GGUFValue> items) {
  auto r = scalar(GGUFValueType::array);
  r.elem_type = elem_type;
  r.count = items.size();
  r.items = std::move(items);
  return r;
}

Tensor bytes_tensor(const void* bytes, size_t n) {
  Tensor t = Tensor::empty({int64_t(n)}, DType::u8);
  if (n) std::memcpy(t.data_ptr(), bytes, n);
  return t;
}

void write_gguf(const std::function<void(const void*, size_t)>& sink, const GGUFMetadata& metadata,
                const std::vector<GGUFWriteTensor>& tensors) {
  std::set<std::string> keys;
  for (const auto& [k, v] : metadata) {
    check(!k.empty(), kCtx, "a metadata key is empty");
    check(keys.insert(k).second, kCtx, "the metadata key '", k, "' is given twice");
    check_value(v, k, 0);
  }
  const uint64_t alignment = alignment_of(metadata);
  const std::vector<Planned> planned = plan(tensors, alignment);

  Out h;
  h.b.reserve(4096);  // headers are small; also keeps GCC 12's -Wstringop-overflow false positive away
  h.b = {'G', 'G', 'U', 'F'};
  h.put<uint32_t>(kVersion);
  h.put<uint64_t>(tensors.size());
  h.put<uint64_t>(metadata.size());
  for (const auto& [k, v] : metadata) {
    h.str(k);
    h.put<uint32_t>(uint32_t(v.type));
    put_payload(h, v);
  }
  for (const Planned& p : planned) {
    h.str(p.t->name);
    h.put<uint32_t>(uint32_t(p.t->shape.size()));
    for (auto it = p.t->shape.rbegin(); it != p.t->shape.rend(); ++it) h.put<uint64_t>(uint64_t(*it));
    h.put<uint32_t>(p.t->type);
    h.put<uint64_t>(p.offset);
  }
  h.b.resize(size_t(pad_to(h.b.size(), alignment)), 0);
  sink(h.b.data(), h.b.size());
  const std::vector<uint8_t> zeros(size_t(alignment), 0);
  for (const Planned& p : planned) {
    if (p.nbytes) sink(p.bytes.data_ptr(), size_t(p.nbytes));
    const uint64_t pad = pad_to(p.nbytes, alignment) - p.nbytes;
    if (pad) sink(zeros.data(), size_t(pad));
  }
}

std::vector<uint8_t> serialize_gguf(const GGUFMetadata& metadata, const std::vector<GGUFWriteTensor>& tensors) {
  std::vector<uint8_t> out;
  write_gguf(
      [&](const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        out.insert(out.end(), b, b + n);
      },
      metadata, tensors);
  return out;
}

void write_gguf(const std::filesystem::path& path, const GGUFMetadata& metadata,
                const std::vector<GGUFWriteTensor>& tensors) {
  // Validate before creating anything on disk (a sink that discards).
  write_gguf([](const void*, size_t) {}, metadata, tensors);
  io::write_file_atomically(path, kCtx, [&](const io::ByteSink& sink) { write_gguf(sink, metadata, tensors); });
}

}  // namespace diffq::io
