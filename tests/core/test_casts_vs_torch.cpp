// Tensor::to(dtype) against torch's CPU casts, bit for bit.
//
// tests/fixtures/core/casts.safetensors (tools/reference/make_dtype_fixtures.py) holds pairs
// `<case>.in` / `<case>.out` with out = torch `in.to(out.dtype)`: special values (±0, subnormals of
// every target type, halfway ties, values around each format's max, inf, NaN), random values over a
// wide exponent range, in-range float -> integer values, every 16/8-bit float bit pattern -> float32,
// and casts between the narrow types.
//
// NaN: torch's NaN bit patterns depend on the code path (float32 NaN -> bfloat16 is 0xffff from the
// contiguous AVX2 kernel but 0x7fc0 from the strided scalar one; F16C keeps NaN payloads), so a NaN is
// only required to stay a NaN. Every other element must match bit for bit.
//
// Known diffq deviations (strict expected failures: a case listed here that starts to pass fails the
// test, so the list is kept honest and the entry can be deleted when src/core is fixed).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "diffq/dtype.h"
#include "diffq/tensor.h"
#include "io/safetensors.h"

using namespace diffq;

namespace {

std::filesystem::path fixture_path() {
  return std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures" / "core" / "casts.safetensors";
}

// Element i of a contiguous buffer as an unsigned bit pattern.
uint64_t bits_at(const uint8_t* p, size_t esize, int64_t i) {
  uint64_t v = 0;
  std::memcpy(&v, p + size_t(i) * esize, esize);
  return v;
}

std::string hex(uint64_t v, size_t esize) {
  std::ostringstream s;
  s << "0x" << std::hex;
  s.width(int(esize * 2));
  s.fill('0');
  s << v;
  return s.str();
}

struct KnownDeviation {
  const char* name;
  const char* why;
};
constexpr KnownDeviation kKnown[] = {
    {"", ""},  // none at present; add entries here rather than loosening the comparison
};
const KnownDeviation* known(const std::string& name) {
  for (const auto& k : kKnown)
    if (name == k.name) return &k;
  return nullptr;
}

bool is_nan_bits(DType t, uint64_t b) {
  switch (t) {
    case DType::f32: return (b & 0x7fffffffu) > 0x7f800000u;
    case DType::f16: return (b & 0x7fffu) > 0x7c00u;
    case DType::bf16: return (b & 0x7fffu) > 0x7f80u;
    case DType::f8_e4m3fn: return (b & 0x7fu) == 0x7fu;
    case DType::f8_e5m2: return (b & 0x7fu) > 0x7cu;
    default: return false;
  }
}

std::vector<std::string> case_names(const io::SafetensorsFile& f) {
  std::vector<std::string> names;
  for (const auto& name : f.names()) {
    const std::string suffix = ".in";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(name.substr(0, name.size() - suffix.size()));
  }
  return names;
}

}  // namespace

TEST(CastsVsTorch, FixtureHasEveryDTypePair) {
  ASSERT_TRUE(std::filesystem::exists(fixture_path()))
      << fixture_path() << " is missing: run tools/reference/regenerate_fixtures.sh dtype";
  const auto f = io::SafetensorsFile::open(fixture_path());
  const auto names = case_names(f);
  EXPECT_GE(names.size(), 40u);
  // Every diffq dtype is both a cast source and a cast target somewhere in the file.
  std::vector<bool> as_src(kNumDTypes, false), as_dst(kNumDTypes, false);
  for (const auto& n : names) {
    as_src[int(f.tensor(n + ".in").dtype())] = true;
    as_dst[int(f.tensor(n + ".out").dtype())] = true;
  }
  for (int t = 0; t < kNumDTypes; ++t) {
    EXPECT_TRUE(as_src[t]) << dtype_name(DType(t)) << " never cast from";
    EXPECT_TRUE(as_dst[t]) << dtype_name(DType(t)) << " never cast to";
  }
}

TEST(CastsVsTorch, BitExact) {
  ASSERT_TRUE(std::filesystem::exists(fixture_path())) << fixture_path() << " is missing";
  const auto f = io::SafetensorsFile::open(fixture_path());
  int checked = 0;
  for (const auto& name : case_names(f)) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.contains(name + ".out")) << "no " << name << ".out";
    const Tensor in = f.tensor(name + ".in");
    const Tensor want = f.tensor(name + ".out");
    ASSERT_EQ(in.shape(), want.shape());
    const Tensor got = in.to(want.dtype()).contiguous();
    ASSERT_EQ(got.dtype(), want.dtype());
    ASSERT_EQ(got.shape(), want.shape());
    const size_t es = dtype_size(want.dtype());
    const auto* g = static_cast<const uint8_t*>(got.data_ptr());
    const auto* w = static_cast<const uint8_t*>(want.contiguous().data_ptr());
    const auto* x = static_cast<const uint8_t*>(in.contiguous().data_ptr());
    const size_t in_es = dtype_size(in.dtype());
    int bad = 0;
    std::ostringstream detail;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const uint64_t gb = bits_at(g, es, i), wb = bits_at(w, es, i);
      if (gb == wb) continue;
      if (is_nan_bits(want.dtype(), wb) && is_nan_bits(want.dtype(), gb)) continue;
      if (++bad <= 8) {
        detail << "\n  [" << i << "] " << dtype_name(in.dtype()) << " "
               << load_as_double(x, in.dtype(), i) << " (" << hex(bits_at(x, in_es, i), in_es) << ") -> "
               << dtype_name(want.dtype()) << ": torch " << hex(wb, es) << " ("
               << load_as_double(w, want.dtype(), i) << "), diffq " << hex(gb, es) << " ("
               << load_as_double(g, want.dtype(), i) << ")";
      }
    }
    if (const KnownDeviation* k = known(name)) {
      EXPECT_GT(bad, 0) << name << " now matches torch: delete it from kKnown";
      if (bad > 0)
        std::cout << "[ known    ] " << name << ": " << bad << " of " << want.numel()
                  << " elements differ (" << k->why << ")" << detail.str() << "\n";
    } else {
      EXPECT_EQ(bad, 0) << name << ": " << bad << " of " << want.numel()
                        << " elements differ from torch" << detail.str();
    }
    ++checked;
  }
  EXPECT_GE(checked, 40);
}
