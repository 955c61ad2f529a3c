// The calling thread's clocks. CPU time leaves out both the time the thread waited for a CPU
// (another process ran) and the time it was blocked (a handler in a synchronous sleep, a file
// read, a lock): charged by it, peers whose calls block the reading thread got their turns
// almost free. Own time (wall time less the run-queue wait that schedstat reports) leaves out
// only the first.
#include "thread_clock.h"
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <cstdio>
#include "poll_window.h"
#include "state.h"

namespace gdrpc {

Napi::Value ThreadCpuMs(const Napi::CallbackInfo& info) {
  // The adaptive poll window's reading of the same clock (0 where it cannot be read: a running
  // thread has always used some CPU).
  uint64_t ns = SystemCpuProbe().threadCpuNs();
  return Napi::Number::New(info.Env(), ns == 0 ? -1 : static_cast<double>(ns) / 1e6);
}

Napi::Value ThreadOwnMs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  // One descriptor per environment: an environment lives on one thread (the main thread, or a
  // worker thread's), and /proc/thread-self names the thread that opened it.
  State* state = State::Of(env);
  if (state->schedstatFd == State::kUnopened) state->schedstatFd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (state->schedstatFd < 0) return Napi::Number::New(env, -1);
  char text[128];
  ssize_t n = pread(state->schedstatFd, text, sizeof text - 1, 0);
  if (n <= 0) return Napi::Number::New(env, -1);
  text[n] = '\0';
  // "<ns on a CPU> <ns waiting on a run queue> <timeslices>"
  unsigned long long onCpu = 0, waited = 0;
  if (std::sscanf(text, "%llu %llu", &onCpu, &waited) != 2) return Napi::Number::New(env, -1);
  struct timespec t {};
  if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return Napi::Number::New(env, -1);
  double wallMs = static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
  return Napi::Number::New(env, wallMs - static_cast<double>(waited) / 1e6);
}

}  // namespace gdrpc
