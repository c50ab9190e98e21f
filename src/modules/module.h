// Module tree. Parameter names are the dotted paths of the Diffusers/transformers state dict
// ("transformer_blocks.0.attn.to_q.weight"), so loading is by name. Every forward goes through
// Module::call, the one hook point: offloading (onload before, offload after, prefetch), compile's
// region boundaries and progress reporting attach there.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compile/compile_options.h"
#include "modules/parameter.h"

namespace diffq {

class Module;

// Compile's capture (compile/capture.cpp) installs one of these on its thread while it traces a
// forward; eager calls only pay one thread-local read. Module calls it cannot replay (hooks on a
// module that is not a one-input layer) make it throw; one-input layers whose forward does not trace
// (quantized weights, or dense ones packed for the device's GEMM) or that carry hooks (offloading)
// become opaque nodes that call the real module.
class CaptureHook {
 public:
  virtual ~CaptureHook() = default;
  virtual void on_call(Module& m) = 0;
  virtual bool wants_opaque(Module& m, const Tensor& x) = 0;  // x: the (traced) input
  virtual Tensor record_opaque(Module& m, const Tensor& x, std::function<Tensor(Module&, const Tensor&)> run) = 0;
  static CaptureHook* current();
  static void set_current(CaptureHook* h);
};

class ModuleHook {
 public:
  virtual ~ModuleHook() = default;
  virtual void pre_forward(Module&) {}
  virtual void post_forward(Module&) {}
};

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The class name as Diffusers spells it ("Linear", "FluxTransformerBlock").
  const std::string& type_name() const { return type_name_; }

  // Recursive, dotted names, registration order.
  std::vector<std::pair<std::string, Parameter*>> named_parameters() const;
  std::vector<std::pair<std::string, Module*>> named_modules() const;  // includes itself as ""
  const std::vector<std::pair<std::string, Module*>>& children() const { return children_; }
  const std::vector<std::pair<std::string, Parameter*>>& own_parameters() const { return params_; }
  Module* find_module(const std::string& dotted);  // nullptr when absent
  int64_t num_parameters() const;                  // elements (logical, quantized included)

  // Compilation (compile/): models that support it override these; the default is an Error naming the
  // module. compile: the whole forward; compile_repeated_blocks: one graph per kind of repeated block.
  virtual void compile(const compile::CompileOptions& o);
  virtual void compile_repeated_blocks(const compile::CompileOptions& o);

  // Hooks run in insertion order before forward and in reverse order after it.
  void add_hook(std::shared_ptr<ModuleHook> h) { hooks_.push_back(std::move(h)); }
  void remove_hook(const ModuleHook* h);
  void clear_hooks() { hooks_.clear(); }
  const std::vector<std::shared_ptr<ModuleHook>>& hooks() const { return hooks_; }

 protected:
  // Children and parameters are members of the subclass; registration records their names.
  void register_module(std::string name, Module& m) { children_.emplace_back(std::move(name), &m); }
  void register_parameter(std::string name, Parameter& p);

  // The one forward path: subclasses implement operator() as `return call([&] { ...forward... });`.
  template <class F>
  decltype(auto) call(F&& forward) {
    if (CaptureHook* c = CaptureHook::current()) c->on_call(*this);
    for (auto& h : hooks_) h->pre_forward(*this);
    decltype(auto) out = forward();
    for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) (*it)->post_forward(*this);
    return out;
  }

  // One-input layers (Linear, norms, Conv2d, Embedding): as call(), but while compile captures, the
  // call may be recorded as an opaque node that runs this module (hooks included) at replay.
  template <class M>
  Tensor call1(const Tensor& x, Tensor (M::*fwd)(const Tensor&)) {
    if (CaptureHook* c = CaptureHook::current(); c && c->wants_opaque(*this, x))
      return c->record_opaque(*this, x, [fwd](Module& m, const Tensor& in) {
        M& self = static_cast<M&>(m);
        return static_cast<Module&>(self).call([&] { return (self.*fwd)(in); });
      });
    M& self = static_cast<M&>(*this);
    return call([&] { return (self.*fwd)(x); });
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out) const;
  std::string type_name_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::pair<std::string, Parameter*>> params_;
  std::vector<std::shared_ptr<ModuleHook>> hooks_;
};

// Children named "0", "1", ... (torch.nn.ModuleList).
template <class M>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  M& push_back(std::unique_ptr<M> m) {
    M& ref = *m;
    register_module(std::to_string(items_.size()), ref);
    items_.push_back(std::move(m));
    return ref;
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) { return *items_[i]; }
  const M& operator[](size_t i) const { return *items_[i]; }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }

 private:
  std::vector<std::unique_ptr<M>> items_;
};

}  // namespace diffq
