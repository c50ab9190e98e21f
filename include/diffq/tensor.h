// Tensor: a strided view (shape, strides in elements, offset in elements) onto a Storage.
//
// A Storage either holds real bytes (allocated by a device allocator, or borrowed from an owner such as
// an mmap of a checkpoint) or is a placeholder produced while a trace is active (symbolic_id >= 0). Views
// (reshape, permute, slice, broadcast) only change the metadata, so they work the same on real and on
// placeholder storages: a traced graph records ops on views of buffers and replays them exactly.
//
// A Storage is never replaced under a tensor to move it: residency changes (offloading) swap the bytes
// inside the same Storage object, so module trees and traced graphs keep pointing at the right place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "diffq/device.h"
#include "diffq/dtype.h"

namespace diffq {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

class Storage {
 public:
  // Fresh bytes from the device's allocator (counted in memory_stats).
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device d);
  // Bytes owned by someone else (an mmap, a caller's buffer) kept alive by `owner`; not counted.
  static std::shared_ptr<Storage> borrow(void* data, size_t nbytes, Device d,
                                         std::shared_ptr<const void> owner);
  // A placeholder for an op output recorded while tracing.
  static std::shared_ptr<Storage> symbolic(int64_t id, size_t nbytes, Device d);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_symbolic() const { return symbolic_id_ >= 0; }
  int64_t symbolic_id() const { return symbolic_id_; }
  bool owns_allocation() const { return allocated_; }

  // Residency change: takes over the bytes of `other` (same size; e.g. a fresh copy on another
  // device) and releases this storage's old bytes. Every tensor and graph that points at this Storage
  // object sees the new place; `other` is left empty.
  void take_bytes_from(Storage& other);

 private:
  Storage() = default;
  void release();
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_{};
  int64_t symbolic_id_ = -1;
  bool allocated_ = false;
  std::shared_ptr<const void> owner_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);

  // ---- factories (real, eager) ----
  static Tensor empty(const Shape& shape, DType dtype, Device d = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device d = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device d = Device::cpu());
  // Copies `values` (rounded to dtype as torch would) into a new CPU tensor.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32);
  static Tensor arange(int64_t n, DType dtype = DType::f32);

  // ---- metadata ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool is_symbolic() const { return storage_ && storage_->is_symbolic(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string str() const;  // "Tensor[2, 3] bfloat16 cpu"

  // Pointer to element 0 of this view (real storages only), on whatever device holds it (kernels).
  void* data_ptr() const;
  // Typed host pointer for code that reads or writes elements on the CPU: throws, naming the tensor,
  // when the tensor lives on another device (copy it with .to(Device::cpu()) first), so a pipeline
  // placed on a GPU never dereferences device memory on the host.
  void* host_data_ptr() const;
  template <class T>
  T* data() const { return static_cast<T*>(host_data_ptr()); }

  // ---- views: metadata only, never copy ----
  Tensor view(const Shape& shape) const;            // needs compatible strides; one -1 allowed
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops dim
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;          // broadcast (numpy rules), stride 0 on new dims
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim) const;

  // ---- possibly copying (go through the op dispatcher, so they trace) ----
  Tensor reshape(const Shape& shape) const;  // view when possible, else contiguous copy
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // ---- host access helpers (tests, I/O) ----
  std::vector<float> to_f32_vector() const;   // any dtype, any layout, CPU
  std::vector<double> to_f64_vector() const;
  double item() const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

// Normalises a possibly negative dim for a tensor of rank `rank` (throws with `ctx` when out of range).
int64_t wrap_dim(int64_t dim, int64_t rank, const char* ctx);
// numpy broadcasting of two shapes (throws naming both shapes).
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* ctx);

}  // namespace diffq
