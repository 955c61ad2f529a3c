// gdrpc_env.node: sets variables in the process's environment (setenv), for core/native.ts in a
// worker thread. There process.env is the thread's own copy, which getenv never reads, and UCX
// reads its settings with getenv: when libucs loads (the first load of gdrpc.node: UCX_MEM_EVENTS)
// and in every ucp_config_read. A separate addon, linked without UCX: gdrpc.node's dependencies
// read the environment as it is loaded, before any of its code runs.
#include <napi.h>
#include <cstdlib>

namespace {

// setDefaults({ name: value }): sets each variable the process's environment does not have yet.
Napi::Value SetDefaults(const Napi::CallbackInfo& info) {
  Napi::Object values = info[0].As<Napi::Object>();
  Napi::Array names = values.GetPropertyNames();
  for (uint32_t i = 0; i < names.Length(); ++i) {
    std::string name = names.Get(i).As<Napi::String>().Utf8Value();
    std::string value = values.Get(name).As<Napi::String>().Utf8Value();
    setenv(name.c_str(), value.c_str(), 0);
  }
  return info.Env().Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("setDefaults", Napi::Function::New(env, SetDefaults));
  return exports;
}

}  // namespace

NODE_API_MODULE(gdrpc_env, Init)
