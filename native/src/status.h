// Turning UCX statuses and binding failures into the GdrpcError class that TypeScript defined.
#pragma once
#include <napi.h>
#include <ucs/type/status.h>
#include <string>

namespace gdrpc {

/** The GdrpcError code that a UCX status maps to (core/errors.ts Code). */
const char* CodeForStatus(ucs_status_t status);
/** The enum name of a UCX status, e.g. "UCS_ERR_CONNECTION_RESET". */
const char* StatusName(ucs_status_t status);

/** Whether an error records the JavaScript stack it was made on. An operation's failure reported
 *  after its start (a completion, a cancellation, its endpoint's failure) is made on the event
 *  loop's stack or an abort listener's, never its caller's; recording it costs ~2.5 us an error,
 *  which a connection closing on 16,384 posted receives pays 16,384 times. */
enum class Stack { Record, Skip };

/** Builds `new GdrpcError(code, message, {ucsStatus})`; a plain Error with .code before registration. */
Napi::Error MakeError(Napi::Env env, const char* code, const std::string& message,
                      const char* ucsStatus = nullptr, Stack stack = Stack::Record);
/** A GdrpcError for a failed UCX call: the code from the status, the message names the call. */
Napi::Error StatusError(Napi::Env env, ucs_status_t status, const std::string& what, Stack stack = Stack::Record);
/** Throws a GdrpcError (C++ exception, turned into a JS throw by node-addon-api). */
[[noreturn]] void Throw(Napi::Env env, const char* code, const std::string& message);
[[noreturn]] void ThrowStatus(Napi::Env env, ucs_status_t status, const std::string& what);

/** setErrorClass(GdrpcError): the TS loader registers its class so native errors are instances of it. */
Napi::Value SetErrorClass(const Napi::CallbackInfo& info);

}  // namespace gdrpc
