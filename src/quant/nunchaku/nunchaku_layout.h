// Nunchaku Lite checkpoint layouts (Diffusers' quant_method "nunchaku_lite"), decoded to logical order.
//
// SVDQuant W4A4 tensors, per Linear [N, K] with rank R and group size 64 (int4):
//   qweight      int8  [N, K/2]  int4 codes in [-8, 7]
//   wscales      float [K/64, N] one scale per (group, output)
//   smooth_factor float [K]      activations are divided by it before their int4 quantization
//   proj_down    float [K, R]    low-rank branch, input side (applied to the unsmoothed input)
//   proj_up      float [N, R]    low-rank branch, output side
//   bias         float [N]
// Two byte orders:
//  * packed (what the nunchaku CUDA kernels, and so Diffusers, consume; DeepCompressor's
//    NunchakuWeightPacker): needs N % 128 == 0, K % 128 == 0, R % 16 == 0. qweight is tiled for the
//    m16n8k64 MMA: for n = ((nb*8 + np)*2 + ns)*8 + nl and k = kb*64 + ks*32 + kl*8 + kr, the int32
//    word ((((nb*(K/64) + kb)*8 + np)*8 + nl)*4 + kl)*2 + ns)*2 + ks holds the code in nibble kr
//    (little-endian bytes). Scale-like vectors (wscales per group, smooth_factor, bias) are permuted
//    within blocks of 128 outputs: n = nb*128 + a*16 + b*8 + c*2 + d sits at flat position
//    ((nb*G + g)*8 + a)*16 + c*4 + b*2 + d (G = 1 for vectors). proj_down / proj_up are tiled in 16x16
//    blocks: with the "row" index i (rank for down, output for up) = ip*16 + a*8 + b and the "column"
//    index j (input for down, rank for up) = jp*16 + p*8 + q*2 + s, the element sits at flat position
//    ((((outer*RP + inner)*8 + b)*4 + q)*2 + a)*2 + p)*2 + s, where (outer, inner) = (jp, ip) for
//    down (stored [K, R]) and (ip, jp) for up (stored [N, R]).
//  * logical (diffuse-compressor's layout for targets that miss the tile multiples; the kernels cannot
//    run those): qweight row-major with column 2i in the low nibble and 2i + 1 in the high nibble of
//    byte i; every other tensor plain row-major.
// diffq picks packed exactly when the Linear meets the tile multiples (a checkpoint Diffusers can load
// and run), logical otherwise.
//
// AWQ W4A16 (group size 64): qweight int32 [N/4, K/2], wscales / wzeros float [K/64, N]; weight =
// code * wscale + wzero with unsigned codes 0..15. Output n, group g, channel c (0..63) is nibble
// ((c % 32) / 8) + 4 * (c % 2) of word [n / 4, g*32 + (n % 4)*8 + (c / 32)*4 + (c % 8) / 2].
#pragma once

#include <cstdint>

namespace diffq::quant::nunchaku {

// Whether a Linear [n, k] with low-rank rank r uses the packed kernel layout.
bool svdq_packed_layout(int64_t n, int64_t k, int64_t r);

// qweight bytes ([n, k/2]) -> codes [n, k] in [-8, 7].
void svdq_decode_codes(const uint8_t* qweight, int64_t n, int64_t k, bool packed, int8_t* codes);
// Flat position of logical scale (group g, output j) in a [groups, n] tensor (vectors: groups = 1, g = 0).
int64_t svdq_scale_index(int64_t g, int64_t j, int64_t groups, int64_t n, bool packed);
// Flat position of proj_down's logical element (input kk, rank rr) in its [k, r] tensor.
int64_t svdq_down_index(int64_t kk, int64_t rr, int64_t k, int64_t r, bool packed);
// Flat position of proj_up's logical element (output nn, rank rr) in its [n, r] tensor.
int64_t svdq_up_index(int64_t nn, int64_t rr, int64_t n, int64_t r, bool packed);

// AWQ W4A16 code (0..15) of output nn, input kk from qweight int32 [n/4, k/2].
int awq_code(const int32_t* qweight, int64_t k, int64_t nn, int64_t kk);

}  // namespace diffq::quant::nunchaku
