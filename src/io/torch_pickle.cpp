#include "io/torch_pickle.h"

#include <cstring>
#include <unordered_map>

#include "diffq/error.h"

namespace diffq::io::pickle {

namespace {

constexpr const char* kCtx = "pickle";
constexpr size_t kMaxValues = size_t(1) << 26;
constexpr size_t kMaxGlobalName = 512;
constexpr size_t kMaxDims = 64;

// What an allow-listed global does when the pickle calls it (REDUCE / NEWOBJ) or passes it around.
enum Role : int64_t {
  kOrderedDict, kRebuildTensorV2, kRebuildTensorV3, kRebuildParameter, kRebuildParameterWithState,
  kRebuildFromTypeV2, kRebuildWrapperSubclass, kGetLayout, kDevice,
  kTensorClass,    // torch.Tensor / torch.nn.Parameter: only as _rebuild_from_type_v2's new_type
  kStorageClass,   // torch.FloatStorage ...: only inside a persistent id
  kSubclassClass,  // a torchao tensor subclass: only through _rebuild_wrapper_subclass
  kObjectClass,    // a torchao attribute class: built by NEWOBJ (+ BUILD) or REDUCE
  kEnumClass,      // a torchao enum: EnumClass(value)
};

struct Allowed {
  const char* module;
  const char* name;
  Role role;
  const char* dtype = nullptr;  // storage classes: the element dtype
};

const Allowed kAllowed[] = {
    {"collections", "OrderedDict", kOrderedDict},
    {"torch._utils", "_rebuild_tensor_v2", kRebuildTensorV2},
    {"torch._utils", "_rebuild_tensor_v3", kRebuildTensorV3},
    {"torch._utils", "_rebuild_parameter", kRebuildParameter},
    {"torch._utils", "_rebuild_parameter_with_state", kRebuildParameterWithState},
    {"torch._utils", "_rebuild_wrapper_subclass", kRebuildWrapperSubclass},
    {"torch._tensor", "_rebuild_from_type_v2", kRebuildFromTypeV2},
    {"torch.serialization", "_get_layout", kGetLayout},
    {"torch", "device", kDevice},
    {"torch", "Tensor", kTensorClass},
    {"torch.nn.parameter", "Parameter", kTensorClass},
    {"torch", "FloatStorage", kStorageClass, "float32"},
    {"torch", "DoubleStorage", kStorageClass, "float64"},
    {"torch", "HalfStorage", kStorageClass, "float16"},
    {"torch", "BFloat16Storage", kStorageClass, "bfloat16"},
    {"torch", "CharStorage", kStorageClass, "int8"},
    {"torch", "ByteStorage", kStorageClass, "uint8"},
    {"torch", "ShortStorage", kStorageClass, "int16"},
    {"torch", "IntStorage", kStorageClass, "int32"},
    {"torch", "LongStorage", kStorageClass, "int64"},
    {"torch", "BoolStorage", kStorageClass, "bool"},
    {"torch.storage", "UntypedStorage", kStorageClass, "uint8"},
    // torchao 0.18: the tensor subclasses of Int8WeightOnly / Int8DynamicActivationInt8Weight /
    // Float8WeightOnly / Float8DynamicActivationFloat8Weight / Int4WeightOnly / IntxWeightOnly, and the
    // classes their attributes hold.
    {"torchao.quantization", "Int8Tensor", kSubclassClass},
    {"torchao.quantization", "Float8Tensor", kSubclassClass},
    {"torchao.quantization", "Int4Tensor", kSubclassClass},
    {"torchao.quantization", "IntxUnpackedToInt8Tensor", kSubclassClass},
    {"torchao.quantization.granularity", "PerRow", kObjectClass},
    {"torchao.quantization.granularity", "PerTensor", kObjectClass},
    {"torchao.quantization.granularity", "PerGroup", kObjectClass},
    {"torchao.quantization.granularity", "PerAxis", kObjectClass},
    {"torchao.quantization.quantize_.workflows.int8.int8_tensor", "QuantizeTensorToInt8Kwargs", kObjectClass},
    {"torchao.quantization.quantize_.workflows.float8.float8_tensor", "QuantizeTensorToFloat8Kwargs", kObjectClass},
    {"torchao.float8.inference", "Float8MMConfig", kObjectClass},
    {"torchao.quantization.quant_primitives", "MappingType", kEnumClass},
    {"torchao.quantization.quantize_.common.kernel_preference", "KernelPreference", kEnumClass},
};

struct DTypeInfo {
  const char* name;
  int bits;
  std::optional<DType> dtype;
};
const DTypeInfo kDTypes[] = {
    {"float32", 32, DType::f32},       {"float", 32, DType::f32},        {"float16", 16, DType::f16},
    {"half", 16, DType::f16},          {"bfloat16", 16, DType::bf16},    {"float8_e4m3fn", 8, DType::f8_e4m3fn},
    {"float8_e5m2", 8, DType::f8_e5m2}, {"int8", 8, DType::i8},          {"uint8", 8, DType::u8},
    {"int32", 32, DType::i32},         {"int", 32, DType::i32},          {"int64", 64, DType::i64},
    {"long", 64, DType::i64},          {"bool", 8, DType::boolean},      {"float64", 64, std::nullopt},
    {"double", 64, std::nullopt},      {"int16", 16, std::nullopt},      {"short", 16, std::nullopt},
    {"uint16", 16, std::nullopt},      {"uint32", 32, std::nullopt},     {"uint64", 64, std::nullopt},
    {"complex64", 64, std::nullopt},   {"complex128", 128, std::nullopt}, {"float8_e4m3fnuz", 8, std::nullopt},
    {"float8_e5m2fnuz", 8, std::nullopt}, {"float8_e8m0fnu", 8, std::nullopt}, {"float4_e2m1fn_x2", 8, std::nullopt},
    {"int1", 8, std::nullopt},  {"int2", 8, std::nullopt},  {"int3", 8, std::nullopt},  {"int4", 8, std::nullopt},
    {"int5", 8, std::nullopt},  {"int6", 8, std::nullopt},  {"int7", 8, std::nullopt},  {"uint1", 8, std::nullopt},
    {"uint2", 8, std::nullopt}, {"uint3", 8, std::nullopt}, {"uint4", 8, std::nullopt}, {"uint5", 8, std::nullopt},
    {"uint6", 8, std::nullopt}, {"uint7", 8, std::nullopt},
};

// Python decodes BINUNICODE strings as strict UTF-8 (surrogates refused); so does diffq.
bool valid_utf8(const uint8_t* s, uint64_t n) {
  for (uint64_t i = 0; i < n;) {
    const uint8_t c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + uint64_t(len) > n) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      if ((s[i + uint64_t(k)] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + uint64_t(k)] & 0x3f);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += uint64_t(len);
  }
  return true;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "a bool";
    case Kind::Int: return "an int";
    case Kind::Float: return "a float";
    case Kind::Str: return "a str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "a tuple";
    case Kind::List: return "a list";
    case Kind::Dict: return "a dict";
    case Kind::Global: return "a class/function";
    case Kind::DType: return "a torch.dtype";
    case Kind::Storage: return "a storage";
    case Kind::Tensor: return "a tensor";
    case Kind::Object: return "an object";
  }
  return "?";
}

}  // namespace

TorchDType torch_dtype(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return {std::string(name), d.dtype, d.bits};
  return {std::string(name), std::nullopt, 0};
}

const Value* Unpickled::get(const Value& d, std::string_view key) const {
  if (d.kind != Kind::Dict) return nullptr;
  for (size_t i = d.items.size(); i >= 2; i -= 2) {
    const Value& k = values_[d.items[i - 2]];
    if (k.kind == Kind::Str && k.s == key) return &values_[d.items[i - 1]];
  }
  return nullptr;
}

std::string Unpickled::describe(Ref r) const {
  const Value& v = values_[r];
  switch (v.kind) {
    case Kind::Int: return cat("the int ", v.i);
    case Kind::Str: return cat("the str '", v.s.substr(0, 64), "'");
    case Kind::Global: return cat("the global ", v.s);
    case Kind::Object: return cat("a ", v.s, " object");
    case Kind::DType: return cat("torch.", v.dtype.name);
    default: return kind_name(v.kind);
  }
}

class Machine {
 public:
  Machine(const uint8_t* data, size_t size, std::string_view where) : p_(data), n_(size), where_(where) {
    add(Value{});  // Ref 0: the shared None
  }

  Unpickled run() {
    check(n_ > 0, kCtx, where_, ": empty pickle");
    for (;;) {
      op_at_ = pos_;
      const uint8_t op = byte();
      if (op == '.') break;
      step(op);
    }
    check(stack_.size() == 1 && marks_.empty(), kCtx, where_, ": STOP with ", stack_.size(),
          " values and ", marks_.size(), " marks on the stack (expected one value)");
    u_.root_ = stack_.back();
    return std::move(u_);
  }

 private:
  template <class... A>
  [[noreturn]] void bad(const A&... a) {
    fail(kCtx, where_, ": ", a..., " (opcode at byte ", op_at_, ")");
  }

  // ---- input ----
  uint8_t byte() {
    if (pos_ >= n_) bad("the pickle ends without STOP (truncated?)");
    return p_[pos_++];
  }
  const uint8_t* take(uint64_t k) {
    if (k > n_ - pos_) bad("needs ", k, " bytes but only ", n_ - pos_, " remain (truncated?)");
    const uint8_t* q = p_ + pos_;
    pos_ += size_t(k);
    return q;
  }
  uint64_t le(int k) {
    const uint8_t* q = take(uint64_t(k));
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; --i) v = (v << 8) | q[i];
    return v;
  }
  std::string line() {
    const void* nl = std::memchr(p_ + pos_, '\n', std::min(n_ - pos_, kMaxGlobalName + 1));
    if (!nl) bad("GLOBAL name is unterminated or longer than ", kMaxGlobalName, " bytes");
    const size_t len = size_t(static_cast<const uint8_t*>(nl) - (p_ + pos_));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len + 1;
    return s;
  }

  // ---- values and stack ----
  Ref add(Value v) {
    if (u_.values_.size() >= kMaxValues) bad("more than ", kMaxValues, " values");
    u_.values_.push_back(std::move(v));
    return Ref(u_.values_.size() - 1);
  }
  Value& at(Ref r) { return u_.values_[r]; }
  void push(Ref r) { stack_.push_back(r); }
  Ref pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) bad("pops an empty stack");
    Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Ref& top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) bad("reads an empty stack");
    return stack_.back();
  }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) bad("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(stack_.begin() + std::ptrdiff_t(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Ref make(Kind k, std::vector<Ref> items = {}) {
    Value v;
    v.kind = k;
    v.items = std::move(items);
    return add(std::move(v));
  }
  Ref make_int(int64_t i) {
    Value v;
    v.kind = Kind::Int;
    v.i = i;
    return add(std::move(v));
  }
  Ref make_str(Kind k, const uint8_t* q, uint64_t len) {
    if (k == Kind::Str && !valid_utf8(q, len)) bad("a str that is not valid UTF-8");
    Value v;
    v.kind = k;
    v.s.assign(reinterpret_cast<const char*>(q), size_t(len));
    return add(std::move(v));
  }

  // ---- typed views of arguments ----
  const Value& expect(Ref r, Kind k, const char* what) {
    if (at(r).kind != k) bad(what, " must be ", kind_name(k), ", got ", u_.describe(r));
    return at(r);
  }
  int64_t int_of(Ref r, const char* what) { return expect(r, Kind::Int, what).i; }
  Shape shape_of(Ref r, const char* what) {
    const Value& v = at(r);
    if (v.kind != Kind::Tuple && v.kind != Kind::List) bad(what, " must be a tuple of ints, got ", u_.describe(r));
    if (v.items.size() > kMaxDims) bad(what, " has ", v.items.size(), " dims (at most ", kMaxDims, ")");
    Shape s;
    for (Ref e : v.items) {
      const int64_t d = int_of(e, what);
      if (d < 0 || d > (int64_t(1) << 48)) bad(what, " holds ", d, ", which is not a valid size/stride");
      s.push_back(d);
    }
    return s;
  }
  const Value& args_of(Ref r, size_t lo, size_t hi, const char* fn) {
    const Value& v = at(r);
    if (v.kind != Kind::Tuple) bad(fn, " called with ", u_.describe(r), " instead of an argument tuple");
    if (v.items.size() < lo || v.items.size() > hi)
      bad(fn, " called with ", v.items.size(), " arguments (expected ", lo, lo == hi ? "" : cat("..", hi), ")");
    return v;
  }
  void expect_empty_hooks(Ref r, const char* fn) {
    const Value& v = at(r);
    if (!((v.kind == Kind::Dict || v.kind == Kind::Tuple || v.kind == Kind::List) && v.items.empty()) &&
        v.kind != Kind::None)
      bad(fn, ": backward hooks are not supported (got ", u_.describe(r), ")");
  }

  // ---- globals and calls ----
  Ref global(const std::string& module, const std::string& name) {
    if (module == "torch") {
      const TorchDType d = torch_dtype(name);
      if (d.bits > 0) {
        Value v;
        v.kind = Kind::DType;
        v.dtype = d;
        return add(std::move(v));
      }
    }
    for (const auto& a : kAllowed) {
      if (module == a.module && name == a.name) {
        Value v;
        v.kind = Kind::Global;
        v.i = a.role;
        v.s = module + "." + name;
        if (a.dtype) v.dtype = torch_dtype(a.dtype);
        return add(std::move(v));
      }
    }
    bad("global '", module, ".", name,
        "' is not allowed: diffq's checkpoint reader builds only tensors, storages and torchao's quantized "
        "tensors, and never runs code from a pickle");
  }

  Ref tensor(TensorDesc t) {
    Value v;
    v.kind = Kind::Tensor;
    v.i = int64_t(u_.tensors_.size());
    u_.tensors_.push_back(std::move(t));
    return add(std::move(v));
  }

  Ref rebuild_tensor(const Value& a, bool v3, const char* fn) {
    const Value& st = expect(a.items[0], Kind::Storage, "the storage argument");
    TensorDesc t;
    t.storage = a.items[0];
    t.offset = int_of(a.items[1], "storage_offset");
    if (t.offset < 0) bad(fn, ": negative storage offset ", t.offset);
    t.shape = shape_of(a.items[2], "size");
    t.strides = shape_of(a.items[3], "stride");
    if (t.shape.size() != t.strides.size())
      bad(fn, ": size has ", t.shape.size(), " dims but stride has ", t.strides.size());
    expect_empty_hooks(a.items[5], fn);
    t.dtype = v3 ? expect(a.items[6], Kind::DType, "the dtype argument").dtype : u_.storage(st).dtype;
    return tensor(std::move(t));
  }

  Ref call(Ref fn_ref, Ref args, bool nested = false) {
    if (at(fn_ref).kind != Kind::Global) bad("calls ", u_.describe(fn_ref), ", which is not callable");
    // Copies: adding values below may move the arena.
    const std::string fn_name = at(fn_ref).s;
    const Role role = Role(at(fn_ref).i);
    const char* name = fn_name.c_str();
    switch (role) {
      case kOrderedDict: {
        const Value& a = args_of(args, 0, 1, name);
        std::vector<Ref> items;
        if (!a.items.empty()) {
          const Value& pairs = at(a.items[0]);
          if (pairs.kind != Kind::List && pairs.kind != Kind::Tuple) bad("OrderedDict() of ", u_.describe(a.items[0]));
          for (Ref pr : pairs.items) {
            const Value& kv = at(pr);
            if (kv.kind != Kind::Tuple || kv.items.size() != 2) bad("OrderedDict() item is not a (key, value) pair");
            items.push_back(kv.items[0]);
            items.push_back(kv.items[1]);
          }
        }
        return make(Kind::Dict, std::move(items));
      }
      case kRebuildTensorV2: return rebuild_tensor(args_of(args, 6, 7, name), false, name);
      case kRebuildTensorV3: return rebuild_tensor(args_of(args, 7, 8, name), true, name);
      case kRebuildParameter:
      case kRebuildParameterWithState: {
        const size_t n = role == kRebuildParameter ? 3 : 4;
        const Value& a = args_of(args, n, n, name);
        expect(a.items[0], Kind::Tensor, "the parameter's data");
        expect_empty_hooks(a.items[2], name);
        return a.items[0];
      }
      case kRebuildWrapperSubclass: {
        const Value& a = args_of(args, 8, 8, name);
        const Value& cls = expect(a.items[0], Kind::Global, "the subclass");
        if (cls.i != kSubclassClass) bad(name, " of ", cls.s, ", which is not a tensor subclass diffq knows");
        TensorDesc t;
        t.subclass = cls.s;
        t.dtype = expect(a.items[1], Kind::DType, "the dtype argument").dtype;
        t.shape = shape_of(a.items[2], "size");
        t.strides = shape_of(a.items[3], "stride");
        t.offset = int_of(a.items[4], "storage_offset");
        return tensor(std::move(t));
      }
      case kRebuildFromTypeV2: {
        if (nested) bad("nested ", name);
        const Value& a = args_of(args, 4, 4, name);
        const Ref func = a.items[0], new_type = a.items[1], inner = a.items[2], state = a.items[3];
        const Value& tyv = expect(new_type, Kind::Global, "the tensor type");
        const struct { int64_t i; std::string s; } ty{tyv.i, tyv.s};
        const Ref r = call(func, inner, /*nested=*/true);
        if (at(r).kind != Kind::Tensor) bad(name, " built ", u_.describe(r), " instead of a tensor");
        TensorDesc& t = u_.tensors_[size_t(at(r).i)];
        if (ty.i == kSubclassClass) {
          if (t.subclass != ty.s) bad(name, ": ", ty.s, " rebuilt from ", t.subclass.empty() ? "a plain tensor" : t.subclass);
          expect(state, Kind::Dict, "the tensor subclass's state");
          t.attributes = state;
        } else if (ty.i == kTensorClass) {
          if (!t.subclass.empty()) bad(name, ": ", t.subclass, " rebuilt as ", ty.s);
          const Value& s = at(state);
          if (s.kind != Kind::None && s.kind != Kind::Dict) bad(name, ": tensor state is ", u_.describe(state));
        } else {
          bad(name, " with the type ", ty.s, ", which is not a tensor type");
        }
        return r;
      }
      case kGetLayout: {
        const Value& a = args_of(args, 1, 1, name);
        const Value& l = expect(a.items[0], Kind::Str, "the layout");
        if (l.s != "torch.strided") bad("tensor layout ", l.s, " is not supported (only torch.strided)");
        return a.items[0];
      }
      case kDevice: {
        const Value& a = args_of(args, 1, 2, name);
        expect(a.items[0], Kind::Str, "the device");
        return a.items[0];
      }
      case kObjectClass:
      case kEnumClass: {
        const Value& a = args_of(args, 0, 16, name);
        if (role == kEnumClass && a.items.size() != 1) bad(name, "(...) with ", a.items.size(), " arguments");
        Value v;
        v.kind = Kind::Object;
        v.s = fn_name;
        v.items = a.items;
        return add(std::move(v));
      }
      case kTensorClass:
      case kStorageClass:
      case kSubclassClass: bad(name, " cannot be called directly");
    }
    bad("unhandled global ", name);
  }

  Ref persistent(Ref pid) {
    const Value& t = at(pid);
    if (t.kind != Kind::Tuple || t.items.size() != 5) bad("persistent id is ", u_.describe(pid), ", not a 5-tuple");
    const Value& tag = expect(t.items[0], Kind::Str, "the persistent id's tag");
    if (tag.s != "storage") bad("persistent id of type '", tag.s, "' (expected 'storage')");
    const Value& ty = expect(t.items[1], Kind::Global, "the storage type");
    if (ty.i != kStorageClass) bad("the storage type ", ty.s, " is not a storage class");
    StorageDesc d;
    d.key = expect(t.items[2], Kind::Str, "the storage key").s;
    d.location = expect(t.items[3], Kind::Str, "the storage location").s;
    d.dtype = ty.dtype;
    const int64_t numel = int_of(t.items[4], "the storage size");
    if (numel < 0) bad("storage '", d.key, "' has negative size ", numel);
    d.numel = uint64_t(numel);
    if (auto it = storage_by_key_.find(d.key); it != storage_by_key_.end()) {
      const StorageDesc& old = u_.storages_[size_t(at(it->second).i)];
      if (old.dtype.name != d.dtype.name || old.numel != d.numel)
        bad("storage '", d.key, "' is described twice differently");
      return it->second;
    }
    Value v;
    v.kind = Kind::Storage;
    v.i = int64_t(u_.storages_.size());
    u_.storages_.push_back(std::move(d));
    const Ref r = add(std::move(v));
    storage_by_key_.emplace(u_.storages_.back().key, r);
    return r;
  }

  void set_items(Ref dict, const std::vector<Ref>& kv) {
    Value& d = at(dict);
    if (d.kind != Kind::Dict) bad("SETITEM(S) on ", u_.describe(dict));
    if (kv.size() % 2) bad("SETITEMS with an odd number of values");
    d.items.insert(d.items.end(), kv.begin(), kv.end());
  }
  void append(Ref list, const std::vector<Ref>& xs) {
    Value& l = at(list);
    if (l.kind != Kind::List) bad("APPEND(S) on ", u_.describe(list));
    l.items.insert(l.items.end(), xs.begin(), xs.end());
  }

  void step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = byte();
        if (v < 2 || v > 5) bad("pickle protocol ", int(v), " is not supported (2..5)");
        return;
      }
      case 0x95: take(8); return;  // FRAME: a length hint
      case 'c': {                  // GLOBAL
        const std::string module = line();
        const std::string name = line();
        push(global(module, name));
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        const Ref name = pop(), module = pop();
        push(global(expect(module, Kind::Str, "STACK_GLOBAL's module").s, expect(name, Kind::Str, "STACK_GLOBAL's name").s));
        return;
      }
      case 'q': memo_[uint32_t(le(1))] = top(); return;  // BINPUT
      case 'r': memo_[uint32_t(le(4))] = top(); return;  // LONG_BINPUT
      case 0x94: memo_[uint32_t(memo_.size())] = top(); return;  // MEMOIZE
      case 'h':
      case 'j': {  // BINGET / LONG_BINGET
        const uint32_t k = uint32_t(le(op == 'h' ? 1 : 4));
        const auto it = memo_.find(k);
        if (it == memo_.end()) bad("memo key ", k, " was never stored");
        push(it->second);
        return;
      }
      case '(': marks_.push_back(stack_.size()); return;  // MARK
      case 't': push(make(Kind::Tuple, pop_mark())); return;
      case ')': push(make(Kind::Tuple)); return;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<Ref> xs(size_t(op - 0x84));
        for (size_t i = xs.size(); i-- > 0;) xs[i] = pop();
        push(make(Kind::Tuple, std::move(xs)));
        return;
      }
      case ']': push(make(Kind::List)); return;
      case 'l': push(make(Kind::List, pop_mark())); return;
      case 'a': {
        const Ref x = pop();
        append(top(), {x});
        return;
      }
      case 'e': {
        const std::vector<Ref> xs = pop_mark();
        append(top(), xs);
        return;
      }
      case '}': push(make(Kind::Dict)); return;
      case 'd': {
        std::vector<Ref> kv = pop_mark();
        const Ref d = make(Kind::Dict);
        set_items(d, kv);
        push(d);
        return;
      }
      case 's': {
        const Ref v = pop(), k = pop();
        set_items(top(), {k, v});
        return;
      }
      case 'u': {
        const std::vector<Ref> kv = pop_mark();
        set_items(top(), kv);
        return;
      }
      case 'N': push(0); return;
      case 0x88:
      case 0x89: {
        Value v;
        v.kind = Kind::Bool;
        v.b = op == 0x88;
        push(add(std::move(v)));
        return;
      }
      case 'J': push(make_int(int64_t(int32_t(uint32_t(le(4)))))); return;
      case 'K': push(make_int(int64_t(le(1)))); return;
      case 'M': push(make_int(int64_t(le(2)))); return;
      case 0x8a: {  // LONG1
        const uint8_t k = byte();
        if (k > 8) bad("integer of ", int(k), " bytes is too large");
        uint64_t v = k ? le(k) : 0;
        if (k > 0 && k < 8 && (v >> (8 * k - 1)) & 1) v |= ~uint64_t(0) << (8 * k);  // sign-extend
        push(make_int(int64_t(v)));
        return;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const uint8_t* q = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | q[i];
        Value v;
        v.kind = Kind::Float;
        std::memcpy(&v.f, &bits, 8);
        push(add(std::move(v)));
        return;
      }
      case 'X': {
        const uint64_t len = le(4);
        push(make_str(Kind::Str, take(len), len));
        return;
      }
      case 0x8c: {
        const uint64_t len = le(1);
        push(make_str(Kind::Str, take(len), len));
        return;
      }
      case 0x8d: {
        const uint64_t len = le(8);
        push(make_str(Kind::Str, take(len), len));
        return;
      }
      case 'C':
      case 'B':
      case 0x8e: {
        const uint64_t len = le(op == 'C' ? 1 : op == 'B' ? 4 : 8);
        push(make_str(Kind::Bytes, take(len), len));
        return;
      }
      case 'Q': {  // BINPERSID
        const Ref pid = pop();
        push(persistent(pid));
        return;
      }
      case 'R': {  // REDUCE
        const Ref args = pop(), fn = pop();
        push(call(fn, args));
        return;
      }
      case 0x81: {  // NEWOBJ
        const Ref args = pop(), cls = pop();
        const Value& c = expect(cls, Kind::Global, "NEWOBJ's class");
        if (c.i != kObjectClass) bad("NEWOBJ of ", c.s, ", which is not a plain class diffq knows");
        push(call(cls, args));
        return;
      }
      case 'b': {  // BUILD
        const Ref state = pop();
        Value& obj = at(top());
        if (obj.kind == Kind::Object) {
          if (obj.state) bad("BUILD twice on ", obj.s);
          obj.state = state;
        } else if (obj.kind != Kind::Dict) {  // OrderedDict's __dict__ (torch's _metadata) is dropped
          bad("BUILD on ", u_.describe(top()));
        }
        return;
      }
      case '0': pop(); return;
      case '1': pop_mark(); return;
      case '2': push(top()); return;
      default: bad("unsupported pickle opcode 0x", "0123456789abcdef"[op >> 4], "0123456789abcdef"[op & 15],
                   op >= 0x20 && op < 0x7f ? cat(" ('", char(op), "')") : std::string());
    }
  }

  const uint8_t* p_;
  size_t n_, pos_ = 0, op_at_ = 0;
  std::string where_;
  Unpickled u_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, Ref> memo_;
  std::unordered_map<std::string, Ref> storage_by_key_;
};

Unpickled unpickle(const uint8_t* data, size_t size, std::string_view where) {
  return Machine(data, size, where).run();
}

}  // namespace diffq::io::pickle
