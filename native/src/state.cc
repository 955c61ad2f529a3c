#include "state.h"
#include <unistd.h>
#include "context.h"

namespace gdrpc {

State::~State() {
  if (schedstatFd >= 0) close(schedstatFd);
}

Napi::Value NativeStats(const Napi::CallbackInfo& info) {
  const Counters& c = State::Of(info.Env())->counters;
  Napi::Object stats = Napi::Object::New(info.Env());
  stats.Set("contexts", static_cast<double>(c.contexts));
  stats.Set("workers", static_cast<double>(c.workers));
  stats.Set("endpoints", static_cast<double>(c.endpoints));
  stats.Set("listeners", static_cast<double>(c.listeners));
  stats.Set("regions", static_cast<double>(c.regions));
  stats.Set("rkeys", static_cast<double>(c.rkeys));
  stats.Set("requests", static_cast<double>(c.requests));
  return stats;
}

void CloseAll(State* state) {
  state->exiting = true;
  std::set<Context*> contexts = state->contexts;
  for (Context* context : contexts) context->Destroy();
}

void State::Released() {
  if (--releasing > 0 || teardown == nullptr) return;
  napi_async_cleanup_hook_handle done = teardown;
  teardown = nullptr;
  napi_remove_async_cleanup_hook(done);
}

void OnTeardown(napi_async_cleanup_hook_handle handle, void* arg) {
  State* state = static_cast<State*>(arg);
  // Node calls this from its own frames, built without exceptions: one that left here would end
  // the process (std::terminate) for a thread's teardown. Nothing here may run JS, and there is no
  // one to report to.
  try {
    CloseAll(state);
  } catch (...) {
  }
  if (state->releasing == 0) {
    napi_remove_async_cleanup_hook(handle);
    return;
  }
  state->teardown = handle;
}

}  // namespace gdrpc
