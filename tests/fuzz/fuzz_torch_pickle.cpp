// libFuzzer target: the restricted unpickler on arbitrary bytes (as data.pkl), then the state dict
// built over a fixed 4 KiB buffer standing in for every storage. Either step may throw diffq::Error;
// nothing may crash, leak or read outside its input, and every tensor built must lie inside the buffer.
// Inputs that start like a zip ("PK\3\4") go to the zip directory reader instead: every entry it
// returns must lie inside the input.
#include <cstdint>
#include <cstdlib>

#include "diffq/error.h"
#include "io/torch_checkpoint.h"
#include "io/torch_pickle.h"
#include "io/torch_zip.h"

using namespace diffq;
using namespace diffq::io;

namespace {
alignas(64) uint8_t g_storage[4096];
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (looks_like_zip(data, size)) {
    try {
      const ZipDirectory z = ZipDirectory::parse(data, size, "fuzz.zip");
      for (const ZipEntry& e : z.entries())
        if (e.data_offset > size || e.compressed_size > size - e.data_offset) std::abort();
    } catch (const Error&) {
    }
    return 0;
  }
  TorchCheckpoint c;
  try {
    const pickle::Unpickled u = pickle::unpickle(data, size, "fuzz.pkl");
    c = build_torch_checkpoint(
        u, [](const std::string&) { return StorageBytes{g_storage, sizeof g_storage, nullptr}; }, "fuzz.pkl");
  } catch (const Error&) {
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& [k, t] : c.tensors) {
    if (t.numel() == 0) continue;
    const auto* base = static_cast<const uint8_t*>(t.data_ptr());
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.shape()[size_t(d)] - 1) * t.strides()[size_t(d)];
    const uint8_t* end = base + (last + 1) * int64_t(dtype_size(t.dtype()));
    if (base < g_storage || end > g_storage + sizeof g_storage) std::abort();
    sink = sink ^ base[0] ^ end[-1];
  }
  for (const auto& [k, v] : c.metadata) sink = sink ^ uint8_t(v.size());
  return 0;
}
