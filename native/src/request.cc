#include "request.h"
#include "endpoint.h"
#include "memory.h"
#include "state.h"
#include "status.h"
#include "worker.h"

namespace gdrpc {

Span ResolveSpan(Napi::Env env, Napi::Value target, Napi::Value offsetValue, Napi::Value lengthValue) {
  Span span;
  size_t offset = static_cast<size_t>(offsetValue.As<Napi::Number>().Int64Value());
  size_t length = static_cast<size_t>(lengthValue.As<Napi::Number>().Int64Value());
  uint8_t* base = nullptr;
  size_t size = 0;
  if (target.IsTypedArray()) {
    Napi::TypedArray view = target.As<Napi::TypedArray>();
    base = static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
    size = view.ByteLength();
  } else if (target.IsDataView()) {
    Napi::DataView view = target.As<Napi::DataView>();
    base = static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
    size = view.ByteLength();
  } else if (target.IsArrayBuffer()) {
    Napi::ArrayBuffer buffer = target.As<Napi::ArrayBuffer>();
    base = static_cast<uint8_t*>(buffer.Data());
    size = buffer.ByteLength();
  } else if (MemoryRegion* region = MemoryRegion::From(env, target)) {
    region->CheckOpen(env);
    base = static_cast<uint8_t*>(region->address());
    size = region->length();
    span.memh = region->memh();
    span.memoryType = region->memoryType();
    span.region = region;
  } else {
    Throw(env, "INVALID_ARGUMENT", "expected an ArrayBufferView, an ArrayBuffer or a MemoryRegion");
  }
  // The TypeScript layer checks ranges; this check only keeps a bad call from touching wild memory.
  if (offset > size || length > size - offset) Throw(env, "INVALID_ARGUMENT", "range outside the buffer");
  span.address = base + offset;
  span.length = length;
  span.holder = target;
  return span;
}

static void OnSendDone(void* request, ucs_status_t status, void* user) {
  Request* r = static_cast<Request*>(user);
  r->status = status;
  r->worker->Queue(r);
}

static void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  Request* r = static_cast<Request*>(user);
  r->status = status;
  if (info != nullptr) r->recvInfo = *info;
  r->worker->Queue(r);
}

Request::Request(Worker* worker, Endpoint* endpoint, RequestKind kind, uint32_t id, Napi::Env env)
    : worker(worker), endpoint(endpoint), kind(kind), id(id), env(env) {
  State::Of(env)->counters.requests++;
}

Request::~Request() {
  if (region != nullptr) region->Release();
  State::Of(env)->counters.requests--;
}

void Request::Prepare(ucp_request_param_t& param, const Span* span, bool hold) {
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = this;
  if (kind == RequestKind::Recv) {
    param.cb.recv = OnRecvDone;
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
    param.recv_info.tag_info = &recvInfo;
  } else {
    param.cb.send = OnSendDone;
  }
  // Tag sends from host memory only. An RMA operation's protocol also depends on the remote key
  // (the peer's memory); a send from GPU memory on which GPU it is (UCX selects by device too), and
  // there a wrong description could hide a staged transfer from noStaging.
  if (describe && kind == RequestKind::Send && span != nullptr && endpoint != nullptr &&
      span->memoryType == UCS_MEMORY_TYPE_HOST) {
    describedLength = span->length;
    if (const std::string* known = endpoint->Described(span->length)) remembered = *known;
  }
  // An operation completed inside the *_nbx call leaves no request to query: it is asked for one
  // unless the endpoint has a description of a send of the same length. A forced request sends a
  // send UCX would have finished inside the call through progress and the completion queue
  // (docs/binding.md "Protocol reports": a quarter of a described 4 KiB send's CPU).
  if (describe && !remembered) param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  if (span == nullptr) return;
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.memory_type = span->memoryType;
  device = span->memoryType != UCS_MEMORY_TYPE_HOST && span->memoryType != UCS_MEMORY_TYPE_UNKNOWN;
  if (span->memh != nullptr) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = span->memh;
  }
  if (span->region != nullptr) {
    region = span->region;
    region->Acquire();
  }
  if (hold) holder = Napi::Persistent(span->holder);
}

Napi::Value Request::Start(ucs_status_ptr_t result, const char* name, bool quiet) {
  // A copy: the paths below may Finish (delete) this request before they return.
  Napi::Env env = this->env;
  what = name;
  const bool done = result == nullptr || UCS_PTR_IS_ERR(result);
  if (done) status = result == nullptr ? UCS_OK : UCS_PTR_STATUS(result);
  if (!State::Of(env)->JsAllowed()) {
    // An exit hook or a finalizer (a close at teardown): there is no HandleScope, so no JS value
    // may be made; nobody waits on the outcome.
    if (done) Finish(env);
    else Register(result);
    return Napi::Value();
  }
  if (!report.IsEmpty()) {
    // ReportInto: true when done inside the call (slot written), false while pending; an
    // immediate failure is thrown.
    if (!done) {
      Register(result);
      return Napi::Boolean::New(env, false);
    }
    Napi::Value error = status == UCS_OK ? Napi::Value() : Failure(env);
    if (status == UCS_OK) WriteSlot();
    settled = true;
    report.Reset();
    Finish(env);
    if (!error.IsEmpty()) throw Napi::Error(env, error);
    return Napi::Boolean::New(env, true);
  }
  if (quiet && result == nullptr) {
    // Completed inside the call: settled, nothing to resolve.
    settled = true;
    Finish(env);
    return env.Undefined();
  }
  if (result == nullptr && describe && remembered) {
    // Completed inside the call: described by the endpoint's description of its key.
    protocol = *remembered;
    describedFromMemory = true;
    worker->CountDescribedInline();
  }
  deferred.emplace(Napi::Promise::Deferred::New(env));
  Napi::Promise promise = deferred->Promise();
  if (done) Finish(env);
  else Register(result);
  return promise;
}

void Request::Register(ucs_status_ptr_t result) {
  ucxRequest = result;
  if (describe) protocol = QueryProtocol();
  pending = true;
  worker->AddRequest(this);
  if (endpoint != nullptr && kind != RequestKind::Close) endpoint->AddRequest(this);
  worker->KickOutsideWake();
}

void Request::Detach(Napi::Env env, const char* code, const std::string& message, ucs_status_t cause) {
  if (settled) return;
  settled = true;
  report.Reset();  // ReportInto: a receive this side cancelled (cancel(), close) tells nobody
  if (!State::Of(env)->JsAllowed() || !deferred) return;
  deferred->Reject(MakeError(env, code, message, StatusName(cause), Stack::Skip).Value());
}

void Request::ReportInto(Napi::Uint32Array target, Napi::Function callback) {
  slot = target.Data();
  slotHolder = Napi::Persistent(static_cast<Napi::Value>(target));
  report = Napi::Persistent(callback);
}

void Request::WriteSlot() const { WriteTagWords(slot, recvInfo.sender_tag, recvInfo.length); }

Napi::Value Request::Failure(Napi::Env env) const {
  std::string name = std::string(what);
  // Failing inside its *_nbx call, the error is thrown on its caller's stack; once pending, not.
  const Stack stack = pending ? Stack::Skip : Stack::Record;
  if (!pending && kind == RequestKind::Send) {
    // UCX refused the send outright (the endpoint had already failed): nothing left this process,
    // which lets a caller retry safely.
    Napi::Error error = StatusError(env, status, name, stack);
    Napi::Object details = Napi::Object::New(env);
    details.Set("unsent", true);
    error.Value().Set("details", details);
    return error.Value();
  }
  if (endpoint != nullptr && endpoint->failed()) {
    return MakeError(env, "UNAVAILABLE", name + ": endpoint to " + endpoint->peer() + " failed: " +
                     ucs_status_string(endpoint->failure()), StatusName(endpoint->failure()), stack).Value();
  }
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    Napi::Error error = MakeError(env, "INVALID_ARGUMENT", name + ": message truncated (the receive buffer is smaller "
                                  "than the message)", StatusName(status), stack);
    // Which message it was, where UCX said (a receiver tells its sender so: the dispatcher).
    if (kind == RequestKind::Recv && recvInfo.sender_tag != 0) {
      Napi::Object details = Napi::Object::New(env);
      details.Set("senderTag", Napi::BigInt::New(env, static_cast<uint64_t>(recvInfo.sender_tag)));
      details.Set("length", Napi::Number::New(env, static_cast<double>(recvInfo.length)));
      error.Value().Set("details", details);
    }
    return error.Value();
  }
  if (status == UCS_ERR_CANCELED) return MakeError(env, "CANCELLED", name + ": cancelled", StatusName(status), stack).Value();
  return StatusError(env, status, name, stack).Value();
}

void Request::Settle(Napi::Env env) {
  if (settled) return;
  settled = true;
  if (!State::Of(env)->JsAllowed() || !deferred) return;
  if (status == UCS_OK || kind == RequestKind::Close) {  // a forced close reports the failure it ended
    if (describedFromMemory && endpoint != nullptr) {
      deferred->Resolve(endpoint->DescribedReport(env, *describedLength, protocol));
      return;
    }
    if (kind != RequestKind::Recv && !describe) {
      deferred->Resolve(env.Undefined());
      return;
    }
    Napi::Object result = Napi::Object::New(env);
    if (kind == RequestKind::Recv) {
      result.Set("senderTag", Napi::BigInt::New(env, static_cast<uint64_t>(recvInfo.sender_tag)));
      result.Set("length", Napi::Number::New(env, static_cast<double>(recvInfo.length)));
    }
    if (describe) {
      // A rendezvous send that the receiver answered with RTR runs a second protocol (the data
      // push); the one it ends with is what moved the bytes. One string where both are the same.
      Napi::String initial = Napi::String::New(env, protocol);
      const bool same = finalProtocol.empty() || finalProtocol == protocol;
      result.Set("protocol", same ? initial : Napi::String::New(env, finalProtocol));
      result.Set("initialProtocol", initial);
    }
    deferred->Resolve(result);
    return;
  }
  deferred->Reject(Failure(env));
}

void Request::OnCompleted(Napi::Value callback) {
  if (callback.IsFunction()) completed = Napi::Persistent(callback.As<Napi::Function>());
}

std::string Request::QueryProtocol() const {
  std::string text(worker->maxInfoString(), '\0');
  ucp_request_attr_t attr{};
  attr.field_mask = UCP_REQUEST_ATTR_FIELD_INFO_STRING | UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE;
  attr.debug_string = text.data();
  attr.debug_string_size = text.size();
  if (ucp_request_query(ucxRequest, &attr) != UCS_OK) return std::string();
  text.resize(std::char_traits<char>::length(text.c_str()));
  return text;
}

void Request::Finish(Napi::Env env, bool keep) {
  if (describe && ucxRequest != nullptr && status != UCS_INPROGRESS) {
    finalProtocol = QueryProtocol();
    // Only an eager send that ran one protocol throughout stands for one UCX could finish inside
    // the call. A rendezvous never completes inside it; one the receiver pulled keeps its first
    // description to the end, so the text is checked too.
    if (status == UCS_OK && describedLength && endpoint != nullptr && !finalProtocol.empty() && finalProtocol == protocol &&
        finalProtocol.find(" eager ") != std::string::npos && finalProtocol.find("rendezvous") == std::string::npos) {
      endpoint->RememberDescribed(*describedLength, finalProtocol);
    }
  }
  // ReportInto: the outcome is worked out now and told once this request is gone (the callback
  // may post the next receive, or close the worker).
  Napi::FunctionReference told;
  Napi::Value failure;
  if (!report.IsEmpty() && !settled) {
    told = std::move(report);
    settled = true;
    // A receive UCX cancelled (its endpoint closed: UCX purges what was matched to it) is told
    // too: its caller may keep its buffer until it ends (a receive left under a HELLO key).
    if (status == UCS_OK) WriteSlot();
    else if (State::Of(env)->JsAllowed()) failure = Failure(env);
    else told.Reset();
  }
  report.Reset();
  Settle(env);
  if (ucxRequest != nullptr) ucp_request_free(ucxRequest);
  if (pending) worker->RemoveRequest(this);
  Endpoint* closed = endpoint != nullptr && kind == RequestKind::Close ? endpoint : nullptr;
  if (endpoint != nullptr) endpoint->RemoveRequest(this);
  // A promise rejected early (cancel, endpoint closed) said nothing about the buffer: this does.
  Napi::FunctionReference done = std::move(completed);
  if (!keep) delete this;
  // The 'close' event runs JS, which may throw: only once this request is gone.
  if (closed != nullptr) closed->OnClosed(env);
  if (!done.IsEmpty() && State::Of(env)->JsAllowed()) done.Call({});
  if (!told.IsEmpty() && State::Of(env)->JsAllowed()) {
    if (failure.IsEmpty()) told.Call({});
    else told.Call({failure});
  }
}

}  // namespace gdrpc
