// Per-environment state of the addon: the registered error class, the constructors native code
// needs, the live-object counters behind nativeStats(), and the roots the exit hook closes.
#pragma once
#include <napi.h>
#include <set>

namespace gdrpc {

class Context;

/** Live native objects of each kind (nativeStats()). */
struct Counters {
  int64_t contexts = 0, workers = 0, endpoints = 0, listeners = 0, regions = 0, rkeys = 0, requests = 0;
};

struct State {
  Napi::FunctionReference errorClass;
  Napi::FunctionReference endpointClass;  // the listener builds server-side endpoints with it
  Napi::FunctionReference regionClass;    // to recognise MemoryRegion arguments
  Counters counters;
  std::set<Context*> contexts;            // closed (children first) by the env cleanup hook
  bool exiting = false;                   // set in the cleanup hook: no JS calls from there on
  int finalizing = 0;                     // > 0 while a finalizer closes objects: no JS calls
  // Event-loop handles of this library still closing. Their close callbacks are code of this
  // library: an environment that ends (a worker thread's) unloads it afterwards, so teardown
  // waits, through an asynchronous cleanup hook, until none is left.
  int releasing = 0;
  napi_async_cleanup_hook_handle teardown = nullptr;  // set while the cleanup hook waits
  // This environment's thread's /proc/thread-self/schedstat (threadOwnMs), opened on first use.
  static constexpr int kUnopened = -2;
  int schedstatFd = kUnopened;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State();

  /** Counts a handle release started; Released() must follow once for each. */
  void Releasing() { releasing++; }
  /** A release is over; the last one ends a waiting teardown. */
  void Released();

  /** Whether native code may call into JS (not from exit hooks and finalizers). */
  bool JsAllowed() const { return !exiting && finalizing == 0; }

  static State* Of(Napi::Env env) { return env.GetInstanceData<State>(); }
};

/** Marks a finalizer's scope: objects closed inside it do not call into JS. */
struct FinalizerScope {
  explicit FinalizerScope(State* state) : state(state) { if (state) state->finalizing++; }
  ~FinalizerScope() { if (state) state->finalizing--; }
  State* state;
};

/** nativeStats(): the live counters as a plain object. */
Napi::Value NativeStats(const Napi::CallbackInfo& info);
/** Closes every live object (children first); runs at environment teardown. */
void CloseAll(State* state);
/** The environment's asynchronous cleanup hook: CloseAll, then waits for the handles' release. */
void OnTeardown(napi_async_cleanup_hook_handle handle, void* state);

}  // namespace gdrpc
