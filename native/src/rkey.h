// A remote key unpacked for one endpoint (ucp_ep_rkey_unpack); destroyed before its endpoint closes.
#pragma once
#include <napi.h>
#include <ucp/api/ucp.h>

namespace gdrpc {

class Endpoint;

class RemoteKey : public Napi::ObjectWrap<RemoteKey> {
 public:
  static Napi::Function Define(Napi::Env env);
  /** new RemoteKey(endpoint, packed: Uint8Array) */
  explicit RemoteKey(const Napi::CallbackInfo& info);
  ~RemoteKey() override;

  ucp_rkey_h handle() const { return rkey_; }
  Endpoint* endpoint() const { return endpoint_; }
  void CheckOpen(Napi::Env env) const;
  void Destroy();

 private:
  Napi::Value Close(const Napi::CallbackInfo& info);

  Endpoint* endpoint_ = nullptr;
  Napi::ObjectReference endpointRef_;
  ucp_rkey_h rkey_ = nullptr;
};

}  // namespace gdrpc
