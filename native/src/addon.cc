// Registers the binding's classes and functions; each concept lives in its own file.
#include <napi.h>
#include "close_on_exec.h"
#include "context.h"
#include "cuda.h"
#include "endpoint.h"
#include "listener.h"
#include "memory.h"
#include "rkey.h"
#include "state.h"
#include "status.h"
#include "thread_clock.h"
#include "wakeup.h"
#include "worker.h"

using namespace gdrpc;

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  State* state = new State();
  env.SetInstanceData<State>(state);
  // Runs before the instance data is freed: every live UCX object is closed, children first, and
  // the environment waits until their event-loop handles are released (State::releasing).
  napi_add_async_cleanup_hook(env, OnTeardown, state, nullptr);

  Napi::Function endpoint = Endpoint::Define(env);
  Napi::Function region = MemoryRegion::Define(env);
  state->endpointClass = Napi::Persistent(endpoint);
  state->regionClass = Napi::Persistent(region);
  exports.Set("Context", Context::Define(env));
  exports.Set("Worker", Worker::Define(env));
  exports.Set("Listener", Listener::Define(env));
  exports.Set("Endpoint", endpoint);
  exports.Set("MemoryRegion", region);
  exports.Set("RemoteKey", RemoteKey::Define(env));
  exports.Set("ucxVersion", Napi::Function::New(env, UcxVersion));
  exports.Set("nativeStats", Napi::Function::New(env, NativeStats));
  exports.Set("addressOf", Napi::Function::New(env, AddressOf));
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass));
  exports.Set("threadCpuMs", Napi::Function::New(env, ThreadCpuMs));
  exports.Set("threadOwnMs", Napi::Function::New(env, ThreadOwnMs));
  exports.Set("closeOnExec", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), CloseOnExec());
  }));
  exports.Set("cuda", cuda::Define(env));
  exports.Set("wakeup", Napi::String::New(env, Wakeup::kKind));
  return exports;
}

NODE_API_MODULE(gdrpc, Init)
