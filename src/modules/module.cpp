#include "modules/module.h"

#include <algorithm>

#include "diffq/error.h"

namespace diffq {

namespace {
thread_local CaptureHook* g_capture = nullptr;
}

CaptureHook* CaptureHook::current() { return g_capture; }
void CaptureHook::set_current(CaptureHook* h) { g_capture = h; }

void Module::register_parameter(std::string name, Parameter& p) {
  if (p.name.empty()) p.name = name;
  params_.emplace_back(std::move(name), &p);
}

void Module::collect(const std::string& prefix,
                     std::vector<std::pair<std::string, Parameter*>>& out) const {
  for (const auto& [n, p] : params_) out.emplace_back(prefix + n, p);
  for (const auto& [n, m] : children_) m->collect(prefix + n + ".", out);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Parameter*>> out;
  collect("", out);
  // Dotted names for error messages: a name only ever grows into a longer path ending with it, so
  // asking a submodule (whose paths are suffixes of the root's) never shortens a full name.
  for (auto& [n, p] : out)
    if (n.size() > p->name.size() && n.compare(n.size() - p->name.size(), p->name.size(), p->name) == 0 &&
        (p->name.empty() || n[n.size() - p->name.size() - 1] == '.'))
      p->name = n;
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  std::function<void(const std::string&, const Module*)> walk = [&](const std::string& prefix,
                                                                    const Module* m) {
    out.emplace_back(prefix, const_cast<Module*>(m));
    for (const auto& [n, c] : m->children_) walk(prefix.empty() ? n : prefix + "." + n, c);
  };
  walk("", this);
  return out;
}

Module* Module::find_module(const std::string& dotted) {
  if (dotted.empty()) return this;
  const size_t dot = dotted.find('.');
  const std::string head = dotted.substr(0, dot);
  for (auto& [n, c] : children_)
    if (n == head) return dot == std::string::npos ? c : c->find_module(dotted.substr(dot + 1));
  return nullptr;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += shape_numel(p->shape());
  return n;
}

void Module::remove_hook(const ModuleHook* h) {
  hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(),
                              [h](const std::shared_ptr<ModuleHook>& x) { return x.get() == h; }),
               hooks_.end());
}

void Module::compile(const compile::CompileOptions&) {
  fail("compile", type_name_, " has no compiled forward; wrap its forward in compile::CompiledModule");
}

void Module::compile_repeated_blocks(const compile::CompileOptions&) {
  fail("compile", type_name_, " defines no repeated blocks to compile");
}

}  // namespace diffq
