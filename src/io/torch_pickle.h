// A restricted unpickler for the data.pkl of PyTorch checkpoints: a small stack machine over the
// pickle opcodes torch.save emits (protocol 2, plus the protocol 3-5 forms of the same values) that
// builds plain values, tensor *descriptions* and storage references, and never runs code. A GLOBAL is
// resolved against a fixed allow-list (torch's tensor/parameter/storage rebuilders, torch dtypes and
// devices, collections.OrderedDict, and the torchao 0.18 tensor subclasses of the configs diffq supports
// with their attribute classes); anything else — os.system, builtins.eval, numpy, a class of another
// library — is refused with an error naming "module.name". Every read is bounds-checked; the result is
// an arena of values (no cycles can leak, nesting is bounded), which torch_checkpoint turns into tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::io::pickle {

using Ref = uint32_t;  // index into Unpickled's value arena

enum class Kind : uint8_t {
  None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict,
  Global,   // an allow-listed class or function ("module.name"), as an argument (e.g. a storage type)
  DType,    // a torch dtype global ("torch bfloat16")
  Storage,  // a persistent_id ('storage', type, key, location, numel): bytes of archive/data/<key>
  Tensor,   // a plain tensor or a tensor subclass (torchao), see TensorDesc
  Object,   // an instance of an allow-listed plain class or enum: class name, args, state
};

// A torch dtype as named in the pickle, and diffq's dtype when it has one.
struct TorchDType {
  std::string name;            // "bfloat16", "float64", "int4", ...
  std::optional<DType> dtype;  // nullopt: a dtype diffq cannot hold
  int bits = 0;                // element size in bits
};

struct StorageDesc {
  std::string key;           // archive/data/<key>
  std::string location;      // "cpu", "cuda:0" (informational; bytes always come from the file)
  TorchDType dtype;          // the typed storage's dtype; "uint8" for UntypedStorage (numel = bytes)
  uint64_t numel = 0;        // in elements of `dtype`
};

struct TensorDesc {
  std::optional<Ref> storage;  // a Storage value; none for a wrapper subclass (its data is in attributes)
  int64_t offset = 0;          // in elements
  Shape shape, strides;
  TorchDType dtype;
  std::string subclass;              // "" for a plain tensor / Parameter; else "torchao.quantization.Int8Tensor"
  std::optional<Ref> attributes;     // subclass: the Dict of its __dict__ (qdata, scale, block_size, ...)
};

struct Value {
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;                // Int; Global: allow-list role; Storage/Tensor: index in the side table
  double f = 0;
  std::string s;                // Str/Bytes; Global/Object: "module.name"
  std::vector<Ref> items;       // Tuple/List; Dict: key0, value0, key1, value1, ...; Object: args
  std::optional<Ref> state;     // Object: what BUILD set
  TorchDType dtype;             // DType
};

class Unpickled {
 public:
  Ref root() const { return root_; }
  const Value& at(Ref r) const { return values_[r]; }
  const StorageDesc& storage(const Value& v) const { return storages_[size_t(v.i)]; }
  const TensorDesc& tensor(const Value& v) const { return tensors_[size_t(v.i)]; }
  size_t size() const { return values_.size(); }
  // Dict lookup by string key (nullptr when absent or `d` is not a Dict).
  const Value* get(const Value& d, std::string_view key) const;
  // "a list", "the int 3", "a torch.device"... for messages.
  std::string describe(Ref r) const;

 private:
  friend class Machine;
  std::vector<Value> values_;
  std::vector<StorageDesc> storages_;
  std::vector<TensorDesc> tensors_;
  Ref root_ = 0;
};

// Runs the machine over a whole pickle. `where` (e.g. "model.bin: archive/data.pkl") prefixes every
// error: "[pickle] model.bin: archive/data.pkl: global 'os.system' is not allowed (...)".
Unpickled unpickle(const uint8_t* data, size_t size, std::string_view where);

// The torch dtype of a name ("bfloat16"); bits 0 when torch has no such dtype.
TorchDType torch_dtype(std::string_view name);

}  // namespace diffq::io::pickle
