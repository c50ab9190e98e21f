// safetensors header: parsing + validation (from memory) and the exact JSON the Python library writes.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "diffq/error.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"

namespace diffq::io {

namespace {
constexpr const char* kCtx = "safetensors";

// Every dtype the safetensors format defines, with its size in bits (sub-byte types exist) and the
// diffq dtype when diffq can hold it. Order = the Rust enum's declaration order, which is also the
// (descending) order the writer sorts tensors by.
struct StDType {
  std::string_view name;
  int bits;
  std::optional<DType> dtype;
};
const StDType kStDTypes[] = {
    {"BOOL", 8, DType::boolean}, {"F4", 4, std::nullopt},       {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt}, {"U8", 8, DType::u8},         {"I8", 8, DType::i8},
    {"F8_E5M2", 8, DType::f8_e5m2}, {"F8_E4M3", 8, DType::f8_e4m3fn}, {"F8_E8M0", 8, std::nullopt},
    {"I16", 16, std::nullopt},    {"U16", 16, std::nullopt},    {"F16", 16, DType::f16},
    {"BF16", 16, DType::bf16},    {"I32", 32, DType::i32},      {"U32", 32, std::nullopt},
    {"F32", 32, DType::f32},      {"F64", 64, std::nullopt},    {"I64", 64, DType::i64},
    {"U64", 64, std::nullopt},
};

const StDType* find_st_dtype(std::string_view name) {
  for (const auto& d : kStDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

int st_dtype_rank(DType t) {
  const std::string_view n = safetensors_dtype_name(t);
  for (int i = 0; i < int(std::size(kStDTypes)); ++i)
    if (kStDTypes[i].name == n) return i;
  return -1;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses JSON rejecting duplicate keys in any object (nlohmann would silently keep the last one).
nlohmann::json parse_json_strict(const char* begin, const char* end, std::string_view file) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) {
      keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(begin, end, cb, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    fail(kCtx, "header of ", file, " is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) fail(kCtx, "header of ", file, " has the key '", duplicate, "' twice");
  return j;
}

uint64_t get_offset(const nlohmann::json& v, std::string_view file, const std::string& name) {
  check(v.is_number_unsigned(), kCtx, "tensor '", name, "' in ", file,
        " has a data offset that is not a non-negative integer: ", v.dump());
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& info,
                             std::string_view file) {
  check(info.is_object(), kCtx, "tensor '", name, "' in ", file, " is not an object: ",
        info.dump().substr(0, 80));
  SafetensorsEntry e;
  e.name = name;
  const auto dt = info.find("dtype");
  check(dt != info.end() && dt->is_string(), kCtx, "tensor '", name, "' in ", file,
        " has no string \"dtype\"");
  e.dtype_name = dt->get<std::string>();
  const StDType* st = find_st_dtype(e.dtype_name);
  check(st != nullptr, kCtx, "tensor '", name, "' in ", file, " has unknown dtype '",
        e.dtype_name, "'");
  e.dtype = st->dtype;

  const auto sh = info.find("shape");
  check(sh != info.end() && sh->is_array(), kCtx, "tensor '", name, "' in ", file,
        " has no \"shape\" array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    check(d.is_number_unsigned(), kCtx, "tensor '", name, "' in ", file,
          " has a shape entry that is not a non-negative integer: ", sh->dump().substr(0, 120));
    const uint64_t v = d.get<uint64_t>();
    check(v <= uint64_t(INT64_MAX), kCtx, "tensor '", name, "' in ", file, " has dimension ", v,
          " beyond int64");
    e.shape.push_back(int64_t(v));
    if (__builtin_mul_overflow(numel, v, &numel)) overflow = true;
  }
  uint64_t bits = 0;
  if (!overflow && __builtin_mul_overflow(numel, uint64_t(st->bits), &bits)) overflow = true;
  check(!overflow, kCtx, "tensor '", name, "' in ", file, " has shape ", sh->dump(),
        " whose byte size overflows 64 bits");
  check(bits % 8 == 0, kCtx, "tensor '", name, "' in ", file, " (", e.dtype_name, " ",
        sh->dump(), ") does not fill whole bytes");

  const auto off = info.find("data_offsets");
  check(off != info.end() && off->is_array() && off->size() == 2, kCtx, "tensor '", name, "' in ",
        file, " needs \"data_offsets\": [begin, end]");
  e.begin = get_offset((*off)[0], file, name);
  e.end = get_offset((*off)[1], file, name);
  check(e.end >= e.begin, kCtx, "tensor '", name, "' in ", file, " has data_offsets [", e.begin,
        ", ", e.end, "] with end < begin");
  check(e.end - e.begin == bits / 8, kCtx, "tensor '", name, "' in ", file, " (", e.dtype_name,
        " ", shape_str(e.shape), " = ", bits / 8, " bytes) has a byte range of ",
        e.end - e.begin, " bytes");
  return e;
}

// serde_json's string escaping: ", \, and control characters; everything else (UTF-8, '/') raw.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          static const char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}
}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, std::string_view file) {
  check(size >= 8, kCtx, file, " is ", size,
        " bytes, too short for the 8-byte header length (truncated file?)");
  const uint64_t n = read_u64_le(data);
  check(n <= kMaxSafetensorsHeader, kCtx, "header of ", file, " claims ", format_bytes(n),
        ", beyond the ", format_bytes(kMaxSafetensorsHeader), " limit (not a safetensors file?)");
  check(n <= size - 8, kCtx, "header of ", file, " claims ", format_bytes(n), " but the file has ",
        format_bytes(size), " (truncated file?)");
  check(n >= 2 && data[8] == '{', kCtx, "header of ", file, " does not start with '{'");

  const char* hb = reinterpret_cast<const char*>(data + 8);
  const nlohmann::json j = parse_json_strict(hb, hb + n, file);
  check(j.is_object(), kCtx, "header of ", file, " is not a JSON object");

  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_bytes = uint64_t(size) - 8 - n;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      check(value.is_object(), kCtx, "__metadata__ of ", file, " is not an object");
      Metadata m;
      for (const auto& [k, v] : value.items()) {
        check(v.is_string(), kCtx, "__metadata__ entry '", k, "' of ", file,
              " is not a string: ", v.dump().substr(0, 80));
        m.emplace(k, v.get<std::string>());
      }
      h.metadata = std::move(m);
      continue;
    }
    h.tensors.push_back(parse_entry(key, value, file));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : h.tensors) {
    if (e.begin != pos) {
      if (prev == nullptr)
        fail(kCtx, "the first tensor '", e.name, "' in ", file, " starts at byte ", e.begin,
             " instead of 0 (tensors must cover the data section without gaps)");
      fail(kCtx, "tensor '", e.name, "' in ", file, " starts at byte ", e.begin,
           " but the previous tensor '", prev->name, "' ends at ", pos, " (",
           e.begin < pos ? "overlap" : "gap",
           "; tensors must cover the data section without gaps or overlaps)");
    }
    check(e.end <= h.data_bytes, kCtx, "tensor '", e.name, "' in ", file, " ends at byte ", e.end,
          " but the data section has only ", h.data_bytes, " bytes (truncated file?)");
    pos = e.end;
    prev = &e;
  }
  check(pos == h.data_bytes, kCtx, "tensors in ", file, " end at byte ", pos,
        " but the data section has ", h.data_bytes, " bytes (trailing bytes not covered)");
  return h;
}

std::string safetensors_header_json(const NamedTensors& tensors,
                                    const std::optional<Metadata>& metadata,
                                    std::vector<size_t>* data_order) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = st_dtype_rank(tensors[a].second.dtype());
    const int rb = st_dtype_rank(tensors[b].second.dtype());
    if (ra != rb) return ra > rb;
    return tensors[a].first < tensors[b].first;
  });
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    check(name != "__metadata__", kCtx, "a tensor cannot be named '__metadata__'");
    check(seen.insert(name).second, kCtx, "tensor name '", name, "' given twice");
    check(t.defined(), kCtx, "tensor '", name, "' is undefined");
    check(!t.is_symbolic(), kCtx, "tensor '", name, "' is symbolic (traced) and has no bytes");
  }
  std::string s = "{";
  bool first = true;
  if (metadata) {
    s += "\"__metadata__\":{";
    bool f2 = true;
    for (const auto& [k, v] : *metadata) {
      if (!f2) s += ',';
      f2 = false;
      append_json_string(s, k);
      s += ':';
      append_json_string(s, v);
    }
    s += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    if (!first) s += ',';
    first = false;
    append_json_string(s, name);
    s += ":{\"dtype\":\"";
    s += safetensors_dtype_name(t.dtype());
    s += "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d) s += ',';
      s += std::to_string(t.shape()[d]);
    }
    const uint64_t n = t.nbytes();
    s += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
    offset += n;
  }
  s += '}';
  s.append((8 - s.size() % 8) % 8, ' ');
  if (data_order) *data_order = std::move(order);
  return s;
}

}  // namespace diffq::io
