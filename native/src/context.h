// The UCP context: configuration (ucp_config_read + ucp_config_modify), features, and what UCX
// found (version, library path, transports, memory types).
#pragma once
#include <napi.h>
#include <ucp/api/ucp.h>
#include <set>

namespace gdrpc {

class Worker;
class MemoryRegion;

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Function Define(Napi::Env env);
  /** new Context(features: string[], config: Record<string,string>) */
  explicit Context(const Napi::CallbackInfo& info);
  ~Context() override;

  ucp_context_h handle() const { return context_; }
  void CheckOpen(Napi::Env env) const;
  void AddWorker(Worker* worker) { workers_.insert(worker); }
  void RemoveWorker(Worker* worker) { workers_.erase(worker); }
  void AddRegion(MemoryRegion* region) { regions_.insert(region); }
  void RemoveRegion(MemoryRegion* region) { regions_.erase(region); }
  size_t regionCount() const { return regions_.size(); }
  /** Closes workers and regions, then the context (exit hook and finalizer). */
  void Destroy();

 private:
  Napi::Value LibraryPath(const Napi::CallbackInfo& info);
  Napi::Value Transports(const Napi::CallbackInfo& info);
  Napi::Value MemoryTypes(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  ucp_context_h context_ = nullptr;
  std::set<Worker*> workers_;
  std::set<MemoryRegion*> regions_;
};

/** ucxVersion(): the version of the loaded libucp, e.g. "1.22.0". */
Napi::Value UcxVersion(const Napi::CallbackInfo& info);

}  // namespace gdrpc
