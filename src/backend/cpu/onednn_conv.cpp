#include "backend/cpu/onednn_conv.h"
#include "backend/cpu/onednn_runtime.h"
#include "backend/cpu/row_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/transpose.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

namespace {

using dnnl::memory;
using Dt = memory::data_type;

Dt dt_of(ConvElem e) { return e == ConvElem::bf16 ? Dt::bf16 : Dt::f32; }
size_t elem_bytes(ConvElem e) { return e == ConvElem::bf16 ? 2 : 4; }
DType dtype_of(ConvElem e) { return e == ConvElem::bf16 ? DType::bf16 : DType::f32; }

dnnl::engine& engine() { return onednn_engine(); }

struct Key {
  ConvElem in, out;
  bool bias;
  OnednnConvShape s;
  auto tie() const {
    return std::tie(in, out, bias, s.n, s.c, s.h, s.w, s.image_stride, s.o, s.kh, s.kw, s.stride, s.pad_l, s.pad_r,
                    s.pad_t, s.pad_b, s.ho, s.wo, s.nhwc);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// A cached convolution: the primitive with its layouts, the conversions from diffq's NCHW src and to its
// NCHW dst where oneDNN prefers other layouts, and its scratchpad size. Channels-last (NHWC, what
// brgconv takes) is reached by diffq's transposes (transpose.h), any other layout by oneDNN's reorder
// (null where the layouts agree). prim is null where oneDNN offers only a
// reference implementation (slower than diffq's implicit GEMM).
struct Entry {
  std::unique_ptr<dnnl::convolution_forward> prim;
  std::string impl;
  memory::desc src_user, src, wei_user, wei, bias, dst, dst_user;
  std::unique_ptr<dnnl::reorder> src_reorder, dst_reorder;
  bool src_nhwc = false, dst_nhwc = false;  // src / dst converted by transposes
  size_t scratch_bytes = 0;
};

// Creates the primitive descriptor with every layout left to oneDNN (format_tag::any), on both APIs.
dnnl::convolution_forward::primitive_desc make_pd(const memory::desc& src, const memory::desc& wei,
                                                  const memory::desc* bias, const memory::desc& dst,
                                                  const memory::dims& strides, const memory::dims& pad_l,
                                                  const memory::dims& pad_r, const dnnl::primitive_attr& attr) {
  using dnnl::algorithm;
  using dnnl::prop_kind;
#if DNNL_VERSION_MAJOR >= 3
  if (bias)
    return {engine(), prop_kind::forward_inference, algorithm::convolution_direct, src, wei, *bias, dst,
            strides, pad_l, pad_r, attr};
  return {engine(), prop_kind::forward_inference, algorithm::convolution_direct, src, wei, dst, strides, pad_l,
          pad_r, attr};
#else
  if (bias)
    return {dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, src, wei,
                                            *bias, dst, strides, pad_l, pad_r),
            attr, engine()};
  return {dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, src, wei,
                                          dst, strides, pad_l, pad_r),
          attr, engine()};
#endif
}

std::unique_ptr<Entry> make_entry(const Key& key) {
  auto e = std::make_unique<Entry>();
  const OnednnConvShape& s = key.s;
  const Dt in = dt_of(key.in), out = dt_of(key.out);
  using tag = memory::format_tag;
  try {
    // diffq's layouts: images image_stride apart (overlapping windows allowed), weights OIHW, dst NCHW;
    // or channels-last images and dst.
    e->src_user = s.nhwc ? memory::desc({s.n, s.c, s.h, s.w}, in, tag::nhwc)
                         : memory::desc({s.n, s.c, s.h, s.w}, in, memory::dims{s.image_stride, s.h * s.w, s.w, 1});
    e->wei_user = memory::desc({s.o, s.c, s.kh, s.kw}, in, tag::oihw);
    e->dst_user = memory::desc({s.n, s.o, s.ho, s.wo}, out, s.nhwc ? tag::nhwc : tag::nchw);
    e->bias = memory::desc({s.o}, Dt::f32, tag::x);
    const memory::desc src_any({s.n, s.c, s.h, s.w}, in, tag::any), wei_any({s.o, s.c, s.kh, s.kw}, in, tag::any),
        dst_any({s.n, s.o, s.ho, s.wo}, out, tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratch: concurrent calls never share
    const auto pd = make_pd(src_any, wei_any, key.bias ? &e->bias : nullptr, dst_any, {s.stride, s.stride},
                            {s.pad_t, s.pad_l}, {s.pad_b, s.pad_r}, attr);
    e->impl = pd.impl_info_str();
    if (!onednn_native_impl(e->impl)) return e;
    e->src = pd.src_desc();
    e->wei = pd.weights_desc();
    e->dst = pd.dst_desc();
    e->scratch_bytes = pd.scratchpad_desc().get_size();
    e->src_nhwc = e->src != e->src_user && e->src == memory::desc({s.n, s.c, s.h, s.w}, in, tag::nhwc);
    e->dst_nhwc = e->dst != e->dst_user && e->dst == memory::desc({s.n, s.o, s.ho, s.wo}, out, tag::nhwc);
    if (e->src != e->src_user && !e->src_nhwc)
      e->src_reorder = std::make_unique<dnnl::reorder>(
          dnnl::reorder::primitive_desc(engine(), e->src_user, engine(), e->src));
    if (e->dst != e->dst_user && !e->dst_nhwc)
      e->dst_reorder = std::make_unique<dnnl::reorder>(
          dnnl::reorder::primitive_desc(engine(), e->dst, engine(), e->dst_user));
    e->prim = std::make_unique<dnnl::convolution_forward>(pd);
  } catch (const dnnl::error& err) {
    e->prim.reset();
    e->impl = err.what();
  }
  return e;
}

const Entry& entry_for(const Key& key) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Entry>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[key];
  if (!slot) slot = make_entry(key);
  return *slot;
}

// 64-bit fingerprint of the weight bytes: how a cached reordered weight notices that the tensor at its
// address changed (a weight written in place, or freed and another allocated at the same address). Reads
// the weight once per call (~1% of the conv's time at VAE sizes): 4 independent multiply-xorshift lanes
// over each 1 MiB chunk, the chunks hashed on diffq's threads and combined in order (the value does not
// depend on the thread count).
uint64_t fingerprint_chunk(const uint8_t* b, size_t n) {
  uint64_t h[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull, 0x082EFA98EC4E6C89ull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) {
      uint64_t v;
      std::memcpy(&v, b + i + 8 * l, 8);
      h[l] = (h[l] ^ v) * 0x9E3779B97F4A7C15ull;
      h[l] ^= h[l] >> 29;
    }
  for (; i < n; ++i) h[0] = (h[0] ^ b[i]) * 0x100000001B3ull;
  uint64_t r = n;
  for (uint64_t x : h) r = (r ^ x) * 0xFF51AFD7ED558CCDull ^ (r >> 31);
  return r;
}

uint64_t fingerprint(const void* p, size_t n) {
  constexpr size_t kChunk = size_t(1) << 20;
  const auto* b = static_cast<const uint8_t*>(p);
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
  std::vector<uint64_t> part(size_t(std::max<int64_t>(chunks, 1)), 0);
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      part[size_t(c)] = fingerprint_chunk(b + size_t(c) * kChunk, std::min(kChunk, n - size_t(c) * kChunk));
  });
  uint64_t r = n;
  for (uint64_t x : part) r = (r ^ x) * 0xFF51AFD7ED558CCDull ^ (r >> 31);
  return r;
}

// Reordered weights, per (address, element type, OIHW dims) and oneDNN layout; shared_ptr so that an
// entry dropped while another thread runs with it stays alive until that call ends.
struct WeightSlot {
  memory::desc layout;
  uint64_t print = 0;
  std::shared_ptr<uint8_t[]> bytes;
  size_t nbytes = 0;
};
using WeightKey = std::tuple<const void*, ConvElem, int64_t, int64_t, int64_t, int64_t>;
// Past this many bytes of reordered weights the cache starts over (offloading reloads weights at new
// addresses; a VAE decoder's weights are ~100-300 MB).
constexpr size_t kWeightCacheCap = size_t(1) << 30;

struct WeightCache {
  std::mutex mu;
  std::map<WeightKey, std::vector<WeightSlot>> slots;
  size_t bytes = 0;
  int64_t refreshed = 0;
};
WeightCache& weight_cache() {
  static WeightCache c;
  return c;
}

// One reusable stream and scratch / staging buffers per calling thread.
struct ThreadState {
  dnnl::stream stream{engine()};
  AlignedBuffer<uint8_t> scratch, src, dst;
};
ThreadState& thread_state() {
  thread_local ThreadState t;
  return t;
}

// The weights of `e` in its layout, reordered on first use and again when their bytes changed.
std::shared_ptr<uint8_t[]> weights_for(const Entry& e, ConvElem in, const OnednnConvShape& s, const void* w,
                                       dnnl::stream& stream) {
  const size_t nbytes = size_t(s.o * s.c * s.kh * s.kw) * elem_bytes(in);
  const uint64_t print = fingerprint(w, nbytes);
  WeightCache& wc = weight_cache();
  std::lock_guard<std::mutex> lock(wc.mu);
  const WeightKey key{w, in, s.o, s.c, s.kh, s.kw};
  WeightSlot* slot = nullptr;
  for (auto& sl : wc.slots[key])
    if (sl.layout == e.wei) slot = &sl;
  if (slot && slot->print == print) return slot->bytes;
  if (slot) {
    ++wc.refreshed;
  } else {
    if (wc.bytes + e.wei.get_size() > kWeightCacheCap) {
      wc.slots.clear();
      wc.bytes = 0;
    }
    auto& list = wc.slots[key];
    list.push_back({e.wei, 0, nullptr, 0});
    slot = &list.back();
  }
  auto fresh = std::shared_ptr<uint8_t[]>(new (std::align_val_t(64)) uint8_t[e.wei.get_size()],
                                          [](uint8_t* p) { ::operator delete[](p, std::align_val_t(64)); });
  memory from(e.wei_user, engine(), const_cast<void*>(w)), to(e.wei, engine(), fresh.get());
  dnnl::reorder(from, to).execute(stream, from, to);
  stream.wait();
  wc.bytes += e.wei.get_size() - slot->nbytes;
  *slot = {e.wei, print, fresh, e.wei.get_size()};
  return fresh;
}

std::atomic<int64_t> g_calls{0};

bool cpu_has(ConvElem in) {
  const CpuFeatures& f = cpu_features();
  if (in == ConvElem::f32) return f.avx512f;
  return f.avx512_bf16 || (f.amx_bf16 && amx_tiles_permitted());
}

const Entry& probe(ConvElem in) {
  return entry_for({in, in, true, {1, 128, 64, 64, 128 * 64 * 64, 128, 3, 3, 1, 1, 1, 1, 1, 64, 64}});
}

}  // namespace

bool onednn_conv_available(ConvElem in) {
  static const bool f32 = cpu_has(ConvElem::f32) && probe(ConvElem::f32).prim != nullptr;
  static const bool bf16 = cpu_has(ConvElem::bf16) && probe(ConvElem::bf16).prim != nullptr;
  return in == ConvElem::bf16 ? bf16 : f32;
}

std::string onednn_conv_impl(ConvElem in) {
  if (!cpu_has(in))
    return in == ConvElem::f32 ? "unavailable: no AVX-512"
                               : "unavailable: the CPU has neither AVX512-BF16 nor usable AMX-BF16";
  const Entry& e = probe(in);
  return e.prim ? e.impl : "unavailable: oneDNN offers only " + e.impl;
}

bool onednn_conv_runs_channels_last(ConvElem in) {
  if (!cpu_has(in)) return false;
  const Entry& e = probe(in);
  return e.prim && e.src_nhwc && e.dst_nhwc;
}

namespace {

// Runs e (for shape s) on src / dst already in e's layouts, with the weights w in e's layout.
void execute(const Entry& e, ThreadState& t, const memory& src, const memory& dst, const void* wei,
             const float* bias) {
  dnnl::engine& eng = engine();
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, memory(e.wei, eng, const_cast<void*>(wei))}, {DNNL_ARG_DST, dst}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, eng, const_cast<float*>(bias)));
  if (e.scratch_bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(memory::desc({int64_t(e.scratch_bytes)}, Dt::u8, memory::dims{1}), eng,
                                             t.scratch.get(e.scratch_bytes)));
  e.prim->execute(t.stream, args);
}

// One primitive call over all s.n images (their src descriptor takes any image stride that does not
// make images overlap).
bool run_conv(ConvElem in, ConvElem out, const OnednnConvShape& s, const void* x, const void* w, const float* bias,
              void* y) {
  const Entry& e = entry_for({in, out, bias != nullptr, s});
  if (!e.prim) return false;
  ThreadState& t = thread_state();
  dnnl::engine& eng = engine();
  const std::shared_ptr<uint8_t[]> wbytes = weights_for(e, in, s, w, t.stream);
  memory src_user(e.src_user, eng, const_cast<void*>(x)), dst_user(e.dst_user, eng, y);
  memory src = e.src_reorder || e.src_nhwc ? memory(e.src, eng, t.src.get(e.src.get_size())) : src_user;
  memory dst = e.dst_reorder || e.dst_nhwc ? memory(e.dst, eng, t.dst.get(e.dst.get_size())) : dst_user;
  if (e.src_reorder) e.src_reorder->execute(t.stream, src_user, src);
  const size_t ib = elem_bytes(in), ob = elem_bytes(out);
  if (e.src_nhwc) {  // image i: [C, H W] (image_stride apart) -> [H W, C]
    const auto* xs = static_cast<const uint8_t*>(x);
    auto* xd = static_cast<uint8_t*>(src.get_data_handle());
    const int64_t hw = s.h * s.w;
    for (int64_t i = 0; i < s.n; ++i)
      transpose_2d(ib, s.c, hw, xs + size_t(i * s.image_stride) * ib, hw, xd + size_t(i * hw * s.c) * ib, s.c);
  }
  execute(e, t, src, dst, wbytes.get(), bias);
  if (e.dst_reorder) e.dst_reorder->execute(t.stream, dst, dst_user);
  t.stream.wait();
  if (e.dst_nhwc) {  // image i: [Ho Wo, O] -> [O, Ho Wo]
    const auto* ys = static_cast<const uint8_t*>(dst.get_data_handle());
    auto* yd = static_cast<uint8_t*>(y);
    const int64_t hw = s.ho * s.wo, image = hw * s.o;
    for (int64_t i = 0; i < s.n; ++i)
      transpose_2d(ob, hw, s.o, ys + size_t(i * image) * ob, s.o, yd + size_t(i * image) * ob, hw);
  }
  return true;
}

// A band of output rows [r0, r1) of one image: the conv of the input rows it reads (the image's own
// padding kept only where the band touches the image's edge), as its own primitive.
struct Band {
  int64_t image, r0, r1, in0;  // in0: the first input row read
  OnednnConvShape s;           // the band's conv: one image of rows [in0, in0 + s.h)
};

// On the FLUX VAE decode (AMX, 2 MiB L2 a core) bands of 1.5-4 MiB ran fastest, smaller (256 KiB) and larger
// ones (~6.5 MiB: two per thread) slower (docs/benchmarks.md "Fourth AMX session").
constexpr int64_t kBandBytes = int64_t(2) << 20;

Band make_band(const OnednnConvShape& s, int64_t image, int64_t r0, int64_t r1) {
  const int64_t lo = r0 * s.stride - s.pad_t, hi = (r1 - 1) * s.stride - s.pad_t + s.kh;  // input rows [lo, hi)
  Band b{image, r0, r1, std::max<int64_t>(lo, 0), s};
  b.s.n = 1;
  b.s.h = std::min(hi, s.h) - b.in0;
  b.s.pad_t = b.in0 - lo;
  b.s.pad_b = hi - std::min(hi, s.h);
  b.s.ho = r1 - r0;
  b.s.image_stride = s.c * b.s.h * s.w;
  return b;
}

// The conv split into bands of output rows over diffq's threads, each band one single-threaded oneDNN
// call between its own transposes (NCHW rows -> NHWC -> NCHW rows; none for channels-last images, whose
// band rows oneDNN reads and writes in place), so no OpenMP team runs: an idle
// OpenMP team spins for milliseconds after each parallel call, taking the cores from the diffq threads
// that run the ops between convs (docs/benchmarks.md "Fourth AMX session").
// False (nothing computed) where some band's primitive does not run channels-last or oneDNN declines it.
bool run_banded(ConvElem in, ConvElem out, const OnednnConvShape& s, const void* x, const void* w, const float* bias,
                void* y, const void* residual, int threads) {
  // Bands of about kBandBytes of input and output rows (at least two per thread, for balance): the band's
  // NHWC input, written by the transpose, is still in L2 when the conv reads it, and its output when the
  // transpose back reads it.
  const int64_t row_bytes = s.wo * (s.c * s.stride + s.o) * int64_t(elem_bytes(in));
  const int64_t rows = std::clamp<int64_t>(kBandBytes / std::max<int64_t>(row_bytes, 1), 1, s.ho);
  const int64_t per_image = std::max((s.ho + rows - 1) / rows,
                                     std::min<int64_t>(s.ho, (2 * threads + s.n - 1) / std::max<int64_t>(s.n, 1)));
  std::vector<Band> bands;
  for (int64_t i = 0; i < s.n; ++i)
    for (int64_t k = 0; k < per_image; ++k)
      bands.push_back(make_band(s, i, s.ho * k / per_image, s.ho * (k + 1) / per_image));
  std::vector<const Entry*> entries;
  std::vector<std::shared_ptr<uint8_t[]>> weights;
  ThreadState& t = thread_state();
  for (const Band& b : bands) {
    const Entry& e = entry_for({in, out, bias != nullptr, b.s});
    // channels-last: diffq's transposes (channels-first images) or none (channels-last images)
    const bool src_last = s.nhwc ? e.src == e.src_user : e.src_nhwc, dst_last = s.nhwc ? e.dst == e.dst_user : e.dst_nhwc;
    if (!e.prim || !src_last || !dst_last) return false;
    entries.push_back(&e);
  }
  // The weights once per layout (the bands share one as a rule, edge bands may differ), each layout's
  // bytes checked (fingerprinted) once per call.
  for (size_t i = 0; i < bands.size(); ++i) {
    size_t j = 0;
    while (j < i && entries[j]->wei != entries[i]->wei) ++j;
    weights.push_back(j < i ? weights[j] : weights_for(*entries[i], in, bands[i].s, w, t.stream));
  }
  const size_t ib = elem_bytes(in), ob = elem_bytes(out);
  const int64_t plane = s.h * s.w, out_plane = s.ho * s.wo;
  parallel_for(int64_t(bands.size()), 1, [&](int64_t b0, int64_t b1) {
    OmpTeam one(1);
    ThreadState& ts = thread_state();
    dnnl::engine& eng = engine();
    for (int64_t bi = b0; bi < b1; ++bi) {
      const Band& b = bands[size_t(bi)];
      const Entry& e = *entries[size_t(bi)];
      if (s.nhwc) {  // the band's input rows and output rows are contiguous runs of x and y: in place
        const size_t at = size_t(b.image * s.o * out_plane + b.r0 * s.wo * s.o) * ob;
        memory src(e.src, eng, const_cast<uint8_t*>(static_cast<const uint8_t*>(x)) +
                                   size_t(b.image * s.image_stride + b.in0 * s.w * s.c) * ib);
        memory dst(e.dst, eng, static_cast<uint8_t*>(y) + at);
        execute(e, ts, src, dst, weights[size_t(bi)].get(), bias);
        ts.stream.wait();
        if (residual)  // the band's output, still in cache
          add_row_into(dtype_of(out), static_cast<const uint8_t*>(residual) + at, static_cast<uint8_t*>(y) + at,
                       b.s.ho * s.wo * s.o);
        continue;
      }
      memory src(e.src, eng, ts.src.get(e.src.get_size())), dst(e.dst, eng, ts.dst.get(e.dst.get_size()));
      const auto* xs = static_cast<const uint8_t*>(x) + size_t(b.image * s.image_stride + b.in0 * s.w) * ib;
      transpose_2d(ib, s.c, b.s.h * s.w, xs, plane, src.get_data_handle(), s.c);
      execute(e, ts, src, dst, weights[size_t(bi)].get(), bias);
      ts.stream.wait();
      auto* yd = static_cast<uint8_t*>(y) + size_t(b.image * s.o * out_plane + b.r0 * s.wo) * ob;
      transpose_2d(ob, b.s.ho * s.wo, s.o, dst.get_data_handle(), s.o, yd, out_plane);
      if (residual) {  // the band's rows of each output channel, still in cache
        const auto* rb = static_cast<const uint8_t*>(residual) + size_t(b.image * s.o * out_plane + b.r0 * s.wo) * ob;
        for (int64_t o = 0; o < s.o; ++o)
          add_row_into(dtype_of(out), rb + size_t(o * out_plane) * ob, yd + size_t(o * out_plane) * ob, b.s.ho * s.wo);
      }
    }
  });
  return true;
}

}  // namespace

bool onednn_conv2d(ConvElem in, ConvElem out, const OnednnConvShape& s, const void* x, const void* w,
                   const float* bias, void* y, const void* residual) {
  if (!cpu_has(in)) return false;
  const int threads = in_parallel_region() ? 1 : num_threads();
  // Bands on diffq's threads where every band runs channels-last; else one call, oneDNN's OpenMP team
  // given diffq's thread count (one inside a diffq parallel region; onednn_gemm.cpp keeps its pool
  // threads at one).
  const int64_t out_image = s.o * s.ho * s.wo;
  auto run = [&](const OnednnConvShape& one, const void* xp, void* yp, const void* rp) {
    if (run_banded(in, out, one, xp, w, bias, yp, rp, threads)) return true;
    OmpTeam team(threads);
    if (!run_conv(in, out, one, xp, w, bias, yp)) return false;
    if (rp) add_row_into(dtype_of(out), rp, yp, one.n * out_image);
    return true;
  };
  const auto* rb = static_cast<const uint8_t*>(residual);
  const int64_t image = s.c * s.h * s.w;
  if (s.n > 1 && s.image_stride > 0 && s.image_stride < image) {
    // Overlapping images (a causal 3D conv's frame windows): oneDNN's memory descriptors refuse
    // overlapping strides, so one call per image (the windows share the cached weights and primitive).
    OnednnConvShape one = s;
    one.n = 1;
    one.image_stride = image;
    const auto* xb = static_cast<const uint8_t*>(x);
    auto* yb = static_cast<uint8_t*>(y);
    const int64_t out_bytes = out_image * int64_t(elem_bytes(out));
    for (int64_t i = 0; i < s.n; ++i)
      if (!run(one, xb + i * s.image_stride * int64_t(elem_bytes(in)), yb + i * out_bytes,
               rb ? rb + i * out_bytes : nullptr)) {
        check(i == 0, "conv2d", "oneDNN refused image ", i, " of a convolution it ran for image 0");
        return false;
      }
  } else if (!run(s, x, y, residual)) {
    return false;
  }
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

OnednnConvStats onednn_conv_stats() {
  WeightCache& wc = weight_cache();
  std::lock_guard<std::mutex> lock(wc.mu);
  OnednnConvStats st;
  st.calls = g_calls.load();
  for (const auto& [k, list] : wc.slots) st.entries += int64_t(list.size());
  st.bytes = int64_t(wc.bytes);
  st.refreshed = wc.refreshed;
  return st;
}

}  // namespace diffq::backend::cpu
