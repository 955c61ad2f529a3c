#include "status.h"

#include <optional>

#include "state.h"

namespace gdrpc {

const char* CodeForStatus(ucs_status_t status) {
  switch (status) {
    case UCS_OK: return "OK";
    case UCS_ERR_CANCELED: return "CANCELLED";
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return "INVALID_ARGUMENT";
    case UCS_ERR_UNSUPPORTED: return "UNIMPLEMENTED";
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_OUT_OF_RANGE:
      return "RESOURCE_EXHAUSTED";
    case UCS_ERR_NO_ELEM:
    case UCS_ERR_NO_DEVICE:
      return "NOT_FOUND";
    case UCS_ERR_TIMED_OUT: return "DEADLINE_EXCEEDED";
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SOME_CONNECTS_FAILED:
    case UCS_ERR_BUSY:
    case UCS_ERR_ALREADY_EXISTS:
      return "UNAVAILABLE";
    default: return "INTERNAL";
  }
}

#define GDRPC_STATUS_NAME(s) case s: return #s
const char* StatusName(ucs_status_t status) {
  switch (status) {
    GDRPC_STATUS_NAME(UCS_OK);
    GDRPC_STATUS_NAME(UCS_INPROGRESS);
    GDRPC_STATUS_NAME(UCS_ERR_NO_MESSAGE);
    GDRPC_STATUS_NAME(UCS_ERR_NO_RESOURCE);
    GDRPC_STATUS_NAME(UCS_ERR_IO_ERROR);
    GDRPC_STATUS_NAME(UCS_ERR_NO_MEMORY);
    GDRPC_STATUS_NAME(UCS_ERR_INVALID_PARAM);
    GDRPC_STATUS_NAME(UCS_ERR_UNREACHABLE);
    GDRPC_STATUS_NAME(UCS_ERR_INVALID_ADDR);
    GDRPC_STATUS_NAME(UCS_ERR_NOT_IMPLEMENTED);
    GDRPC_STATUS_NAME(UCS_ERR_MESSAGE_TRUNCATED);
    GDRPC_STATUS_NAME(UCS_ERR_NO_PROGRESS);
    GDRPC_STATUS_NAME(UCS_ERR_BUFFER_TOO_SMALL);
    GDRPC_STATUS_NAME(UCS_ERR_NO_ELEM);
    GDRPC_STATUS_NAME(UCS_ERR_SOME_CONNECTS_FAILED);
    GDRPC_STATUS_NAME(UCS_ERR_NO_DEVICE);
    GDRPC_STATUS_NAME(UCS_ERR_BUSY);
    GDRPC_STATUS_NAME(UCS_ERR_CANCELED);
    GDRPC_STATUS_NAME(UCS_ERR_SHMEM_SEGMENT);
    GDRPC_STATUS_NAME(UCS_ERR_ALREADY_EXISTS);
    GDRPC_STATUS_NAME(UCS_ERR_OUT_OF_RANGE);
    GDRPC_STATUS_NAME(UCS_ERR_TIMED_OUT);
    GDRPC_STATUS_NAME(UCS_ERR_EXCEEDS_LIMIT);
    GDRPC_STATUS_NAME(UCS_ERR_UNSUPPORTED);
    GDRPC_STATUS_NAME(UCS_ERR_REJECTED);
    GDRPC_STATUS_NAME(UCS_ERR_NOT_CONNECTED);
    GDRPC_STATUS_NAME(UCS_ERR_CONNECTION_RESET);
    GDRPC_STATUS_NAME(UCS_ERR_ENDPOINT_TIMEOUT);
    default: return "UCS_ERR_UNKNOWN";
  }
}
#undef GDRPC_STATUS_NAME

namespace {

/** Error.stackTraceLimit set to 0 for its lifetime, then put back as it was. */
class NoStackTrace {
 public:
  explicit NoStackTrace(Napi::Env env) : error_(env.Global().Get("Error").As<Napi::Object>()) {
    limit_ = error_.Get("stackTraceLimit");
    error_.Set("stackTraceLimit", Napi::Number::New(env, 0));
  }
  ~NoStackTrace() { error_.Set("stackTraceLimit", limit_); }
  NoStackTrace(const NoStackTrace&) = delete;
  NoStackTrace& operator=(const NoStackTrace&) = delete;

 private:
  Napi::Object error_;
  Napi::Value limit_;
};

}  // namespace

Napi::Error MakeError(Napi::Env env, const char* code, const std::string& message, const char* ucsStatus, Stack stack) {
  State* state = State::Of(env);
  if (state != nullptr && !state->errorClass.IsEmpty()) {
    Napi::Object options = Napi::Object::New(env);
    if (ucsStatus != nullptr) options.Set("ucsStatus", ucsStatus);
    std::optional<NoStackTrace> noStack;
    if (stack == Stack::Skip) noStack.emplace(env);
    Napi::Object error = state->errorClass.New({Napi::String::New(env, code), Napi::String::New(env, message), options});
    return Napi::Error(env, error);
  }
  Napi::Error error = Napi::Error::New(env, std::string("[") + code + "] " + message);
  error.Set("code", Napi::String::New(env, code));
  if (ucsStatus != nullptr) error.Set("ucsStatus", Napi::String::New(env, ucsStatus));
  return error;
}

Napi::Error StatusError(Napi::Env env, ucs_status_t status, const std::string& what, Stack stack) {
  return MakeError(env, CodeForStatus(status), what + ": " + ucs_status_string(status), StatusName(status), stack);
}

void Throw(Napi::Env env, const char* code, const std::string& message) { throw MakeError(env, code, message); }

void ThrowStatus(Napi::Env env, ucs_status_t status, const std::string& what) { throw StatusError(env, status, what); }

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  State::Of(info.Env())->errorClass = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

}  // namespace gdrpc
