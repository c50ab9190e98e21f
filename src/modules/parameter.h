// A module parameter: its expected shape, and its value — a dense Tensor or a QuantizedWeight; a dense
// linear weight may be held packed for its device's GEMM instead (ops/weight_packing.h), still dense to
// every reader: dense() unpacks it (exactly) and it then stays dense.
// Where the bytes live (residency) is separate from the module tree: moving a parameter swaps the
// bytes inside its Storage objects, so modules, hooks and traced graphs keep pointing at it.
#pragma once

#include <memory>
#include <string>

#include "diffq/tensor.h"
#include "quant/quantized_weight.h"

namespace diffq {

enum class Residency : uint8_t {
  unloaded,  // no value yet
  mmap,      // borrowed from a memory-mapped checkpoint (zero copy)
  host,      // host memory owned by diffq
  pinned,    // page-locked host memory (fast async copies)
  device,    // accelerator memory
  disk       // offloaded to a file, reloaded on demand
};
std::string_view residency_name(Residency r);

class Parameter {
 public:
  Parameter() = default;
  explicit Parameter(Shape shape) : shape_(std::move(shape)) {}

  const Shape& shape() const { return shape_; }
  bool defined() const { return dense_.defined() || quantized_ != nullptr || packed_ != nullptr; }
  bool is_quantized() const { return quantized_ != nullptr; }

  // The dense value (throws naming the parameter when it is quantized or unloaded). A packed value is
  // unpacked into the dense one here, and the parameter then stays dense (no pack / unpack round trips).
  const Tensor& dense() const;

  // Packed for the linear of x (Linear::forward): is_packed() says whether it is, packed() gives it.
  // pack_for_linear packs a dense value where its device packs it for x (ops::pack_linear_weight), once:
  // a parameter unpacked by dense(), kept dense, or declined by the device stays as it is until set()
  // gives it a new value. Returns is_packed().
  bool is_packed() const { return packed_ != nullptr; }
  const ops::PackedWeight& packed() const;
  bool pack_for_linear(const Tensor& x);  // x real (a traced call packs nothing)
  bool pack_for_linear(DType x_dtype, Device x_device);  // compile's capture: for inputs like these
  // The weight's packed form whichever it is (quantized, or dense packed for its device's GEMM); null
  // when it is dense: what compile and the residency code treat as "not a plain tensor".
  const ops::PackedWeight* packed_form() const {
    return quantized_ ? static_cast<const ops::PackedWeight*>(quantized_.get()) : packed_.get();
  }
  // Dense from now on (unpacked if packed): for code that keeps the dense bytes (offload groups).
  void keep_dense() const;
  const QuantizedWeight& quantized() const;
  std::shared_ptr<const QuantizedWeight> quantized_ptr() const { return quantized_; }

  void set(Tensor value, Residency r);
  void set(std::shared_ptr<QuantizedWeight> q, Residency r);
  Residency residency() const { return residency_; }
  void set_residency(Residency r) { residency_ = r; }
  DType dtype() const;   // dense dtype (quantized: the dtype of its first packed tensor)
  size_t nbytes() const;

  // Moves the bytes to `d` (a copy is made there, then swapped into the same Storage objects).
  void move_to(Device d);

  std::string name;  // dotted name in the tree (set when registered; used in errors)

 private:
  Shape shape_;
  mutable Tensor dense_;  // mutable: dense() unpacks packed_ into it
  std::shared_ptr<QuantizedWeight> quantized_;
  mutable std::shared_ptr<ops::PackedWeight> packed_;
  DType packed_dtype_ = DType::bf16;  // the dense dtype of packed_
  mutable bool stay_dense_ = false;   // unpacked, kept dense, or declined: no packing until set()
  Residency residency_ = Residency::unloaded;
};

}  // namespace diffq
