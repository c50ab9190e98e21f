// libFuzzer target: parse_gguf on arbitrary bytes must either return a header whose tensors lie inside
// the buffer or throw diffq::Error; every metadata value must render as JSON.
#include <cstdint>
#include <cstdlib>

#include "diffq/error.h"
#include "io/gguf.h"

using namespace diffq;
using namespace diffq::io;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  GGUFHeader h;
  try {
    h = parse_gguf(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& t : h.tensors) {
    if (t.offset > h.data_bytes || t.nbytes > h.data_bytes - t.offset) std::abort();
    if (h.data_offset + h.data_bytes != size) std::abort();
    if (t.nbytes) sink = sink ^ data[h.data_offset + t.offset] ^ data[h.data_offset + t.offset + t.nbytes - 1];
    if (!ggml_type_info(t.type)) std::abort();
  }
  for (const auto& [k, v] : h.kv) {
    const std::string s = v.to_json(64).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    sink = sink ^ uint8_t(s.size());
  }
  return 0;
}
