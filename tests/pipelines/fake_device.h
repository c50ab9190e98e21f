// A fake accelerator for host-side placement tests: while a FakeDevice is alive, "cuda:0" is a device
// whose memory is host memory and whose op kernels are the CPU backend's, run on CPU aliases of the same
// bytes. Every op call is recorded with the devices of its inputs and output, so a test can run a whole
// pipeline "on the GPU" here and check where each tensor lived: an op that mixes devices is refused by
// the dispatcher, a host read of device memory (Tensor::data<T>) throws, and a kernel that is handed a
// host tensor is recorded as a violation; a call the real CUDA kernels would refuse (an integer dtype a
// float-only kernel lacks, a masked 512-wide attention head: backend/cuda_kernel_rules.h) throws as on the
// GPU. It replaces the CUDA backend's device interface and kernels
// for its lifetime (in CUDA builds too) and restores them after; every tensor made on it must be gone
// before it is destroyed.
//
// It captures as a CUDA graph does (DeviceInterface::capture): while a body is captured its kernels are
// recorded, not run, on non-owning views of their operands, and its allocations come from a graph pool
// whose blocks are never returned to the host (later captures reuse freed ones); a replay runs the
// recorded kernels again on the same addresses. As on CUDA (a thread's current stream), only the
// capturing thread captures: another thread (offloading's prefetcher) runs and allocates as usual. What
// the CUDA backend refuses in a capture is refused here too: host <-> device copies, offload uploads and
// fences, synchronize.
//
// Compile: like CUDA's compile backend, the fake device offers `fuse` only (its fused nodes run the CPU's
// fused kernel on the host aliases, recorded in the schedule and captured like kernels); a FakeDevice
// made with Compile::none has no compile backend (every pass declines).
#pragma once

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda_kernel_rules.h"
#include "backend/device_interface.h"
#include "compile/compile_backend.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/tensor.h"
#include "ops/op.h"
#include "ops/kernel_precondition.h"
#include "ops/linear_q.h"

namespace diffq::testing {

struct FakeOpRecord {
  ops::OpKind kind;
  Device out;
  std::vector<Device> inputs;  // undefined optional inputs are left out
  size_t out_bytes = 0;
};

// The device-interface calls offloading makes, in order (the copy schedule): pinned host allocations,
// fences recorded on the compute stream, uploads on the transfer stream (each waiting on a fence, or none),
// and the ops between them. Fence ids count from 1; an upload's `wait` is 0 when it waits on nothing.
struct FakeScheduleEvent {
  enum Kind { pinned_alloc, fence, upload, op } kind;
  int64_t fence_id = 0;   // fence: its id; upload: the fence it waits on (0: none)
  const void* ptr = nullptr;  // upload: the device buffer written; pinned_alloc: the host block
  size_t nbytes = 0;
  std::vector<const void*> reads;  // op: where its device inputs start
};

class FakeDevice final : public backend::DeviceInterface {
 public:
  enum class Compile { fuse, none };  // the compile backend it offers (CUDA's: fuse)
  explicit FakeDevice(Compile compile = Compile::fuse) : compile_(*this) {
    instance() = this;
    previous_compile_ = compile::find_compile_backend(DeviceKind::cuda);
    compile::register_compile_backend(DeviceKind::cuda, compile == Compile::fuse ? &compile_ : nullptr);
    for (size_t k = 0; k < kOps; ++k) {
      saved_[k] = ops::find_kernel(ops::OpKind(k), DeviceKind::cuda);
      cpu_[k] = ops::find_kernel(ops::OpKind(k), DeviceKind::cpu);
    }
    install(std::make_index_sequence<kOps>{});
    previous_ = backend::set_device_interface(DeviceKind::cuda, this);
    // What the real CUDA kernels accept (dtypes, head dims) is enforced here too, in every build.
    previous_rules_ = ops::set_kernel_precondition(DeviceKind::cuda, &backend::cuda_kernel_refuses);
    // No quantized kernels: the real device's would launch on the fake device's host memory.
    saved_linear_q_ = ops::take_linear_q_kernels(DeviceKind::cuda);
  }
  ~FakeDevice() override {
    compile::register_compile_backend(DeviceKind::cuda, previous_compile_);
    ops::take_linear_q_kernels(DeviceKind::cuda);
    for (const auto& [scheme, fn] : saved_linear_q_) ops::register_linear_q_kernel(DeviceKind::cuda, scheme, fn);
    ops::set_kernel_precondition(DeviceKind::cuda, previous_rules_);
    backend::set_device_interface(DeviceKind::cuda, previous_);
    for (size_t k = 0; k < kOps; ++k) ops::register_kernel(ops::OpKind(k), DeviceKind::cuda, saved_[k]);
    instance() = nullptr;
  }
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;

  // ---- backend::DeviceInterface ----
  int device_count(std::string*) const override { return 1; }
  Allocator& allocator(int) override { return alloc_; }
  void synchronize(int) override { refuse_in_capture("synchronize"); }
  void* alloc_pinned(size_t nbytes, int) override {
    void* p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    log({FakeScheduleEvent::pinned_alloc, 0, p, nbytes, {}});
    return p;
  }
  void free_pinned(void* p) override { std::free(p); }
  int64_t memory_available(int) override { return available_; }
  void set_memory_available(int64_t bytes) { available_ = bytes; }
  // Its kernels are the CPU's: it asks for the CPU's image layout, so its results stay the CPU's bits.
  bool prefers_channels_last(DType dt) const override {
    return backend::device_interface(DeviceKind::cpu)->prefers_channels_last(dt);
  }
  std::shared_ptr<void> record_fence(int) override {
    refuse_in_capture("an offload fence");
    std::lock_guard<std::mutex> lock(mu_);
    auto id = std::make_shared<int64_t>(++fences_);
    schedule_.push_back({FakeScheduleEvent::fence, *id, nullptr, 0, {}});
    return id;
  }
  void upload_on_side_stream(int, void* dst, const void* src, size_t n, const std::shared_ptr<void>& wait) override {
    refuse_in_capture("an offload upload");
    log({FakeScheduleEvent::upload, wait ? *static_cast<const int64_t*>(wait.get()) : 0, dst, n, {}});
    std::memcpy(dst, src, n);
  }

  std::unique_ptr<backend::CapturedWork> capture(int, const std::function<void()>& body, std::string* why) override {
    if (capturing_) {
      *why = "already capturing";
      return nullptr;
    }
    auto work = std::make_unique<Captured>(*this);
    const int64_t live_before = alloc_.graph_live();
    capture_thread_ = std::this_thread::get_id();
    capturing_ = &work->kernels;
    try {
      body();
    } catch (const std::exception& e) {
      *why = e.what();
    }
    capturing_ = nullptr;
    if (why->empty() && alloc_.graph_live() != live_before)
      *why = "a tensor made during the capture outlives it (a cache filled inside the captured call)";
    if (!why->empty()) return nullptr;
    ++captures_;
    return work;
  }
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  int64_t graph_pool_blocks() const { return alloc_.graph_blocks(); }

  // ---- what ran ----
  std::vector<FakeOpRecord> records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  void clear_records() {
    std::lock_guard<std::mutex> lock(mu_);
    records_.clear();
    schedule_.clear();
  }
  std::vector<FakeScheduleEvent> schedule() const {
    std::lock_guard<std::mutex> lock(mu_);
    return schedule_;
  }
  int64_t live_bytes() const { return alloc_.stats().current_bytes; }

 private:
  static constexpr size_t kOps = size_t(ops::OpKind::count_);

  class HostBackedAllocator final : public Allocator {
   public:
    explicit HostBackedAllocator(const FakeDevice& d) : dev_(d) {}
    ~HostBackedAllocator() override {
      for (const Block& b : graph_) std::free(b.p);
    }
    void* allocate(size_t nbytes) override {
      const size_t size = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
      void* p = nullptr;
      if (dev_.capturing_here()) {  // the graph pool: a free block that fits, else a new one kept for good
        std::lock_guard<std::mutex> lock(mu_);
        for (Block& b : graph_)
          if (!b.live && b.size >= size) {
            b.live = true;
            p = b.p;
            break;
          }
        if (!p) {
          p = std::aligned_alloc(64, size);
          if (p) graph_.push_back({p, size, true});
        }
      } else {
        p = std::aligned_alloc(64, size);
      }
      if (!p) fail("fake_device", "out of memory allocating ", nbytes, " bytes");
      record_alloc(nbytes);
      return p;
    }
    void deallocate(void* p, size_t nbytes) override {
      record_free(nbytes);
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (Block& b : graph_)
          if (b.p == p) {
            b.live = false;
            return;
          }
      }
      std::free(p);
    }
    Device device() const override { return Device::cuda(0); }
    int64_t graph_live() const {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t n = 0;
      for (const Block& b : graph_) n += b.live;
      return n;
    }
    int64_t graph_blocks() const {
      std::lock_guard<std::mutex> lock(mu_);
      return int64_t(graph_.size());
    }

   private:
    struct Block {
      void* p;
      size_t size;
      bool live;
    };
    const FakeDevice& dev_;
    mutable std::mutex mu_;
    std::vector<Block> graph_;
  };

  // A captured body: its kernels, each on non-owning views of the bytes it was handed.
  struct Captured final : backend::CapturedWork {
    explicit Captured(FakeDevice& d) : dev(d) {}
    void replay() override {
      ++dev.replays_;
      for (const auto& k : kernels) k();
    }
    FakeDevice& dev;
    std::vector<std::function<void()>> kernels;
  };

  bool capturing_here() const { return capturing_ && std::this_thread::get_id() == capture_thread_; }
  void refuse_in_capture(const char* what) const {
    if (capturing_here()) fail("fake_device", what, " waits on the host: it cannot be part of a captured graph");
  }

  // Runs `fn` on host aliases of `inputs` / `out` (a compile backend's node), recorded in the schedule as an
  // op reading its device inputs; captured instead of run while this thread captures.
  void run_node(const std::function<void(const std::vector<Tensor>&, Tensor&)>& fn, const std::vector<Tensor>& inputs,
                Tensor& out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      FakeScheduleEvent e{FakeScheduleEvent::op, 0, nullptr, out.nbytes(), {}};
      for (const Tensor& t : inputs)
        if (t.defined() && t.device().is_cuda()) e.reads.push_back(t.data_ptr());
      schedule_.push_back(std::move(e));
    }
    std::vector<Tensor> host;
    const bool capture = capturing_here();
    for (const Tensor& t : inputs) host.push_back(capture ? unowned_host_alias(t) : host_alias(t));
    if (capture) {
      capturing_.load()->push_back([fn, host, o = unowned_host_alias(out)]() mutable { fn(host, o); });
      return;
    }
    Tensor o = host_alias(out);
    fn(host, o);
  }

  // The compile backend (Compile::fuse): fused elementwise nodes on the CPU's fused kernel.
  class FakeCompileBackend final : public compile::CompileBackend {
   public:
    explicit FakeCompileBackend(FakeDevice& d) : dev_(d) {}
    bool offers(std::string_view pass) const override { return pass == "fuse"; }
    void run_fused(const compile::FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out,
                   const compile::QuantizedLinear*) const override {
      check(!p.norm && !p.gemm, "fake_device", "a fused node with a prologue: the device offers fuse only");
      const compile::CompileBackend* cpu = compile::find_compile_backend(DeviceKind::cpu);
      dev_.run_node([cpu, p](const std::vector<Tensor>& l, Tensor& o) { cpu->run_fused(p, l, o, nullptr); }, leaves, out);
    }
    void run_norm_rope(const compile::NormRope&, const std::vector<Tensor>&, Tensor&) const override { no(); }
    void run_linear_strided(const std::vector<Tensor>&, Tensor&) const override { no(); }
    bool quantized_linear_in_parts(const ops::PackedWeight&) const override { return false; }
    std::vector<compile::KernelTuning> tuning_candidates(const compile::Node&, const ops::OpCall&) const override { return {}; }
    std::shared_ptr<void> install(const compile::KernelTuning&) const override { return nullptr; }
    std::string processor_key() const override { no(); }
    nlohmann::json tuning_to_json(const compile::KernelTuning&) const override { no(); }
    compile::KernelTuning tuning_from_json(const nlohmann::json&, const std::string&) const override { no(); }

   private:
    [[noreturn]] static void no() { fail("fake_device", "the fake device's compile backend offers fuse only"); }
    FakeDevice& dev_;
  };

  // A CPU view of the same bytes that does not keep them alive (a captured kernel's operand).
  static Tensor unowned_host_alias(const Tensor& t) {
    if (!t.defined()) return t;
    auto st = Storage::borrow(t.storage()->data(), t.storage()->nbytes(), Device::cpu(), nullptr);
    return Tensor(st, t.shape(), t.strides(), t.offset(), t.dtype());
  }

  static FakeDevice*& instance() {
    static FakeDevice* d = nullptr;
    return d;
  }

  // A CPU view of the same bytes (the fake device's memory is host memory).
  static Tensor host_alias(const Tensor& t) {
    if (!t.defined() || t.device().is_cpu()) return t;
    auto st = Storage::borrow(t.storage()->data(), t.storage()->nbytes(), Device::cpu(), t.storage());
    return Tensor(st, t.shape(), t.strides(), t.offset(), t.dtype());
  }

  template <size_t K>
  static void kernel(const ops::OpCall& c, Tensor& out) {
    FakeDevice* self = instance();
    constexpr auto kind = ops::OpKind(K);
    FakeOpRecord r{kind, out.device(), {}, out.nbytes()};
    ops::OpCall host = c;
    for (Tensor& t : host.inputs) {
      if (t.defined()) r.inputs.push_back(t.device());
      t = host_alias(t);
    }
    Tensor host_out = host_alias(out);
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->records_.push_back(r);
      FakeScheduleEvent e{FakeScheduleEvent::op, 0, nullptr, out.nbytes(), {}};
      for (const Tensor& t : c.inputs)
        if (t.defined() && t.device().is_cuda()) e.reads.push_back(t.data_ptr());
      self->schedule_.push_back(std::move(e));
    }
    if (kind == ops::OpKind::to_device && c.inputs[0].device() != out.device())
      self->refuse_in_capture("a host <-> device copy");
    const ops::KernelFn fn = kind == ops::OpKind::to_device ? self->cpu_[size_t(ops::OpKind::copy)] : self->cpu_[K];
    check(fn != nullptr, "fake_device", "no CPU kernel for ", ops::op_name(kind));
    // to_device: host <-> "device" are both host bytes, any view: a copy.
    ops::OpCall call = host;
    if (kind == ops::OpKind::to_device) call = ops::OpCall{ops::OpKind::copy, {host.inputs[0]}, {}};
    if (self->capturing_here()) {  // recorded, not run: a replay runs it on the same addresses
      for (Tensor& t : call.inputs) t = unowned_host_alias(t);
      self->capturing_.load()->push_back([fn, call, o = unowned_host_alias(out)]() mutable { fn(call, o); });
      return;
    }
    fn(call, host_out);
  }

  template <size_t... K>
  void install(std::index_sequence<K...>) {
    (ops::register_kernel(ops::OpKind(K), DeviceKind::cuda, &FakeDevice::kernel<K>), ...);
  }

  std::atomic<std::vector<std::function<void()>>*> capturing_{nullptr};  // the kernels of the body being captured
  std::thread::id capture_thread_;
  int64_t captures_ = 0, replays_ = 0;
  int64_t available_ = -1;  // memory_available: unknown unless a test sets it
  HostBackedAllocator alloc_{*this};
  FakeCompileBackend compile_;
  const compile::CompileBackend* previous_compile_ = nullptr;
  std::array<ops::KernelFn, kOps> saved_{}, cpu_{};
  backend::DeviceInterface* previous_ = nullptr;
  ops::KernelPrecondition previous_rules_ = nullptr;
  std::vector<std::pair<std::string, ops::KernelFn>> saved_linear_q_;
  mutable std::mutex mu_;
  std::vector<FakeOpRecord> records_;
  std::vector<FakeScheduleEvent> schedule_;
  int64_t fences_ = 0;
  void log(const FakeScheduleEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    schedule_.push_back(e);
  }
};

}  // namespace diffq::testing
