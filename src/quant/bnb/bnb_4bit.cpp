#include "quant/bnb/bnb_4bit.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/bnb/bnb_4bit_dequant.h"
#include "quant/tile_linear_plan.h"

namespace diffq::quant {

namespace bnb {

namespace {

constexpr const char* kCtx = "bnb";

// get_4bit_type("nf4") (float32) and get_4bit_type("fp4") = [0, .0625, 8, 12, 4, 6, 2, 3, -0, ...] / 12
// (Python's -0 is the integer 0, so code 8 is +0.0).
constexpr std::array<float, 16> kNF4 = {
    -0x1.0p+0f,        -0x1.647362p-1f, -0x1.0cd66p-1f,  -0x1.94654p-2f,  -0x1.23449ap-2f, -0x1.7a6a7ep-3f,
    -0x1.74f0e2p-4f,   0x0.0p+0f,       0x1.45f5fep-4f,  0x1.4995c6p-3f,  0x1.f809bap-3f,  0x1.5a0674p-2f,
    0x1.c3497p-2f,     0x1.200f56p-1f,  0x1.722766p-1f,  0x1.0p+0f};
constexpr std::array<float, 16> kFP4 = {
    0x0.0p+0f,  0x1.555556p-8f,  0x1.555556p-1f,  0x1.0p+0f,  0x1.555556p-2f,  0x1.0p-1f,  0x1.555556p-3f,  0x1.0p-2f,
    0x0.0p+0f, -0x1.555556p-8f, -0x1.555556p-1f, -0x1.0p+0f, -0x1.555556p-2f, -0x1.0p-1f, -0x1.555556p-3f, -0x1.0p-2f};
// The same FP4 table as libbitsandbytes_cpu's dequantizer holds it: code 8 is -0.0.
constexpr std::array<float, 16> kFP4Native = {
    0x0.0p+0f,  0x1.555556p-8f,  0x1.555556p-1f,  0x1.0p+0f,  0x1.555556p-2f,  0x1.0p-1f,  0x1.555556p-3f,  0x1.0p-2f,
    -0x0.0p+0f, -0x1.555556p-8f, -0x1.555556p-1f, -0x1.0p+0f, -0x1.555556p-2f, -0x1.0p-1f, -0x1.555556p-3f, -0x1.0p-2f};
// _get_4bit_quantize_bounds: (sorted[i] + sorted[i+1]) / 2 in float32, and argsort(code).
constexpr std::array<float, 15> kNF4Bounds = {
    -0x1.b239bp-1f, -0x1.38a4ep-1f, -0x1.d709p-2f, -0x1.5bd4ecp-2f, -0x1.e079d8p-3f, -0x1.1a7178p-3f, -0x1.74f0e2p-5f,
    0x1.45f5fep-5f, 0x1.ec90c4p-4f, 0x1.a0cfcp-3f, 0x1.2b05a8p-2f,  0x1.8ea7f2p-2f,  0x1.00da08p-1f,  0x1.491b5ep-1f,
    0x1.b913b4p-1f};
constexpr std::array<float, 15> kFP4Bounds = {
    -0x1.aaaaacp-1f, -0x1.2aaaacp-1f, -0x1.aaaaacp-2f, -0x1.2aaaacp-2f, -0x1.aaaaacp-3f, -0x1.6p-4f, -0x1.555556p-9f,
    0x0.0p+0f,       0x1.555556p-9f,  0x1.6p-4f,       0x1.aaaaacp-3f,  0x1.2aaaacp-2f,  0x1.aaaaacp-2f, 0x1.2aaaacp-1f,
    0x1.aaaaacp-1f};
constexpr std::array<uint8_t, 16> kNF4Order = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
constexpr std::array<uint8_t, 16> kFP4Order = {11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3};

// create_dynamic_map() (signed, 7 exponent bits, 8 bits) as bitsandbytes 0.50.2 builds it with torch
// (float32 linspace means scaled by powers of ten, sorted).
constexpr std::array<float, 256> kDynamicMap = {
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f,
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0x0.p+0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f,
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1.p+0f};

}  // namespace

std::string_view quant_type_name(QuantType t) { return t == QuantType::nf4 ? "nf4" : "fp4"; }

QuantType parse_quant_type(std::string_view s) {
  if (s == "nf4") return QuantType::nf4;
  if (s == "fp4") return QuantType::fp4;
  fail(kCtx, "quant_type must be 'nf4' or 'fp4', got '", s, "'");
}

const std::array<float, 16>& code_table(QuantType t) { return t == QuantType::nf4 ? kNF4 : kFP4; }
const std::array<float, 15>& bucket_bounds(QuantType t) { return t == QuantType::nf4 ? kNF4Bounds : kFP4Bounds; }
const std::array<uint8_t, 16>& bucket_to_code(QuantType t) { return t == QuantType::nf4 ? kNF4Order : kFP4Order; }

const std::array<float, 256>& dynamic_map() {
  return kDynamicMap;
}

bool valid_blocksize(int64_t bs) {
  for (int64_t v = 32; v <= 4096; v *= 2)
    if (bs == v) return true;
  return false;
}

// ---- torch's float sum ---------------------------------------------------------------------------
namespace {

int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t r = 0;
  uint64_t v = uint64_t(x - 1);
  while (v) {
    ++r;
    v >>= 1;
  }
  return r;
}

// multi_row_sum<acc_t, 4> over `size` rows of 4 "columns"; each column is a vector of `lanes` floats
// (lanes = 1 for the scalar path). load(i, k, lane) gives element (row i, column k).
template <class Load>
void multi_row_sum(int64_t size, int lanes, const Load& load, std::vector<float>& out /* 4 * lanes */) {
  constexpr int kLevels = 4, kRows = 4;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(size) / kLevels);
  const int64_t level_step = int64_t(1) << level_power;
  const int64_t level_mask = level_step - 1;
  std::vector<float> acc(size_t(kLevels * kRows * lanes), 0.0f);
  auto A = [&](int lv, int k, int l) -> float& { return acc[size_t((lv * kRows + k) * lanes + l)]; };
  int64_t i = 0;
  for (; i + level_step <= size;) {
    for (int64_t j = 0; j < level_step; ++j, ++i)
      for (int k = 0; k < kRows; ++k)
        for (int l = 0; l < lanes; ++l) A(0, k, l) += load(i, k, l);
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < kRows; ++k)
        for (int l = 0; l < lanes; ++l) {
          A(j, k, l) += A(j - 1, k, l);
          A(j - 1, k, l) = 0.0f;
        }
      const int64_t mask = level_mask << (j * level_power);
      if ((i & mask) != 0) break;
    }
  }
  for (; i < size; ++i)
    for (int k = 0; k < kRows; ++k)
      for (int l = 0; l < lanes; ++l) A(0, k, l) += load(i, k, l);
  for (int j = 1; j < kLevels; ++j)
    for (int k = 0; k < kRows; ++k)
      for (int l = 0; l < lanes; ++l) A(0, k, l) += A(j, k, l);
  out.assign(acc.begin(), acc.begin() + kRows * lanes);
}

}  // namespace

float torch_sum_f32(const float* x, int64_t n, int lanes) {
  check(lanes >= 1, kCtx, "torch_sum_f32: lanes must be >= 1");
  std::vector<float> part;
  if (n < lanes) {
    // scalar_inner_sum -> row_sum over single floats with 4-way ILP.
    const int64_t rows = n / 4;
    multi_row_sum(rows, 1, [&](int64_t i, int k, int) { return x[i * 4 + k]; }, part);
    for (int64_t i = rows * 4; i < n; ++i) part[0] += x[i];
    for (int k = 1; k < 4; ++k) part[0] += part[size_t(k)];
    return part[0];
  }
  // vectorized_inner_sum: row_sum over whole vectors, then the scalar tail, then the lanes in order.
  const int64_t nvec = n / lanes;
  const int64_t rows = nvec / 4;
  multi_row_sum(rows, lanes, [&](int64_t i, int k, int l) { return x[(i * 4 + k) * lanes + l]; }, part);
  for (int64_t v = rows * 4; v < nvec; ++v)
    for (int l = 0; l < lanes; ++l) part[size_t(l)] += x[v * lanes + l];
  for (int k = 1; k < 4; ++k)
    for (int l = 0; l < lanes; ++l) part[size_t(l)] += part[size_t(k * lanes + l)];
  float acc = 0.0f;
  for (int64_t i = nvec * lanes; i < n; ++i) acc += x[i];
  for (int l = 0; l < lanes; ++l) acc += part[size_t(l)];
  return acc;
}

int torch_sum_lanes_this_cpu() {
  // torch registers its sum kernel without an AVX-512 variant (SumKernel.cpp, GH 59415), and both its
  // AVX2 and its default x86 builds of Vectorized<float> hold 8 floats. aarch64 builds use 4.
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
  return 8;
#else
  return 4;
#endif
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string s(buf, r.ptr);
  const size_t epos = s.find('e');
  std::string mant = s.substr(0, epos);
  const int exp10 = std::stoi(s.substr(epos + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant = mant.substr(1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out = "0." + std::string(size_t(-exp10 - 1), '0') + digits;
    } else if (int64_t(digits.size()) <= exp10 + 1) {
      out = digits + std::string(size_t(exp10 + 1 - int64_t(digits.size())), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(exp10 + 1)) + "." + digits.substr(size_t(exp10 + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += e;
  }
  return neg ? "-" + out : out;
}

// ---- libbitsandbytes_cpu quantize_blockwise -----------------------------------------------------
namespace {

constexpr int kLUTSize = 65536;

struct Lut8 {
  std::array<float, 256> code{};
  std::vector<uint8_t> lut;
};

std::shared_ptr<const Lut8> lut_for(const float* code256) {
  // build_quantize_lut: bin i holds the index of the nearest code to -1 + 2i/65535 (midpoints
  // 0.5 * (c[j] + c[j+1]), a midpoint equal to the bin value stays on the lower code).
  static thread_local std::shared_ptr<Lut8> cache;
  if (cache && std::memcmp(cache->code.data(), code256, sizeof(float) * 256) == 0) return cache;
  auto l = std::make_shared<Lut8>();
  std::memcpy(l->code.data(), code256, sizeof(float) * 256);
  float mid[255];
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (code256[i] + code256[i + 1]);
  l->lut.resize(kLUTSize);
  int idx = 0;
  for (int i = 0; i < kLUTSize; ++i) {
    const float val = -1.0f + (2.0f * float(i)) / float(kLUTSize - 1);
    while (idx < 255 && mid[idx] < val) ++idx;
    l->lut[size_t(i)] = uint8_t(idx);
  }
  cache = l;
  return l;
}

}  // namespace

void quantize_blockwise_8bit(const float* code256, const float* x, int64_t n, int64_t blocksize, uint8_t* out,
                             float* absmax) {
  check(blocksize > 0, kCtx, "blocksize must be positive, got ", blocksize);
  const auto l = lut_for(code256);
  const uint8_t* lut = l->lut.data();
  const int64_t nb = (n + blocksize - 1) / blocksize;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s = b * blocksize, e = std::min(n, s + blocksize);
    float am = 0.0f;
    for (int64_t i = s; i < e; ++i) {
      const float a = std::fabs(x[i]);
      am = std::isnan(a) ? am : std::max(am, a);  // NaN lanes count as 0
    }
    absmax[b] = am;
    if (am == 0.0f) {
      std::memset(out + s, 0, size_t(e - s));
      continue;
    }
    const float inv = 1.0f / am;
    for (int64_t i = s; i < e; ++i) {
      float v = x[i] * inv;
      v = std::isnan(v) ? -1.0f : std::min(std::max(v, -1.0f), 1.0f);  // AVX2 max_ps(NaN, -1) = -1
      float t = v + 1.0f;
      t = t * 0.5f;
      t = t * float(kLUTSize - 1);
      t = t + 0.5f;
      out[i] = lut[uint16_t(t)];
    }
  }
}

}  // namespace bnb

// ---- options / weight ----------------------------------------------------------------------------

Bnb4bitOptions Bnb4bitOptions::from_config(const BitsAndBytesConfig& c) {
  check(c.load_in_4bit, "bnb", "the BitsAndBytesConfig does not set load_in_4bit");
  Bnb4bitOptions o;
  o.quant_type = bnb::parse_quant_type(c.bnb_4bit_quant_type);
  o.double_quant = c.bnb_4bit_use_double_quant;
  o.compute_dtype = c.bnb_4bit_compute_dtype;
  const std::string& s = c.bnb_4bit_quant_storage;
  if (s == "uint8") {
    o.quant_storage = DType::u8;
  } else if (s == "int8") {
    o.quant_storage = DType::i8;
  } else if (s == "float16") {
    o.quant_storage = DType::f16;
  } else if (s == "bfloat16") {
    o.quant_storage = DType::bf16;
  } else if (s == "float32") {
    o.quant_storage = DType::f32;
  } else {
    fail("bnb", "bnb_4bit_quant_storage '", s, "' is not supported by diffq (no float64 tensors)");
  }
  return o;
}

namespace {

constexpr const char* kCtx = "bnb";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

const uint8_t* bytes_of(const Tensor& t) { return static_cast<const uint8_t*>(t.data_ptr()); }

}  // namespace

Bnb4bitWeight::Bnb4bitWeight(Tensor packed, Bnb4bitState st, DType compute_dtype, std::string name)
    : packed_(std::move(packed)), state_(std::move(st)), compute_dtype_(compute_dtype), name_(std::move(name)) {
  check(state_.shape.size() == 2 && state_.shape[0] > 0 && state_.shape[1] > 0, kCtx, name_,
        ": a 4-bit Linear weight must have a 2-D shape [out_features, in_features], the quant_state says ",
        shape_str(state_.shape));
  check(bnb::valid_blocksize(state_.blocksize), kCtx, name_, ": invalid blocksize ", state_.blocksize,
        " (bitsandbytes accepts 32, 64, 128, 256, 512, 1024, 2048 and 4096)");
  check(state_.dtype == DType::f32 || state_.dtype == DType::bf16 || state_.dtype == DType::f16, kCtx, name_,
        ": quant_state dtype ", dtype_name(state_.dtype), " is not float32, bfloat16 or float16");
  set_compute_dtype(compute_dtype);
  numel_ = state_.shape[0] * state_.shape[1];
  nblocks_ = ceil_div(numel_, state_.blocksize);
  nbytes_ = (numel_ + 1) / 2;
  check(packed_.defined() && packed_.device().is_cpu() && packed_.is_contiguous(), kCtx, name_,
        ": the packed 4-bit codes must be a contiguous CPU tensor");
  check(int64_t(packed_.nbytes()) == nbytes_, kCtx, name_, ": 4-bit weight of shape ", shape_str(state_.shape),
        " needs ", nbytes_, " bytes ((", numel_, " + 1) / 2), the tensor has ", packed_.nbytes(), " (",
        shape_str(packed_.shape()), " ", dtype_name(packed_.dtype()), ")");
  const Tensor& am = state_.absmax;
  check(am.defined() && am.dim() == 1 && am.shape()[0] == nblocks_ && am.is_contiguous(), kCtx, name_,
        ".absmax must be [", nblocks_, "] (one per block of ", state_.blocksize, " of ", numel_, " elements), got ",
        am.defined() ? shape_str(am.shape()) : std::string("nothing"));
  if (state_.nested) {
    check(am.dtype() == DType::u8, kCtx, name_, ".absmax must be uint8 codes with double quant, got ",
          dtype_name(am.dtype()));
    check(state_.nested_blocksize == 256, kCtx, name_, ": nested_blocksize ", state_.nested_blocksize,
          " is not supported (bitsandbytes only runs 256)");
    const int64_t nn = ceil_div(nblocks_, 256);
    const Tensor& na = state_.nested_absmax;
    check(na.defined() && na.dim() == 1 && na.shape()[0] == nn && na.dtype() == DType::f32 && na.is_contiguous(),
          kCtx, name_, ".nested_absmax must be float32 [", nn, "], got ",
          na.defined() ? shape_str(na.shape()) + " " + std::string(dtype_name(na.dtype())) : std::string("nothing"));
    const Tensor& nm = state_.nested_quant_map;
    check(nm.defined() && nm.numel() == 256 && nm.dtype() == DType::f32 && nm.is_contiguous(), kCtx, name_,
          ".nested_quant_map must be float32 [256], got ",
          nm.defined() ? shape_str(nm.shape()) + " " + std::string(dtype_name(nm.dtype())) : std::string("nothing"));
  } else {
    check(am.dtype() == DType::f32, kCtx, name_, ".absmax must be float32 without double quant, got ",
          dtype_name(am.dtype()));
  }
  // bnb's CPU dequantizer: native kernel (FP4 code 8 = -0.0) for even in_features, torch fallback
  // (+0.0) for odd ones.
  if (state_.quant_type == bnb::QuantType::nf4) {
    code_ = bnb::code_table(bnb::QuantType::nf4);
  } else {
    code_ = state_.shape[1] % 2 == 0 ? bnb::kFP4Native : bnb::kFP4;
  }
  bnb::build_pair_table(code_.data(), pairs_.data());
}

void Bnb4bitWeight::set_compute_dtype(DType d) {
  check(d == DType::f32 || d == DType::bf16 || d == DType::f16, kCtx, name_, ": compute dtype ", dtype_name(d),
        " is not float32, bfloat16 or float16");
  compute_dtype_ = d;
}

const float* Bnb4bitWeight::code() const { return code_.data(); }

std::string Bnb4bitWeight::scheme() const { return "bnb_" + std::string(bnb::quant_type_name(state_.quant_type)); }

std::vector<Tensor> Bnb4bitWeight::storage_tensors() const {
  std::vector<Tensor> v = {packed_, state_.absmax};
  if (state_.nested) {
    v.push_back(state_.nested_absmax);
    v.push_back(state_.nested_quant_map);
  }
  return v;
}

void Bnb4bitWeight::absmax_range(int64_t b0, int64_t b1, float* dst) const {
  if (!state_.nested) {
    std::memcpy(dst, state_.absmax.data<float>() + b0, size_t(b1 - b0) * sizeof(float));
    return;
  }
  // dequantize_blockwise(absmax_8bit, state2) + offset, both in float32.
  const uint8_t* q = state_.absmax.data<uint8_t>();
  const float* na = state_.nested_absmax.data<float>();
  const float* map = state_.nested_quant_map.data<float>();
  for (int64_t b = b0; b < b1; ++b) {
    const float v = map[q[b]] * na[b / state_.nested_blocksize];
    dst[b - b0] = v + state_.nested_offset;
  }
}

std::vector<float> Bnb4bitWeight::absmax_f32() const {
  std::vector<float> v(static_cast<size_t>(nblocks_));
  absmax_range(0, nblocks_, v.data());
  return v;
}

void Bnb4bitWeight::dequant_rows(int64_t n0, int64_t n1, float* dst, DType round_to) const {
  const int64_t K = state_.shape[1];
  const int64_t e0 = n0 * K, e1 = n1 * K;
  if (e1 <= e0) return;
  const int64_t b0 = e0 / state_.blocksize, b1 = (e1 - 1) / state_.blocksize + 1;
  std::vector<float> am(size_t(b1 - b0));
  absmax_range(b0, b1, am.data());
  bnb::dequant_4bit_range_scalar(bytes_of(packed_), nbytes_, pairs_.data(), am.data(), b0, state_.blocksize, e0, e1,
                                 dst);
  if (round_to != DType::f32)
    for (int64_t i = 0; i < e1 - e0; ++i) dst[i] = round_through(round_to, dst[i]);
}

Tensor Bnb4bitWeight::dequantize(DType dtype) const {
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, kCtx, name_, ": cannot dequantize to ",
        dtype_name(dtype));
  // Scalar reference: code * absmax in float32, one rounding to dtype.
  Tensor out = Tensor::empty(state_.shape, DType::f32);
  const std::vector<float> am = absmax_f32();
  bnb::dequant_4bit_range_scalar(bytes_of(packed_), nbytes_, pairs_.data(), am.data(), 0, state_.blocksize, 0,
                                 numel_, out.data<float>());
  return dtype == DType::f32 ? out : out.to(dtype);
}

std::optional<TileLinearPlan> Bnb4bitWeight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  const int64_t N = state_.shape[0], K = state_.shape[1];
  check(x.dim() >= 1 && x.shape().back() == K, kCtx, name_, ": input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", the weight has in_features ", K);
  const Tensor xc = x.to(compute_dtype_);
  Tensor bc;
  if (bias.defined()) bc = bias.to(x.dtype()).to(compute_dtype_);  // Linear4bit casts bias to x's dtype first
  const DType round_to = compute_dtype_;
  // The result is in compute_dtype_, then cast back to x's dtype (QuantizedWeight::linear).
  return TileLinearPlan{xc, bc, N, K, [this, round_to](int64_t n0, int64_t n1, float* dst) { dequant_rows(n0, n1, dst, round_to); }};
}

// ---- quantize --------------------------------------------------------------------------------------

std::shared_ptr<Bnb4bitWeight> Bnb4bitWeight::quantize(const Tensor& w, const Bnb4bitOptions& opt, std::string_view name) {
  check(bnb::valid_blocksize(opt.blocksize), kCtx, "invalid blocksize ", opt.blocksize,
        " (bitsandbytes accepts 32, 64, 128, 256, 512, 1024, 2048 and 4096)");
  check(w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16, kCtx, name,
        ": Blockwise 4bit quantization only supports 16/32-bit floats, but got ", dtype_name(w.dtype()));
  check(w.dim() == 2, kCtx, name, ": a Linear weight must be 2-D, got ", shape_str(w.shape()));
  check(w.device().is_cpu(), kCtx, name, ": quantization runs on the CPU, the weight is on ", w.device().str());
  const int64_t n = w.numel(), bs = opt.blocksize;
  const int64_t nb = ceil_div(n, bs), full = n / bs;
  const Tensor wf = w.to(DType::f32).contiguous();
  const float* a = wf.data<float>();
  const auto& bounds = bnb::bucket_bounds(opt.quant_type);
  const auto& order = bnb::bucket_to_code(opt.quant_type);
  auto code_of = [&](float s) -> uint8_t {
    // torch.bucketize(right=False): the number of bounds strictly below s.
    int q = 0;
    while (q < 15 && bounds[size_t(q)] < s) ++q;
    return order[size_t(q)];
  };
  std::vector<float> absmax(static_cast<size_t>(nb));
  std::vector<uint8_t> codes(static_cast<size_t>(n + 1));
  core::parallel_for(full, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float am = 0.0f;
      bool nan = false;
      for (int64_t i = b * bs; i < (b + 1) * bs; ++i) {
        const float v = std::fabs(a[i]);
        nan |= std::isnan(v);
        am = std::max(am, v);
      }
      if (nan) am = std::numeric_limits<float>::quiet_NaN();
      absmax[size_t(b)] = am;
      const float inv = 1.0f / std::max(am, 1e-38f);  // absmax.clamp(min=1e-38).reciprocal()
      for (int64_t i = b * bs; i < (b + 1) * bs; ++i) {
        const float s = std::min(std::max(a[i] * inv, -1.0f), 1.0f);
        codes[size_t(i)] = code_of(s);
      }
    }
  });
  if (full < nb) {  // trailing partial block: divided by its (clamped, and so stored) absmax
    float am = 0.0f;
    for (int64_t i = full * bs; i < n; ++i) am = std::max(am, std::fabs(a[i]));
    am = std::max(am, 1e-38f);
    absmax[size_t(full)] = am;
    for (int64_t i = full * bs; i < n; ++i) codes[size_t(i)] = code_of(std::min(std::max(a[i] / am, -1.0f), 1.0f));
  }
  codes[size_t(n)] = code_of(0.0f);  // the pad nibble of an odd count (F.pad with 0.0)

  const int64_t nbytes = (n + 1) / 2;
  Tensor packed_u8 = Tensor::empty({nbytes, 1}, DType::u8);
  uint8_t* p = packed_u8.data<uint8_t>();
  for (int64_t k = 0; k < nbytes; ++k) p[k] = uint8_t(codes[size_t(2 * k)] << 4 | codes[size_t(2 * k + 1)]);
  Tensor packed = packed_u8;
  if (opt.quant_storage != DType::u8) {
    const int64_t es = int64_t(dtype_size(opt.quant_storage));
    check(nbytes % es == 0, kCtx, name, ": ", nbytes, " packed bytes cannot be viewed as ", dtype_name(opt.quant_storage));
    packed = Tensor(packed_u8.storage(), {nbytes / es, 1}, {1, 1}, 0, opt.quant_storage);
  }

  Bnb4bitState st;
  st.quant_type = opt.quant_type;
  st.blocksize = bs;
  st.dtype = w.dtype();
  st.shape = w.shape();
  if (!opt.double_quant) {
    st.absmax = Tensor::from_vector(absmax, {nb}, DType::f32);
  } else {
    const int lanes = opt.sum_lanes > 0 ? opt.sum_lanes : bnb::torch_sum_lanes_this_cpu();
    const float offset = bnb::torch_sum_f32(absmax.data(), nb, lanes) / float(nb);
    std::vector<float> centered(static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) centered[size_t(i)] = absmax[size_t(i)] - offset;
    const int64_t nn = ceil_div(nb, 256);
    Tensor q = Tensor::empty({nb}, DType::u8);
    Tensor na = Tensor::empty({nn}, DType::f32);
    bnb::quantize_blockwise_8bit(bnb::dynamic_map().data(), centered.data(), nb, 256, q.data<uint8_t>(),
                                 na.data<float>());
    st.absmax = q;
    st.nested = true;
    st.nested_absmax = na;
    st.nested_quant_map = Tensor::from_vector(std::vector<float>(bnb::dynamic_map().begin(), bnb::dynamic_map().end()),
                                              {256}, DType::f32);
    st.nested_blocksize = 256;
    st.nested_offset = offset;
  }
  return std::make_shared<Bnb4bitWeight>(packed, std::move(st), opt.compute_dtype, std::string(name));
}

// ---- state dict ------------------------------------------------------------------------------------

std::string Bnb4bitWeight::quant_state_json() const {
  // json.dumps of {"quant_type", "blocksize", "dtype", "shape", [nested_blocksize, nested_dtype,
  // nested_offset]} in that order, Python's default separators.
  std::string s = "{\"quant_type\": \"" + std::string(bnb::quant_type_name(state_.quant_type)) +
                  "\", \"blocksize\": " + std::to_string(state_.blocksize) + ", \"dtype\": \"" +
                  std::string(dtype_name(state_.dtype)) + "\", \"shape\": [" + std::to_string(state_.shape[0]) + ", " +
                  std::to_string(state_.shape[1]) + "]";
  if (state_.nested) {
    s += ", \"nested_blocksize\": " + std::to_string(state_.nested_blocksize) +
         ", \"nested_dtype\": \"float32\", \"nested_offset\": " + bnb::python_float_repr(double(state_.nested_offset));
  }
  return s + "}";
}

void Bnb4bitWeight::save(io::NamedTensors& out, const std::string& key) const {
  out.emplace_back(key, packed_);
  out.emplace_back(key + ".absmax", state_.absmax);
  out.emplace_back(key + ".quant_map",
                   Tensor::from_vector(std::vector<float>(bnb::code_table(state_.quant_type).begin(),
                                                          bnb::code_table(state_.quant_type).end()),
                                       {16}, DType::f32));
  if (state_.nested) {
    out.emplace_back(key + ".nested_absmax", state_.nested_absmax);
    out.emplace_back(key + ".nested_quant_map", state_.nested_quant_map);
  }
  const std::string js = quant_state_json();
  Tensor blob = Tensor::empty({int64_t(js.size())}, DType::u8);
  std::memcpy(blob.data_ptr(), js.data(), js.size());
  out.emplace_back(key + ".quant_state.bitsandbytes__" + std::string(bnb::quant_type_name(state_.quant_type)), blob);
}

std::shared_ptr<Bnb4bitWeight> Bnb4bitWeight::load(const io::StateDict& sd, const std::string& key, DType compute_dtype) {
  const auto w = sd.find(key);
  check(w != sd.end(), kCtx, "the state dict has no tensor '", key, "'");
  std::string qs_key;
  for (const char* t : {"nf4", "fp4"}) {
    const std::string k = key + ".quant_state.bitsandbytes__" + t;
    if (sd.count(k)) {
      check(qs_key.empty(), kCtx, key, ": both quant_state.bitsandbytes__nf4 and __fp4 are present");
      qs_key = k;
    }
  }
  check(!qs_key.empty(), kCtx, "Supplied state dict for ", key,
        " does not contain `bitsandbytes__*` and possibly other `quantized_stats` components.");
  const Tensor& blob = sd.at(qs_key);
  check(blob.dtype() == DType::u8 && blob.dim() == 1, kCtx, qs_key, " must be a 1-D uint8 tensor (UTF-8 JSON), got ",
        shape_str(blob.shape()), " ", dtype_name(blob.dtype()));
  const Tensor bc = blob.contiguous();
  const std::string text(static_cast<const char*>(bc.data_ptr()), size_t(bc.numel()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(kCtx, qs_key, " is not valid JSON: ", e.what());
  }
  auto need = [&](const char* f) -> const nlohmann::json& {
    check(j.is_object() && j.contains(f), kCtx, qs_key, " has no \"", f, "\": ", text);
    return j[f];
  };
  Bnb4bitState st;
  st.quant_type = bnb::parse_quant_type(need("quant_type").get<std::string>());
  check(qs_key.substr(qs_key.size() - 3) == bnb::quant_type_name(st.quant_type), kCtx, qs_key,
        " says quant_type \"", bnb::quant_type_name(st.quant_type), "\"");
  st.blocksize = need("blocksize").get<int64_t>();
  check(bnb::valid_blocksize(st.blocksize), kCtx, qs_key, ": invalid blocksize ", st.blocksize,
        " (bitsandbytes accepts 32, 64, 128, 256, 512, 1024, 2048 and 4096)");
  st.dtype = parse_dtype(need("dtype").get<std::string>());
  for (const auto& d : need("shape")) st.shape.push_back(d.get<int64_t>());
  auto get = [&](const std::string& suffix) -> Tensor {
    const auto it = sd.find(key + suffix);
    check(it != sd.end(), kCtx, "the 4-bit weight ", key, " has no '", key + suffix, "'");
    check(it->second.device().is_cpu(), kCtx, key + suffix, " must be on the CPU");
    return it->second.contiguous();
  };
  st.absmax = get(".absmax");
  if (st.absmax.dim() != 1) st.absmax = st.absmax.reshape({st.absmax.numel()});
  const Tensor qmap = get(".quant_map");
  check(qmap.numel() == 16 && qmap.dtype() == DType::f32, kCtx, key, ".quant_map must be float32 [16], got ",
        shape_str(qmap.shape()), " ", dtype_name(qmap.dtype()));
  if (sd.count(key + ".nested_absmax")) {
    st.nested = true;
    st.nested_absmax = get(".nested_absmax");
    st.nested_quant_map = get(".nested_quant_map");
    st.nested_blocksize = need("nested_blocksize").get<int64_t>();
    check(need("nested_dtype").get<std::string>() == "float32", kCtx, qs_key, ": nested_dtype must be float32");
    st.nested_offset = float(need("nested_offset").get<double>());
  }
  Tensor packed = w->second;
  check(packed.device().is_cpu(), kCtx, key, " must be on the CPU");
  packed = packed.contiguous();
  return std::make_shared<Bnb4bitWeight>(packed, std::move(st), compute_dtype, key);
}

}  // namespace diffq::quant
