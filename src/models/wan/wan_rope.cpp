#include "models/wan/wan_rope.h"

#include <cmath>
#include <vector>

#include "diffq/error.h"

namespace diffq::models::wan {

WanRopeAxes wan_rope_axes(int64_t head_dim) {
  check(head_dim >= 6 && head_dim % 2 == 0, "wan", "attention_head_dim must be even and >= 6 for the 3-axis RoPE, got ",
        head_dim);
  const int64_t hw = 2 * (head_dim / 6);
  return {head_dim - 2 * hw, hw, hw};
}

namespace {
// One axis: cos/sin of pos * theta^(-2k/dim) for pos < n, k < dim/2, in float64 (as Diffusers' float64
// freqs_dtype), cast to float32. Row-major [n, dim/2].
void axis_table(int64_t dim, int64_t n, double theta, std::vector<float>& c, std::vector<float>& s) {
  const int64_t half = dim / 2;
  c.resize(size_t(n * half));
  s.resize(size_t(n * half));
  for (int64_t k = 0; k < half; ++k) {
    const double freq = 1.0 / std::pow(theta, double(2 * k) / double(dim));
    for (int64_t p = 0; p < n; ++p) {
      const double a = double(p) * freq;
      c[size_t(p * half + k)] = float(std::cos(a));
      s[size_t(p * half + k)] = float(std::sin(a));
    }
  }
}
}  // namespace

std::pair<Tensor, Tensor> wan_rope_tables(int64_t head_dim, int64_t ppf, int64_t pph, int64_t ppw,
                                          int64_t max_seq_len, double theta) {
  const WanRopeAxes ax = wan_rope_axes(head_dim);
  check(ppf > 0 && pph > 0 && ppw > 0, "wan", "empty patch grid ", ppf, "x", pph, "x", ppw);
  check(ppf <= max_seq_len && pph <= max_seq_len && ppw <= max_seq_len, "wan", "patch grid ", ppf, "x", pph, "x", ppw,
        " exceeds rope_max_seq_len ", max_seq_len, " (Diffusers' RoPE tables have that many positions per axis)");
  std::vector<float> ct, st, ch, sh, cw, sw;
  axis_table(ax.t, ppf, theta, ct, st);
  axis_table(ax.h, pph, theta, ch, sh);
  axis_table(ax.w, ppw, theta, cw, sw);
  const int64_t S = ppf * pph * ppw, D = head_dim;
  std::vector<float> cos(size_t(S * D)), sin(size_t(S * D));
  // Writes axis table row `p` (dim/2 values) pair-repeated at column `col` of token row `tok`.
  const auto put = [&](int64_t tok, int64_t col, int64_t dim, int64_t p, const std::vector<float>& c,
                       const std::vector<float>& s) {
    const int64_t half = dim / 2;
    for (int64_t k = 0; k < half; ++k) {
      const size_t i = size_t(tok * D + col + 2 * k);
      cos[i] = cos[i + 1] = c[size_t(p * half + k)];
      sin[i] = sin[i + 1] = s[size_t(p * half + k)];
    }
  };
  int64_t tok = 0;
  for (int64_t f = 0; f < ppf; ++f)
    for (int64_t h = 0; h < pph; ++h)
      for (int64_t w = 0; w < ppw; ++w, ++tok) {
        put(tok, 0, ax.t, f, ct, st);
        put(tok, ax.t, ax.h, h, ch, sh);
        put(tok, ax.t + ax.h, ax.w, w, cw, sw);
      }
  return {Tensor::from_vector(cos, {S, D}), Tensor::from_vector(sin, {S, D})};
}

}  // namespace diffq::models::wan
