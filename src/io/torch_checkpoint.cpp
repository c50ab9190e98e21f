#include "io/torch_checkpoint.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "diffq/error.h"
#include "io/mapped_file.h"
#include "io/torch_zip.h"

namespace diffq::io {

using pickle::Kind;
using pickle::Ref;
using pickle::TensorDesc;
using pickle::Unpickled;
using pickle::Value;
using nlohmann::json;

namespace {

constexpr const char* kCtx = "torch";
constexpr int kMaxDepth = 32;

// torchao 0.18's tensor subclasses as torchao's safetensors support describes them: which of their
// __dict__ entries are optional tensors (left out when None), and whether the wrapper's dtype / shape
// are serialized attributes.
struct SubclassInfo {
  std::string_view name;
  std::vector<std::string_view> required, optional;
  bool dtype_attr, shape_attr;
};
const SubclassInfo kSubclasses[] = {
    {"Int8Tensor", {"qdata", "scale"}, {"zero_point", "act_quant_scale", "act_quant_zero_point", "act_pre_scale"}, true, false},
    {"Float8Tensor", {"qdata", "scale"}, {}, true, false},
    {"Int4Tensor", {"qdata", "scale", "zero_point"}, {}, false, true},
    {"IntxUnpackedToInt8Tensor", {"qdata", "scale", "zero_point"}, {}, true, false},
};

std::string short_name(const std::string& qualified) {
  const auto dot = qualified.rfind('.');
  return dot == std::string::npos ? qualified : qualified.substr(dot + 1);
}

json dtype_json(const pickle::TorchDType& d) { return json{{"_type", "torch.dtype"}, {"_data", d.name}}; }

// torchao's TensorSubclassAttributeJSONEncoder on a pickled attribute value.
json attribute_json(const Unpickled& u, Ref r, const std::string& where, int depth = 0) {
  check(depth < kMaxDepth, kCtx, where, ": attribute nested deeper than ", kMaxDepth);
  const Value& v = u.at(r);
  switch (v.kind) {
    case Kind::None: return nullptr;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i;
    case Kind::Float: return v.f;
    case Kind::Str: return v.s;
    case Kind::Tuple:
    case Kind::List: {
      json a = json::array();
      for (Ref e : v.items) a.push_back(attribute_json(u, e, where, depth + 1));
      return a;
    }
    case Kind::Dict: {
      json o = json::object();
      for (size_t i = 0; i + 1 < v.items.size(); i += 2) {
        const Value& k = u.at(v.items[i]);
        check(k.kind == Kind::Str, kCtx, where, ": attribute dict with a key that is ", u.describe(v.items[i]));
        o[k.s] = attribute_json(u, v.items[i + 1], where, depth + 1);
      }
      return o;
    }
    case Kind::DType: return dtype_json(v.dtype);
    case Kind::Object: {
      const std::string cls = short_name(v.s);
      if (cls == "MappingType" || cls == "KernelPreference") {  // enums: stored by member name
        check(v.items.size() == 1, kCtx, where, ": ", v.s, " without a value");
        const Value& e = u.at(v.items[0]);
        static const char* kMapping[] = {"", "SYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR", "ASYMMETRIC"};
        std::string name;
        if (e.kind == Kind::Int && e.i >= 1 && e.i <= 3) name = kMapping[e.i];
        if (e.kind == Kind::Str)
          for (char c : e.s) name += char(c >= 'a' && c <= 'z' ? c - 32 : c);
        check(!name.empty(), kCtx, where, ": ", v.s, "(", u.describe(v.items[0]), ") is not a member diffq knows");
        return json{{"_type", cls}, {"_data", name}};
      }
      json data = json::object();
      if (cls == "Float8MMConfig") {  // a NamedTuple: NEWOBJ(cls, (emulate, use_fast_accum, pad_inner_dim))
        static const char* kFields[] = {"emulate", "use_fast_accum", "pad_inner_dim"};
        check(v.items.size() <= 3, kCtx, where, ": Float8MMConfig with ", v.items.size(), " fields");
        for (size_t i = 0; i < v.items.size(); ++i) data[kFields[i]] = attribute_json(u, v.items[i], where, depth + 1);
      } else {  // dataclasses: their fields are the BUILD state
        check(v.items.empty(), kCtx, where, ": ", v.s, " built with constructor arguments");
        if (v.state) {
          data = attribute_json(u, *v.state, where, depth + 1);
          check(data.is_object(), kCtx, where, ": the state of ", v.s, " is not a dict");
        }
      }
      return json{{"_type", cls}, {"_data", data}};
    }
    default: fail(kCtx, where, ": attribute holds ", u.describe(r), ", which diffq cannot represent");
  }
}

// One tensor over its storage's bytes; checks dtype, sizes and that the view stays inside the storage.
class TensorMaker {
 public:
  TensorMaker(const Unpickled& u, const StorageLookup& lookup, std::string_view where)
      : u_(u), lookup_(lookup), where_(where) {}

  Tensor make(const TensorDesc& t, const std::string& key) {
    check(t.subclass.empty() && t.storage, kCtx, where_, ": '", key, "' is ",
          t.subclass.empty() ? "a tensor without storage" : t.subclass, " where a plain tensor was expected");
    check(t.dtype.dtype.has_value(), kCtx, where_, ": tensor '", key, "' has dtype ", t.dtype.name,
          ", which diffq does not hold (float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, int8, uint8, "
          "int32, int64, bool)");
    const DType dt = *t.dtype.dtype;
    const pickle::StorageDesc& sd = u_.storage(u_.at(*t.storage));
    const Entry& e = storage(sd);
    const uint64_t es = dtype_size(dt);
    const uint64_t elems = e.nbytes / es;
    int64_t numel = 1;
    unsigned __int128 last = uint64_t(t.offset);
    for (size_t i = 0; i < t.shape.size(); ++i) {
      numel = t.shape[i] == 0 ? 0 : numel;
      if (t.shape[i] > 0) last += (unsigned __int128)(uint64_t(t.shape[i] - 1)) * uint64_t(t.strides[i]);
    }
    if (numel > 0) {
      unsigned __int128 total = 1;
      for (int64_t d : t.shape) total *= uint64_t(d);
      check(total < (unsigned __int128)(1) << 62 && last < elems, kCtx, where_, ": tensor '", key, "' (shape ",
            shape_str(t.shape), ", stride ", shape_str(t.strides), ", storage offset ", t.offset,
            ") reaches past the end of storage '", sd.key, "', which holds ", elems, " ", t.dtype.name,
            " elements");
    }
    return Tensor(e.storage, t.shape, t.strides, t.offset, dt);
  }

 private:
  struct Entry {
    std::shared_ptr<Storage> storage;
    uint64_t nbytes = 0;
  };
  const Entry& storage(const pickle::StorageDesc& sd) {
    if (auto it = cache_.find(sd.key); it != cache_.end()) return it->second;
    const StorageBytes b = lookup_(sd.key);
    check(sd.dtype.bits % 8 == 0 && sd.dtype.bits > 0, kCtx, where_, ": storage '", sd.key, "' of dtype ", sd.dtype.name);
    const uint64_t esz = uint64_t(sd.dtype.bits / 8);
    check(sd.numel <= b.size / esz, kCtx, where_, ": storage '", sd.key, "' claims ", sd.numel, " ", sd.dtype.name,
          " elements (", (unsigned long long)(sd.numel) * esz, " bytes) but its file entry has ", b.size, " bytes");
    Entry e;
    e.nbytes = sd.numel * esz;
    uint8_t* p = e.nbytes ? b.data : nullptr;
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
      e.storage = Storage::borrow(p, size_t(e.nbytes), Device::cpu(), b.owner);
    } else {  // not 16-byte aligned (never from torch.save, which aligns to 64): an aligned copy
      e.storage = Storage::allocate(size_t(e.nbytes), Device::cpu());
      std::memcpy(e.storage->data(), p, size_t(e.nbytes));
    }
    return cache_.emplace(sd.key, std::move(e)).first->second;
  }

  const Unpickled& u_;
  const StorageLookup& lookup_;
  std::string where_;
  std::map<std::string, Entry> cache_;
};

const SubclassInfo& subclass_info(const std::string& cls, const std::string& where, const std::string& key) {
  const std::string s = short_name(cls);
  for (const auto& i : kSubclasses)
    if (i.name == s) return i;
  fail(kCtx, where, ": '", key, "' is a ", cls, ", which diffq does not load");
}

// "<module>.<param>" subclass -> "<module>._<param>_<attr>" tensors + torchao's metadata JSON.
void flatten_subclass(const Unpickled& u, const TensorDesc& t, const std::string& key, TensorMaker& maker,
                      const std::string& where, TorchCheckpoint& out) {
  const SubclassInfo& info = subclass_info(t.subclass, where, key);
  const auto dot = key.rfind('.');
  check(dot != std::string::npos && dot > 0 && dot + 1 < key.size(), kCtx, where, ": quantized tensor '", key,
        "' is not named <module>.<param>");
  const std::string prefix = key.substr(0, dot) + "._" + key.substr(dot + 1) + "_";
  check(t.attributes.has_value(), kCtx, where, ": ", t.subclass, " '", key, "' has no attributes");
  const Value& attrs = u.at(*t.attributes);
  json data = json::object(), names = json::array();
  for (size_t i = 0; i + 1 < attrs.items.size(); i += 2) {
    const Value& k = u.at(attrs.items[i]);
    check(k.kind == Kind::Str, kCtx, where, ": ", t.subclass, " '", key, "' has an attribute named by ",
          u.describe(attrs.items[i]));
    const Value& v = u.at(attrs.items[i + 1]);
    if (v.kind == Kind::Tensor) {
      out.tensors[prefix + k.s] = maker.make(u.tensor(v), key + "." + k.s);
      names.push_back(k.s);
    } else if (v.kind == Kind::None &&
               std::find(info.optional.begin(), info.optional.end(), k.s) != info.optional.end()) {
      continue;  // an optional tensor that is absent
    } else {
      data[k.s] = attribute_json(u, attrs.items[i + 1], cat(where, ": ", key, ".", k.s));
    }
  }
  for (std::string_view r : info.required)
    check(std::find(names.begin(), names.end(), json(std::string(r))) != names.end(), kCtx, where, ": ", t.subclass,
          " '", key, "' has no tensor '", r, "'");
  if (info.dtype_attr) data["dtype"] = dtype_json(t.dtype);
  if (info.shape_attr) data["shape"] = t.shape;
  out.metadata[key] = json{{"_type", std::string(info.name)}, {"_data", data}, {"_tensor_data_names", names}}.dump();
}

}  // namespace

TorchCheckpoint build_torch_checkpoint(const Unpickled& u, const StorageLookup& storages, std::string_view where_sv) {
  const std::string where(where_sv);
  const Value& root = u.at(u.root());
  check(root.kind == Kind::Dict, kCtx, where, ": the pickle holds ", u.describe(u.root()),
        ", not a state dict (a dict of tensors)");
  TorchCheckpoint out;
  TensorMaker maker(u, storages, where);
  for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
    const Value& k = u.at(root.items[i]);
    check(k.kind == Kind::Str, kCtx, where, ": state dict key is ", u.describe(root.items[i]), ", not a str");
    const Value& v = u.at(root.items[i + 1]);
    check(v.kind == Kind::Tensor, kCtx, where, ": '", k.s, "' holds ", u.describe(root.items[i + 1]),
          ", not a tensor");
    const TensorDesc& t = u.tensor(v);
    check(std::find(out.keys.begin(), out.keys.end(), k.s) == out.keys.end(), kCtx, where, ": key '", k.s,
          "' appears twice");
    out.keys.push_back(k.s);
    if (t.subclass.empty())
      out.tensors[k.s] = maker.make(t, k.s);
    else
      flatten_subclass(u, t, k.s, maker, where, out);
  }
  return out;
}

TorchCheckpoint load_torch_checkpoint(const std::filesystem::path& path) {
  const std::string file = path.filename().string();
  const std::shared_ptr<MappedFile> m = MappedFile::open(path, kCtx);
  const uint8_t* d = m->data();
  if (!looks_like_zip(d, m->size())) {
    check(!(m->size() >= 2 && d[0] == 0x80 && d[1] <= 5), kCtx, path.string(),
          " is a legacy (PyTorch < 1.6) pickle checkpoint; diffq reads the zip format torch.save writes since "
          "PyTorch 1.6 (load and re-save it with a current torch, or convert it to safetensors)");
    fail(kCtx, path.string(), " is not a PyTorch zip checkpoint (no zip signature)");
  }
  const ZipDirectory zip = ZipDirectory::parse(d, m->size(), file);
  std::string root;
  for (const ZipEntry& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == "data.pkl") {
      root = e.name.substr(0, slash + 1);
      break;
    }
  }
  check(!root.empty(), kCtx, path.string(), " is a zip archive without <name>/data.pkl (not a torch.save checkpoint)");
  if (const ZipEntry* bo = zip.find(root + "byteorder")) {
    const ZipEntry& e = zip.stored(bo->name);
    const std::string order(reinterpret_cast<const char*>(d + e.data_offset), size_t(e.size));
    check(order == "little", kCtx, path.string(), " was saved on a '", order,
          "'-endian machine; diffq reads little-endian checkpoints only");
  }
  const ZipEntry& pkl = zip.stored(root + "data.pkl");
  const std::string where = file + ": " + pkl.name;
  const pickle::Unpickled u = pickle::unpickle(d + pkl.data_offset, size_t(pkl.size), where);
  const StorageLookup lookup = [&](const std::string& key) {
    const ZipEntry* e = zip.find(root + "data/" + key);
    check(e != nullptr, kCtx, path.string(), ": the pickle refers to storage '", key, "' but there is no entry ",
          root, "data/", key);
    const ZipEntry& s = zip.stored(e->name);
    return StorageBytes{m->mutable_data() + s.data_offset, size_t(s.size), m};
  };
  return build_torch_checkpoint(u, lookup, where);
}

bool is_torch_checkpoint_name(const std::filesystem::path& p) {
  const std::string e = p.extension().string();
  return e == ".bin" || e == ".pt" || e == ".pth";
}

}  // namespace diffq::io
