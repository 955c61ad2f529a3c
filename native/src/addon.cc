#include <napi.h>
#include <ucp/api/ucp.h>

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  unsigned major, minor, release;
  ucp_get_version(&major, &minor, &release);
  exports.Set("ucxVersion", Napi::String::New(env, std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release)));
  return exports;
}
NODE_API_MODULE(gdrpc, Init)
