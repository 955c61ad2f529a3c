#include "listener.h"
#include "close_on_exec.h"
#include "listener_drain.h"
#include "port_guard.h"
#include "conn_request_check.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <cstring>
#include "state.h"
#include "status.h"
#include "worker.h"

namespace gdrpc {

Napi::Function Listener::Define(Napi::Env env) {
  return DefineClass(env, "Listener", {
    InstanceAccessor<&Listener::GetHost>("host"),
    InstanceAccessor<&Listener::GetPort>("port"),
    InstanceAccessor<&Listener::GetGuarded>("guarded"),
    InstanceMethod<&Listener::Close>("close"),
  });
}

Listener::Listener(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Listener>(info) {
  Napi::Env env = info.Env();
  worker_ = Worker::Unwrap(info[0].As<Napi::Object>());
  worker_->CheckOpen(env);
  std::string host = info[1].As<Napi::String>().Utf8Value();
  uint32_t port = info[2].As<Napi::Number>().Uint32Value();
  sockaddr_storage address{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    // UCX 1.22 accepts the connection and then writes the client's IPv6 address into a tcp
    // endpoint sized for the IPv4 one of its own transport (uct_tcp_ep_set_dest_addr): heap
    // corruption, the process aborting in malloc on the next connection or two; and IPv4 clients
    // of a dual-stack "::" listener never connected (docs/binding.md "Listener").
    Throw(env, "INVALID_ARGUMENT", "listener host must be a numeric IPv4 address, got " + host +
                                       " (with UCX 1.22 a client connecting over IPv6 corrupts the server's heap)");
  } else {
    Throw(env, "INVALID_ARGUMENT", "listener host must be a numeric IPv4 address, got " + host);
  }
  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
  params.sockaddr.addrlen = sizeof(address);
  params.conn_handler.cb = OnConnection;
  params.conn_handler.arg = this;
  ucs_status_t status = ucp_listener_create(worker_->handle(), &params, &listener_);
  if (status != UCS_OK) {
    listener_ = nullptr;
    const std::string where = host + ":" + std::to_string(port);
    // UCX says BUSY where bind() said EADDRINUSE (its own log line says so, on stderr).
    if (status == UCS_ERR_BUSY) {
      throw MakeError(env, "UNAVAILABLE", "ucp_listener_create on " + where + ": " + where + " is in use by another socket", StatusName(status));
    }
    ThrowStatus(env, status, "ucp_listener_create on " + where);
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  status = ucp_listener_query(listener_, &attr);
  if (status != UCS_OK) {
    ucp_listener_destroy(listener_);
    listener_ = nullptr;
    ThrowStatus(env, status, "ucp_listener_query");
  }
  std::tie(host_, port_) = DescribeAddress(attr.sockaddr);
  // A program this process starts must not keep the port (close_on_exec.h).
  CloseOnExec();
  // The worker's allowed peers hold for its listeners too: a peer outside them never completes a
  // handshake here, so UCX reads nothing it sends (port_guard.h).
  socket_ = ListeningSocketOn(host_, port_);
  guarded_ = worker_->GuardPort(socket_);
  if (worker_->guard().has_value() && !guarded_) {
    ucp_listener_destroy(listener_);
    listener_ = nullptr;
    Throw(env, "INTERNAL", "allowedPeers: could not attach the socket filter to the listener on " + host_ + ":" + std::to_string(port_));
  }
  workerRef_ = Napi::Persistent(info[0].As<Napi::Object>());
  handler_ = Napi::Persistent(info[3].As<Napi::Function>());
  State::Of(env)->counters.listeners++;
  worker_->AddListener(this);
}

Listener::~Listener() { Destroy(false); }

void Listener::OnConnection(ucp_conn_request_h request, void* arg) {
  Listener* self = static_cast<Listener*>(arg);
  Event event{Event::ConnectionRequest};
  event.listener = self;
  event.connRequest = request;
  self->worker_->Queue(event);
}

void Listener::OnConnectionRequest(Napi::Env env, ucp_conn_request_h request) {
  if (listener_ == nullptr) return;
  if (!State::Of(env)->JsAllowed()) {
    ucp_listener_reject(listener_, request);
    return;
  }
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  std::pair<std::string, unsigned> client{"", 0};
  const bool queried = ucp_conn_request_query(request, &attr) == UCS_OK;
  if (queried) client = DescribeAddress(attr.client_address);
  // The client's own bytes in the request, before anything parses them (conn_request_check.h):
  // UCX aborts the process on some when it makes an endpoint.
  std::string why;
  const RequestCheck check = queried ? CheckConnRequest(request, attr.client_address, worker_->AddressVersion(), &why) : RequestCheck::Unchecked;
  worker_->CountRequestCheck(check);
  if (check == RequestCheck::Invalid) {
    ucp_listener_reject(listener_, request);
    handler_.Call({Napi::String::New(env, "error"),
                   MakeError(env, "INVALID_ARGUMENT", "connection request from " + client.first + ":" + std::to_string(client.second) +
                                                          " refused before UCX read it: it carries " + why).Value()});
    if (closeDeferred_) Destroy(true);
    return;
  }
  Napi::Value accepted;
  // The accept callback may close this listener: the close waits until the request it is
  // deciding on is rejected (UCX needs the listener for that), then runs.
  inRequest_ = true;
  try {
    accepted = handler_.Call({Napi::String::New(env, "request"), Napi::String::New(env, client.first),
                              Napi::Number::New(env, client.second)});
  } catch (const Napi::Error& error) {
    inRequest_ = false;
    ucp_listener_reject(listener_, request);
    handler_.Call({Napi::String::New(env, "error"), error.Value()});
    if (closeDeferred_) Destroy(true);
    return;
  }
  inRequest_ = false;
  if (closeDeferred_ || !accepted.ToBoolean()) {
    ucp_listener_reject(listener_, request);
    if (closeDeferred_) Destroy(true);
    return;
  }
  Napi::Object endpoint;
  try {
    endpoint = State::Of(env)->endpointClass.New({workerRef_.Value(), Napi::External<ucp_conn_request>::New(env, request),
                                                   Napi::String::New(env, client.first + ":" + std::to_string(client.second))});
  } catch (const Napi::Error& error) {
    handler_.Call({Napi::String::New(env, "error"), error.Value()});
    return;
  }
  handler_.Call({Napi::String::New(env, "connection"), endpoint});
}

Napi::Value Listener::Close(const Napi::CallbackInfo& info) {
  Destroy(true);
  return info.Env().Undefined();
}

void Listener::Destroy(bool fromJs) {
  if (listener_ == nullptr) return;
  if (inRequest_) {
    closeDeferred_ = true;  // OnConnectionRequest finishes it
    return;
  }
  // Connections accepted on the port whose request UCX has not delivered would reach the freed
  // listener when their bytes come (openucx/ucx#11087): they are ended at the socket first, and
  // what UCX delivers meanwhile is rejected. Live endpoints' connections are left alone.
  auto reject = [this]() {
    worker_->Pass();
    worker_->CheckWatch();
    for (ucp_conn_request_h request : worker_->Forget(nullptr, this)) ucp_listener_reject(listener_, request);
  };
  DrainResult drained = DrainAccepted(port_, worker_->EndpointPeers(), reject, kDrainBudgetMs);
  reject();
  ucp_listener_destroy(listener_);
  worker_->CountDrain(drained.shut, drained.found && !drained.settled);
  // The passes may have completed other operations: the worker settles them on its next turn.
  if (drained.passes > 0) worker_->Kick();
  listener_ = nullptr;
  worker_->RemoveListener(this);
  State::Of(Env())->counters.listeners--;
  handler_.Reset();
}

}  // namespace gdrpc
