// Clocks of the calling thread, for what the dispatcher charges a message read in turns
// (core/rpc/runtime/read-turns.ts): neither counts the time the thread waited for a CPU.
#pragma once
#include <napi.h>

namespace gdrpc {

/** threadCpuMs(): the calling thread's CPU time in ms (user and system); -1 where unreadable. */
Napi::Value ThreadCpuMs(const Napi::CallbackInfo& info);
/** threadOwnMs(): monotonic wall time in ms less the time the calling thread waited on a run
 *  queue (Linux /proc/thread-self/schedstat); -1 where unreadable. */
Napi::Value ThreadOwnMs(const Napi::CallbackInfo& info);

}  // namespace gdrpc
