#include "rkey.h"
#include "endpoint.h"
#include "state.h"
#include "status.h"

namespace gdrpc {

Napi::Function RemoteKey::Define(Napi::Env env) {
  return DefineClass(env, "RemoteKey", {InstanceMethod<&RemoteKey::Close>("close")});
}

RemoteKey::RemoteKey(const Napi::CallbackInfo& info) : Napi::ObjectWrap<RemoteKey>(info) {
  Napi::Env env = info.Env();
  endpoint_ = Endpoint::Unwrap(info[0].As<Napi::Object>());
  endpoint_->CheckUsable(env);
  Napi::TypedArray packed = info[1].As<Napi::TypedArray>();
  const uint8_t* data = static_cast<const uint8_t*>(packed.ArrayBuffer().Data()) + packed.ByteOffset();
  ucs_status_t status = ucp_ep_rkey_unpack(endpoint_->handle(), data, &rkey_);
  if (status != UCS_OK) {
    rkey_ = nullptr;
    ThrowStatus(env, status, "ucp_ep_rkey_unpack");
  }
  endpointRef_ = Napi::Persistent(info[0].As<Napi::Object>());
  endpoint_->AddRkey(this);
  State::Of(env)->counters.rkeys++;
}

RemoteKey::~RemoteKey() { Destroy(); }

void RemoteKey::CheckOpen(Napi::Env env) const {
  if (rkey_ == nullptr) Throw(env, "FAILED_PRECONDITION", "the remote key is closed (or its endpoint is)");
}

Napi::Value RemoteKey::Close(const Napi::CallbackInfo& info) {
  Destroy();
  return info.Env().Undefined();
}

void RemoteKey::Destroy() {
  if (rkey_ == nullptr) return;
  ucp_rkey_destroy(rkey_);
  rkey_ = nullptr;
  endpoint_->RemoveRkey(this);
  State::Of(Env())->counters.rkeys--;
}

}  // namespace gdrpc
