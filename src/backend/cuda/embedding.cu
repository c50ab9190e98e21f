// embedding on CUDA: ids (int8/uint8/int32/int64, any strided view) [...], table [V, D] (any dtype, any
// view) -> contiguous [..., D], rows copied bit for bit (exact, as the CPU's bytewise copy in
// src/backend/cpu/layout.cpp). One thread per output element.
//
// An id outside [0, V) is an error, as on the CPU, with the same words: the kernel records the first
// (lowest) offending position with atomicMin and writes nothing for it; the host reads that back (one
// synchronising 8-byte copy per call: embedding runs once per text encoder pass, so the wait is cheap)
// and then the offending id itself.
#include <cstdint>
#include <cstring>

#include "backend/cuda/convert_int.cuh"
#include "backend/cuda/index_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNoBadId = ~0ull;

template <class Bits>
__global__ void embedding_kernel(const void* ids, StridedView iv, DType it, const Bits* table, int64_t V,
                                 int64_t D, int64_t ts0, int64_t ts1, Bits* out, int64_t n,
                                 unsigned long long* first_bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / D;
    const int64_t id = load_i64(ids, it, iv.offset_of(r));
    if (id < 0 || id >= V) {
      atomicMin(first_bad, static_cast<unsigned long long>(r));
      continue;
    }
    out[i] = table[embedding_table_offset(id, i, D, ts0, ts1)];
  }
}

template <class Bits>
void launch(const Tensor& ids, const StridedView& iv, const Tensor& tab, Tensor& out, int64_t n,
            unsigned long long* first_bad) {
  embedding_kernel<Bits><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      ids.data_ptr(), iv, ids.dtype(), static_cast<const Bits*>(tab.data_ptr()), tab.size(0), tab.size(1),
      tab.strides()[0], tab.strides()[1], static_cast<Bits*>(out.data_ptr()), n, first_bad);
}

// The id at row-major position `pos` of ids, read back from the device (for the error message).
int64_t read_id(const Tensor& ids, const StridedView& iv, int64_t pos, int device) {
  const size_t es = dtype_size(ids.dtype());
  unsigned char b[8] = {};
  check_cuda(cudaMemcpy(b, static_cast<const unsigned char*>(ids.data_ptr()) + iv.offset_of(pos) * int64_t(es), es,
                        cudaMemcpyDeviceToHost),
             "embedding: reading back an id", device);
  switch (ids.dtype()) {
    case DType::i64: { int64_t v; std::memcpy(&v, b, 8); return v; }
    case DType::i32: { int32_t v; std::memcpy(&v, b, 4); return v; }
    case DType::i8: return int8_t(b[0]);
    default: return b[0];
  }
}

void embedding(const OpCall& c, Tensor& out) {
  const Tensor &ids = c.inputs[0], &tab = c.inputs[1];
  check(is_kernel_int(ids.dtype()) && ids.dtype() != DType::boolean, "embedding", "cuda: ids must be integers, got ",
        ids.str());
  check(tab.dim() == 2, "embedding", "cuda: table must be [V, D], got ", tab.str());
  const int64_t n = out.numel();
  if (n == 0) return;
  const StridedView iv = make_views(ids.shape(), {&ids}, "embedding")[0];
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  refuse_in_capture("embedding: the id range check");
  Tensor flag = Tensor::empty({1}, DType::i64, out.device());
  auto* first_bad = static_cast<unsigned long long*>(flag.data_ptr());
  check_cuda(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), current_stream()), "embedding: cudaMemset", idx);
  switch (dtype_size(tab.dtype())) {
    case 1: launch<uint8_t>(ids, iv, tab, out, n, first_bad); break;
    case 2: launch<uint16_t>(ids, iv, tab, out, n, first_bad); break;
    case 4: launch<uint32_t>(ids, iv, tab, out, n, first_bad); break;
    case 8: launch<uint64_t>(ids, iv, tab, out, n, first_bad); break;
    default: fail("embedding", "cuda: no copy for elements of ", dtype_size(tab.dtype()), " bytes");
  }
  check_cuda(cudaGetLastError(), "embedding: kernel launch", idx);
  unsigned long long bad = kNoBadId;
  check_cuda(cudaMemcpy(&bad, first_bad, sizeof bad, cudaMemcpyDeviceToHost), "embedding: reading the id check", idx);
  if (bad != kNoBadId) {
    const int64_t pos = int64_t(bad);
    fail("embedding", "cuda: id ", read_id(ids, iv, pos, idx), " at position ", pos,
         " is outside the table [0, ", tab.size(0), ") on ", out.device().str());
  }
}

}  // namespace

void register_embedding_kernels() { ops::register_kernel(OpKind::embedding, DeviceKind::cuda, embedding); }

}  // namespace diffq::backend::cuda
