// A UCP listener on a socket address. Connection requests are queued by the UCX callback; on the
// main thread JS decides (accept -> a server-side Endpoint, or ucp_listener_reject).
#pragma once
#include <napi.h>
#include <ucp/api/ucp.h>
#include <sys/types.h>
#include <string>

namespace gdrpc {

class Worker;

class Listener : public Napi::ObjectWrap<Listener> {
 public:
  /** How long a close may spend ending accepted connections UCX has not delivered (listener_drain.h). */
  static constexpr int kDrainBudgetMs = 500;
  static Napi::Function Define(Napi::Env env);
  /** new Listener(worker, host, port, handler(kind, ...)): kinds 'request' (-> boolean), 'connection', 'error'. */
  explicit Listener(const Napi::CallbackInfo& info);
  ~Listener() override;

  void OnConnectionRequest(Napi::Env env, ucp_conn_request_h request);
  void Destroy(bool fromJs);
  /** The listening socket's inode (0: not found) and whether the worker's guard is on it. */
  ino_t socket() const { return socket_; }
  bool guarded() const { return guarded_; }

 private:
  Napi::Value GetHost(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), host_); }
  Napi::Value GetPort(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), port_); }
  Napi::Value GetGuarded(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), guarded_); }
  Napi::Value Close(const Napi::CallbackInfo& info);
  static void OnConnection(ucp_conn_request_h request, void* arg);

  Worker* worker_ = nullptr;
  Napi::ObjectReference workerRef_;
  Napi::FunctionReference handler_;
  ucp_listener_h listener_ = nullptr;
  bool inRequest_ = false;      // JS decides on a connection request now (the accept callback)
  bool closeDeferred_ = false;  // ... and closed the listener meanwhile: done once it returns
  std::string host_;
  unsigned port_ = 0;
  ino_t socket_ = 0;
  bool guarded_ = false;
};

}  // namespace gdrpc
