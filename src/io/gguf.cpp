#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "diffq/error.h"
#include "io/mapped_file.h"

namespace diffq::io {

namespace {
constexpr const char* kCtx = "gguf";
constexpr int kMaxDims = 5;          // GGML_MAX_DIMS + 1: Wan files (city96, sd.cpp) store patch_embedding.weight 5-D
constexpr int kMaxArrayDepth = 16;   // nested arrays deeper than this are rejected

// Block sizes and bytes per block, checked against the `gguf` Python package (GGML_QUANT_SIZES) by
// tests/io/test_gguf.cpp through tests/fixtures/io/expected.json.
constexpr GGMLTypeInfo kTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

// Bounds-checked little-endian reader over the file bytes.
class Reader {
 public:
  Reader(const uint8_t* d, size_t n, std::string_view file) : d_(d), n_(n), file_(file) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }
  const uint8_t* here() const { return d_ + pos_; }
  void need(uint64_t bytes, const char* what) const {
    if (bytes > remaining())
      fail(kCtx, file_, " is truncated: ", what, " needs ", bytes, " bytes at offset ", pos_,
           " but only ", remaining(), " remain");
  }
  const uint8_t* take(uint64_t bytes, const char* what) {
    need(bytes, what);
    const uint8_t* p = d_ + pos_;
    pos_ += size_t(bytes);
    return p;
  }
  template <class T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));  // x86/ARM little-endian hosts
    return v;
  }
  std::string str(const char* what) {
    const uint64_t len = get<uint64_t>(what);
    const uint8_t* p = take(len, what);
    return std::string(reinterpret_cast<const char*>(p), size_t(len));
  }
  std::string_view file() const { return file_; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
  std::string_view file_;
};

size_t scalar_size(GGUFValueType t) {
  switch (t) {
    case GGUFValueType::uint8: case GGUFValueType::int8: case GGUFValueType::boolean: return 1;
    case GGUFValueType::uint16: case GGUFValueType::int16: return 2;
    case GGUFValueType::uint32: case GGUFValueType::int32: case GGUFValueType::float32: return 4;
    case GGUFValueType::uint64: case GGUFValueType::int64: case GGUFValueType::float64: return 8;
    default: return 0;
  }
}

GGUFValueType value_type(uint32_t t, Reader& r, const std::string& key) {
  if (t > 12) fail(kCtx, "key '", key, "' in ", r.file(), " has unknown value type ", t);
  return GGUFValueType(t);
}

double load_number(GGUFValueType t, const uint8_t* p) {
  switch (t) {
    case GGUFValueType::uint8: return *p;
    case GGUFValueType::int8: return int8_t(*p);
    case GGUFValueType::boolean: return *p ? 1 : 0;
#define DIFFQ_LOAD(E, T) \
  case GGUFValueType::E: { T v; std::memcpy(&v, p, sizeof v); return double(v); }
    DIFFQ_LOAD(uint16, uint16_t) DIFFQ_LOAD(int16, int16_t) DIFFQ_LOAD(uint32, uint32_t)
    DIFFQ_LOAD(int32, int32_t) DIFFQ_LOAD(float32, float) DIFFQ_LOAD(uint64, uint64_t)
    DIFFQ_LOAD(int64, int64_t) DIFFQ_LOAD(float64, double)
#undef DIFFQ_LOAD
    default: return 0;
  }
}

GGUFValue read_value(Reader& r, GGUFValueType t, const std::string& key, int depth) {
  GGUFValue v;
  v.type = t;
  switch (t) {
    case GGUFValueType::uint8: v.u = r.get<uint8_t>("a value"); break;
    case GGUFValueType::uint16: v.u = r.get<uint16_t>("a value"); break;
    case GGUFValueType::uint32: v.u = r.get<uint32_t>("a value"); break;
    case GGUFValueType::uint64: v.u = r.get<uint64_t>("a value"); break;
    case GGUFValueType::int8: v.i = r.get<int8_t>("a value"); break;
    case GGUFValueType::int16: v.i = r.get<int16_t>("a value"); break;
    case GGUFValueType::int32: v.i = r.get<int32_t>("a value"); break;
    case GGUFValueType::int64: v.i = r.get<int64_t>("a value"); break;
    case GGUFValueType::float32: v.f = r.get<float>("a value"); break;
    case GGUFValueType::float64: v.f = r.get<double>("a value"); break;
    case GGUFValueType::boolean: {
      const uint8_t b = r.get<uint8_t>("a value");
      check(b <= 1, kCtx, "key '", key, "' in ", r.file(), " has bool byte ", int(b));
      v.b = b != 0;
      break;
    }
    case GGUFValueType::string: v.s = r.str("a string value"); break;
    case GGUFValueType::array: {
      check(depth < kMaxArrayDepth, kCtx, "key '", key, "' in ", r.file(), " nests arrays deeper than ",
            kMaxArrayDepth);
      v.elem_type = value_type(r.get<uint32_t>("an array type"), r, key);
      v.count = r.get<uint64_t>("an array length");
      if (const size_t es = scalar_size(v.elem_type); es != 0) {
        check(v.count <= r.remaining() / es, kCtx, "array '", key, "' in ", r.file(), " claims ",
              v.count, " elements of ", es, " bytes but only ", r.remaining(), " bytes remain");
        v.raw = r.take(v.count * es, "array data");
      } else {
        // Every string/array element takes at least 8 bytes, which bounds the loop by the file size.
        check(v.count <= r.remaining() / 8, kCtx, "array '", key, "' in ", r.file(), " claims ",
              v.count, " elements but only ", r.remaining(), " bytes remain");
        v.items.reserve(size_t(v.count));
        for (uint64_t k = 0; k < v.count; ++k) v.items.push_back(read_value(r, v.elem_type, key, depth + 1));
      }
      break;
    }
  }
  return v;
}
}  // namespace

// ---- types --------------------------------------------------------------------------------------------

const GGMLTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}
const GGMLTypeInfo* ggml_type_info(std::string_view name) {
  for (const auto& t : kTypes)
    if (t.name == name) return &t;
  return nullptr;
}
std::span<const GGMLTypeInfo> ggml_types() { return kTypes; }

std::string_view gguf_value_type_name(GGUFValueType t) {
  static constexpr std::string_view names[] = {"uint8", "int8", "uint16", "int16", "uint32",
                                               "int32", "float32", "bool", "string", "array",
                                               "uint64", "int64", "float64"};
  const auto i = size_t(t);
  return i < std::size(names) ? names[i] : "unknown";
}

// ---- values ----------------------------------------------------------------------------------------------

bool GGUFValue::is_integer() const {
  switch (type) {
    case GGUFValueType::uint8: case GGUFValueType::uint16: case GGUFValueType::uint32:
    case GGUFValueType::uint64: case GGUFValueType::int8: case GGUFValueType::int16:
    case GGUFValueType::int32: case GGUFValueType::int64: return true;
    default: return false;
  }
}
static bool is_unsigned(GGUFValueType t) {
  return t == GGUFValueType::uint8 || t == GGUFValueType::uint16 || t == GGUFValueType::uint32 ||
         t == GGUFValueType::uint64;
}

uint64_t GGUFValue::as_uint() const {
  check(is_integer(), kCtx, "value of type ", gguf_value_type_name(type), " is not an integer");
  if (is_unsigned(type)) return u;
  check(i >= 0, kCtx, "value ", i, " is negative");
  return uint64_t(i);
}
int64_t GGUFValue::as_int() const {
  check(is_integer(), kCtx, "value of type ", gguf_value_type_name(type), " is not an integer");
  if (!is_unsigned(type)) return i;
  check(u <= uint64_t(INT64_MAX), kCtx, "value ", u, " does not fit int64");
  return int64_t(u);
}
double GGUFValue::as_double() const {
  if (type == GGUFValueType::float32 || type == GGUFValueType::float64) return f;
  if (type == GGUFValueType::boolean) return b ? 1 : 0;
  check(is_integer(), kCtx, "value of type ", gguf_value_type_name(type), " is not a number");
  return is_unsigned(type) ? double(u) : double(i);
}
const std::string& GGUFValue::as_string() const {
  check(type == GGUFValueType::string, kCtx, "value of type ", gguf_value_type_name(type),
        " is not a string");
  return s;
}
double GGUFValue::number_at(uint64_t k) const {
  check(type == GGUFValueType::array && raw != nullptr, kCtx, "value is not a numeric array");
  check(k < count, kCtx, "array index ", k, " out of range (", count, " elements)");
  return load_number(elem_type, raw + k * scalar_size(elem_type));
}

int64_t GGUFValue::int_at(uint64_t k) const {
  check(type == GGUFValueType::array && raw != nullptr &&
            (elem_type == GGUFValueType::int8 || elem_type == GGUFValueType::int16 ||
             elem_type == GGUFValueType::int32 || elem_type == GGUFValueType::int64),
        kCtx, "value is not a signed integer array");
  check(k < count, kCtx, "array index ", k, " out of range (", count, " elements)");
  // Read in the element's own type: through a double, values near 2^63 are UB and above 2^53 round.
  const uint8_t* p = raw + k * scalar_size(elem_type);
  switch (elem_type) {
    case GGUFValueType::int8: return int8_t(*p);
    case GGUFValueType::int16: { int16_t v; std::memcpy(&v, p, sizeof v); return v; }
    case GGUFValueType::int32: { int32_t v; std::memcpy(&v, p, sizeof v); return v; }
    default: { int64_t v; std::memcpy(&v, p, sizeof v); return v; }
  }
}

nlohmann::json GGUFValue::to_json(uint64_t max_items) const {
  switch (type) {
    case GGUFValueType::string: return s;
    case GGUFValueType::boolean: return b;
    case GGUFValueType::float32: case GGUFValueType::float64: return f;
    case GGUFValueType::array: {
      nlohmann::json a = nlohmann::json::array();
      const uint64_t n = std::min(count, max_items);
      for (uint64_t k = 0; k < n; ++k) {
        if (raw == nullptr) {
          a.push_back(items[size_t(k)].to_json(max_items));
        } else if (elem_type == GGUFValueType::boolean) {
          a.push_back(raw[k] != 0);
        } else if (elem_type == GGUFValueType::float32 || elem_type == GGUFValueType::float64) {
          a.push_back(number_at(k));
        } else if (is_unsigned(elem_type)) {
          uint64_t x = 0;
          std::memcpy(&x, raw + k * scalar_size(elem_type), scalar_size(elem_type));
          a.push_back(x);
        } else {
          a.push_back(int_at(k));
        }
      }
      if (n < count) a.push_back(cat("... (", count - n, " more)"));
      return a;
    }
    default: return is_unsigned(type) ? nlohmann::json(u) : nlohmann::json(i);
  }
}

// ---- header ---------------------------------------------------------------------------------------------

std::string_view GGUFTensorInfo::type_name() const {
  const GGMLTypeInfo* t = ggml_type_info(type);
  return t ? t->name : "?";
}

const GGUFValue* GGUFHeader::find(std::string_view key) const {
  for (const auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}
const GGUFTensorInfo* GGUFHeader::find_tensor(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

GGUFHeader parse_gguf(const uint8_t* data, size_t size, std::string_view file) {
  Reader r(data, size, file);
  check(size >= 4 && std::memcmp(data, "GGUF", 4) == 0, kCtx, file,
        " does not start with the GGUF magic");
  r.take(4, "the magic");
  GGUFHeader h;
  h.version = r.get<uint32_t>("the version");
  check(h.version == 2 || h.version == 3, kCtx, file, " has GGUF version ", h.version,
        " (diffq reads versions 2 and 3)");
  const uint64_t n_tensors = r.get<uint64_t>("the tensor count");
  const uint64_t n_kv = r.get<uint64_t>("the key/value count");
  // Each kv takes >= 12 bytes and each tensor info >= 24: bounds the counts by the file size.
  check(n_kv <= r.remaining() / 12, kCtx, file, " claims ", n_kv, " key/values, more than fit");
  std::set<std::string> keys;
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.str("a key");
    check(keys.insert(key).second, kCtx, file, " has the key '", key, "' twice");
    const GGUFValueType t = value_type(r.get<uint32_t>("a value type"), r, key);
    GGUFValue v = read_value(r, t, key, 0);
    h.kv.emplace_back(std::move(key), std::move(v));
  }
  if (const GGUFValue* a = h.find("general.alignment")) {
    check(a->is_integer(), kCtx, "general.alignment of ", file, " is not an integer");
    const uint64_t al = a->as_uint();
    check(al != 0 && (al & (al - 1)) == 0 && al <= (uint64_t(1) << 30), kCtx,
          "general.alignment of ", file, " is ", al, ", not a power of two");
    h.alignment = al;
  }

  check(n_tensors <= r.remaining() / 24, kCtx, file, " claims ", n_tensors,
        " tensors, more than fit");
  std::set<std::string> names;
  h.tensors.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GGUFTensorInfo ti;
    ti.name = r.str("a tensor name");
    check(names.insert(ti.name).second, kCtx, file, " has the tensor '", ti.name, "' twice");
    const uint32_t n_dims = r.get<uint32_t>("a tensor rank");
    check(n_dims <= kMaxDims, kCtx, "tensor '", ti.name, "' in ", file, " has ", n_dims,
          " dims (max ", kMaxDims, ")");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.get<uint64_t>("a tensor dim");
      check(ne <= uint64_t(INT64_MAX) && !__builtin_mul_overflow(numel, ne, &numel), kCtx,
            "tensor '", ti.name, "' in ", file, " has dims whose product overflows");
      ti.ne.push_back(ne);
    }
    ti.shape.assign(ti.ne.rbegin(), ti.ne.rend());
    ti.type = r.get<uint32_t>("a tensor type");
    const GGMLTypeInfo* ty = ggml_type_info(ti.type);
    check(ty != nullptr, kCtx, "tensor '", ti.name, "' in ", file, " has unknown ggml type ",
          ti.type);
    const uint64_t ne0 = ti.ne.empty() ? 1 : ti.ne[0];
    check(ne0 % uint64_t(ty->block_size) == 0, kCtx, "tensor '", ti.name, "' in ", file,
          " has ne[0] = ", ne0, ", not a multiple of the ", ty->name, " block size ",
          ty->block_size);
    ti.numel = numel;
    check(!__builtin_mul_overflow(numel / uint64_t(ty->block_size), uint64_t(ty->type_size),
                                  &ti.nbytes),
          kCtx, "tensor '", ti.name, "' in ", file, " has a byte size that overflows");
    ti.offset = r.get<uint64_t>("a tensor offset");
    check(ti.offset % h.alignment == 0, kCtx, "tensor '", ti.name, "' in ", file, " has offset ",
          ti.offset, ", not a multiple of the alignment ", h.alignment);
    h.tensors.push_back(std::move(ti));
  }
  const uint64_t pos = r.pos();
  h.data_offset = (pos + h.alignment - 1) / h.alignment * h.alignment;
  if (h.data_offset > size) {
    check(h.tensors.empty(), kCtx, file, " is truncated before its data section");
    h.data_offset = size;
  }
  h.data_bytes = size - h.data_offset;

  std::vector<const GGUFTensorInfo*> by_offset;
  for (const auto& t : h.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  uint64_t end_prev = 0;
  const GGUFTensorInfo* prev = nullptr;
  for (const auto* t : by_offset) {
    check(t->offset <= h.data_bytes && t->nbytes <= h.data_bytes - t->offset, kCtx, "tensor '",
          t->name, "' in ", file, " (", t->type_name(), ", ", t->nbytes, " bytes at data offset ",
          t->offset, ") extends past the end of the file (data section: ", h.data_bytes,
          " bytes)");
    if (prev)
      check(t->offset >= end_prev, kCtx, "tensors '", prev->name, "' and '", t->name, "' in ",
            file, " overlap");
    end_prev = t->offset + t->nbytes;
    prev = t;
  }
  return h;
}

// ---- file -------------------------------------------------------------------------------------------------

GGUFFile GGUFFile::open(const std::filesystem::path& path) {
  GGUFFile f;
  f.path_ = path;
  f.file_ = MappedFile::open(path, kCtx);
  f.header_ = parse_gguf(f.file_->data(), f.file_->size(), path.filename().string());
  return f;
}

const GGUFTensorInfo& GGUFFile::tensor_info(std::string_view name) const {
  const GGUFTensorInfo* t = header_.find_tensor(name);
  check(t != nullptr, kCtx, "no tensor '", name, "' in ", path_.string());
  return *t;
}

std::span<const uint8_t> GGUFFile::raw_bytes(std::string_view name) const {
  const GGUFTensorInfo& t = tensor_info(name);
  return {file_->data() + header_.data_offset + t.offset, size_t(t.nbytes)};
}

Tensor GGUFFile::raw_tensor(std::string_view name) const {
  const GGUFTensorInfo& t = tensor_info(name);
  uint8_t* p = file_->mutable_data() + header_.data_offset + t.offset;
  auto storage = Storage::borrow(p, size_t(t.nbytes), Device::cpu(), file_);
  return Tensor(std::move(storage), {int64_t(t.nbytes)}, {1}, 0, DType::u8);
}

}  // namespace diffq::io
