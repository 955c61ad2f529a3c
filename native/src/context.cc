#include "context.h"
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <sstream>
#include "memory.h"
#include "state.h"
#include "status.h"
#include "worker.h"

namespace gdrpc {

Napi::Function Context::Define(Napi::Env env) {
  return DefineClass(env, "Context", {
    InstanceMethod<&Context::LibraryPath>("libraryPath"),
    InstanceMethod<&Context::Transports>("transports"),
    InstanceMethod<&Context::MemoryTypes>("memoryTypes"),
    InstanceMethod<&Context::Close>("close"),
  });
}

static uint64_t FeatureBits(Napi::Array features) {
  uint64_t bits = 0;
  for (uint32_t i = 0; i < features.Length(); ++i) {
    std::string name = features.Get(i).As<Napi::String>().Utf8Value();
    if (name == "tag") bits |= UCP_FEATURE_TAG;
    else if (name == "rma") bits |= UCP_FEATURE_RMA;
    else if (name == "am") bits |= UCP_FEATURE_AM;
    else if (name == "wakeup") bits |= UCP_FEATURE_WAKEUP;
  }
  return bits;
}

Context::Context(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Context>(info) {
  Napi::Env env = info.Env();
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) ThrowStatus(env, status, "ucp_config_read");
  Napi::Object overrides = info[1].As<Napi::Object>();
  Napi::Array keys = overrides.GetPropertyNames();
  for (uint32_t i = 0; i < keys.Length(); ++i) {
    std::string key = keys.Get(i).As<Napi::String>().Utf8Value();
    std::string value = overrides.Get(key).As<Napi::String>().Utf8Value();
    status = ucp_config_modify(config, key.c_str(), value.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      ThrowStatus(env, status, "ucp_config_modify(" + key + "=" + value + ")");
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = FeatureBits(info[0].As<Napi::Array>());
  params.mt_workers_shared = 0;  // one thread drives each worker
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) {
    context_ = nullptr;
    ThrowStatus(env, status, "ucp_init");
  }
  State* state = State::Of(env);
  state->counters.contexts++;
  state->contexts.insert(this);
}

Context::~Context() {
  FinalizerScope scope(State::Of(Env()));
  Destroy();
}

void Context::CheckOpen(Napi::Env env) const {
  if (context_ == nullptr) Throw(env, "FAILED_PRECONDITION", "the context is closed");
}

Napi::Value Context::LibraryPath(const Napi::CallbackInfo& info) {
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&ucp_init_version), &where) == 0 || where.dli_fname == nullptr) {
    return info.Env().Undefined();
  }
  char resolved[PATH_MAX];
  const char* path = realpath(where.dli_fname, resolved) != nullptr ? resolved : where.dli_fname;
  return Napi::String::New(info.Env(), path);
}

// The resource lines of ucp_context_print_info end in "transport/device"; there is no query API
// for the context's resources.
Napi::Value Context::Transports(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) Throw(env, "INTERNAL", "open_memstream failed");
  ucp_context_print_info(context_, stream);
  fclose(stream);
  std::istringstream lines(std::string(text, size));
  free(text);
  Napi::Array result = Napi::Array::New(env);
  std::string line;
  uint32_t count = 0;
  while (std::getline(lines, line)) {
    if (line.find("resource") == std::string::npos) continue;
    size_t end = line.find_last_not_of(" \t\r");
    if (end == std::string::npos) continue;
    size_t start = line.find_last_of(" \t", end);
    std::string resource = line.substr(start == std::string::npos ? 0 : start + 1, end - start);
    size_t slash = resource.find('/');
    if (slash == std::string::npos) continue;
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("transport", resource.substr(0, slash));
    entry.Set("device", resource.substr(slash + 1));
    result.Set(count++, entry);
  }
  return result;
}

Napi::Value Context::MemoryTypes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  ucs_status_t status = ucp_context_query(context_, &attr);
  if (status != UCS_OK) ThrowStatus(env, status, "ucp_context_query");
  Napi::Array result = Napi::Array::New(env);
  uint32_t count = 0;
  for (int type = UCS_MEMORY_TYPE_HOST; type < UCS_MEMORY_TYPE_LAST; ++type) {
    if (attr.memory_types & (1ull << type)) result.Set(count++, MemoryTypeName(static_cast<ucs_memory_type_t>(type)));
  }
  return result;
}

Napi::Value Context::Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (context_ == nullptr) return env.Undefined();
  if (!workers_.empty() || !regions_.empty()) {
    Throw(env, "FAILED_PRECONDITION", "the context still has " + std::to_string(workers_.size()) + " open worker(s) and " +
          std::to_string(regions_.size()) + " mapped region(s); close them first");
  }
  Destroy();
  return env.Undefined();
}

void Context::Destroy() {
  if (context_ == nullptr) return;
  std::set<Worker*> workers = workers_;
  for (Worker* worker : workers) worker->Destroy(false);
  std::set<MemoryRegion*> regions = regions_;
  for (MemoryRegion* region : regions) region->Destroy();
  ucp_cleanup(context_);
  context_ = nullptr;
  State* state = State::Of(Env());
  state->counters.contexts--;
  state->contexts.erase(this);
}

Napi::Value UcxVersion(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), ucp_get_version_string());
}

}  // namespace gdrpc
