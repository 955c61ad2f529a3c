// How long a worker keeps polling after it found work, instead of sleeping until its event fd
// wakes the loop: a reply that comes within the window is seen without a wake-up (tens of
// microseconds each on a VM), at the price of the CPU the window spins.
//
// Fixed (busyPollUs > 0): the window is that long after every pass that found work.
// Adaptive (the default): the window follows the gaps between passes that found work: a gap
// shorter than kMaxWindowNs sets it to twice that gap (a reply that quick would have been caught),
// a longer one halves it, and a window that runs out with nothing found halves it too, down to
// nothing. An idle worker never spins. Nor does it while the machine had less than half a core
// idle over the last 100 ms (/proc/stat), or for a cool-down after a spin during which the thread
// was preempted (doubling while that keeps happening): on a busy machine a spin only takes the
// CPU time the peer it waits for needs.
#pragma once
#include <cstdint>

namespace gdrpc {

class PollWindow {
 public:
  static constexpr int64_t kAdaptive = -1;
  static constexpr uint64_t kMaxWindowNs = 200000;     // the adaptive window's ceiling
  static constexpr uint64_t kMinWindowNs = 2000;       // below this an adaptive window closes
  static constexpr uint64_t kCheckEveryNs = 1000000;   // preemption check while a spin lasts
  static constexpr uint64_t kMinCooldownNs = 10000000;
  static constexpr uint64_t kMaxCooldownNs = 1000000000;
  static constexpr uint64_t kIdleSampleNs = 100000000;  // how often the machine's idle time is read

  /** `windowNs`: kAdaptive, 0 (never spin) or a fixed window. */
  explicit PollWindow(int64_t windowNs);

  /** After a wake-up pass at `nowNs` that did (`active`) or did not find work: whether to keep
   *  polling on the next loop turn rather than wait for the event fd. */
  bool Update(uint64_t nowNs, bool active);

  bool adaptive() const { return adaptive_; }
  uint64_t windowNs() const { return adaptive_ ? windowNs_ : fixedNs_; }
  uint64_t spins() const { return spins_; }          // spins begun
  uint64_t misses() const { return misses_; }        // spins that ran out with nothing found
  uint64_t preempted() const { return preempted_; }  // spins cut short by a preemption (cool-downs)
  uint64_t busyMachine() const { return busyMachine_; }  // spins not begun: no idle core

 private:
  void EndSpin(uint64_t nowNs, bool ranOut);
  bool Preempted() const;
  /** Whether the machine had at least half a core idle over the last sample period. */
  bool IdleCore(uint64_t nowNs);

  bool adaptive_;
  uint64_t fixedNs_;
  uint64_t windowNs_ = 0;
  uint64_t lastActivityNs_ = 0;
  bool spinning_ = false;
  uint64_t checkedNs_ = 0;
  long switchesAtCheck_ = 0;
  uint64_t cooldownUntilNs_ = 0;
  uint64_t cooldownNs_ = kMinCooldownNs;
  uint64_t spins_ = 0;
  uint64_t misses_ = 0;
  uint64_t preempted_ = 0;
  uint64_t sampledNs_ = 0;
  unsigned long long idleTicks_ = 0, totalTicks_ = 0;
  bool idleCore_ = true;
  uint64_t busyMachine_ = 0;
};

}  // namespace gdrpc
