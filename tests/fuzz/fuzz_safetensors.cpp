// libFuzzer target: parse_safetensors on arbitrary bytes must either return a header whose byte
// ranges lie inside the buffer or throw diffq::Error; a parsed file must survive a write/re-parse
// round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "diffq/error.h"
#include "io/safetensors.h"

using namespace diffq;
using namespace diffq::io;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsHeader h;
  try {
    h = parse_safetensors(data, size, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  // Invariants of a valid header: ranges inside the data section, contiguous, sizes consistent.
  uint64_t pos = 0;
  bool all_supported = true;
  volatile uint8_t sink = 0;
  for (const auto& e : h.tensors) {
    if (e.begin != pos || e.end < e.begin || h.data_offset() + e.end > size) std::abort();
    if (e.nbytes()) sink = sink ^ data[h.data_offset() + e.begin] ^ data[h.data_offset() + e.end - 1];
    pos = e.end;
    if (!e.dtype) all_supported = false;
  }
  if (pos != h.data_bytes) std::abort();
  if (!all_supported) return 0;

  // Round trip through the writer: borrowed tensors over the input bytes -> serialize -> parse.
  NamedTensors named;
  for (const auto& e : h.tensors) {
    auto storage = Storage::borrow(const_cast<uint8_t*>(data) + h.data_offset() + e.begin,
                                   e.nbytes(), Device::cpu(), nullptr);
    named.emplace_back(e.name, Tensor(storage, e.shape, contiguous_strides(e.shape), 0, *e.dtype));
  }
  const std::vector<uint8_t> out = serialize_safetensors(named, h.metadata);
  const SafetensorsHeader h2 = parse_safetensors(out.data(), out.size(), "roundtrip");  // must not throw
  if (h2.tensors.size() != h.tensors.size() || h2.metadata != h.metadata) std::abort();
  for (const auto& e2 : h2.tensors) {
    const SafetensorsEntry* e = nullptr;
    for (const auto& x : h.tensors)
      if (x.name == e2.name) e = &x;
    if (!e || e->dtype != e2.dtype || e->shape != e2.shape || e->nbytes() != e2.nbytes()) std::abort();
    if (e->nbytes() && std::memcmp(data + h.data_offset() + e->begin,
                                   out.data() + h2.data_offset() + e2.begin, e->nbytes()) != 0)
      std::abort();
  }
  return 0;
}
