// How long a worker keeps polling after it found work, instead of sleeping until its event fd
// wakes the loop: a reply that comes within the window is seen without a wake-up (tens of
// microseconds each on a VM), at the price of the CPU the window spins.
//
// Fixed (busyPollUs > 0): the window is that long after every pass that found work.
// Adaptive (the default): the window follows the gaps between passes that found work: a gap
// shorter than kMaxWindowNs sets it to twice that gap (a reply that quick would have been caught),
// a longer one halves it, and a window that runs out with nothing found halves it too, down to
// nothing. The ceiling is 1 ms because gaps measured asleep are longer than the same peers' gaps
// polling (each side's wake-ups, vCPUs that halted): with a 200 µs ceiling, peers whose calls took
// longer than that asleep halved their windows on every call and rarely caught a reply again
// (nearly every spin ran out). An idle worker never spins. Nor does one begin while the machine
// left less than kFreeCores idle over the last 100 ms (/proc/stat), counting the share of a core
// this thread used itself (its own spinning is not someone else's load), nor for a cool-down after
// a spin that was preempted for more than a quarter of its time (doubling while that keeps
// happening): on a busy machine a spin only takes the CPU time the peer it waits for needs.
#pragma once
#include <cstdint>

namespace gdrpc {

/** What the adaptive window reads of the machine and of its thread (the real ones by default;
 *  tests give their own). */
struct CpuProbe {
  /** The machine's idle and total CPU ticks so far; false where unreadable. */
  bool (*machineTicks)(unsigned long long* idle, unsigned long long* total);
  /** The number of online cores. */
  long (*cores)();
  /** CPU time this thread has used so far (ns). */
  uint64_t (*threadCpuNs)();
  /** Times this thread was switched out involuntarily so far. */
  long (*involuntarySwitches)();
};

/** The probe that reads /proc/stat, sysconf, the thread's CPU clock and getrusage. */
const CpuProbe& SystemCpuProbe();

class PollWindow {
 public:
  static constexpr int64_t kAdaptive = -1;
  static constexpr uint64_t kMaxWindowNs = 1000000;    // the adaptive window's ceiling
  static constexpr uint64_t kMinWindowNs = 2000;       // below this an adaptive window closes
  static constexpr uint64_t kCheckEveryNs = 1000000;   // preemption check while a spin lasts
  static constexpr uint64_t kMinCooldownNs = 1000000;
  static constexpr uint64_t kMaxCooldownNs = 1000000000;
  static constexpr uint64_t kIdleSampleNs = 100000000;  // how often the machine's idle time is read
  /** Idle cores plus this thread's own share of one, over the last sample, that a spin needs. */
  static constexpr double kFreeCores = 0.5;

  /** `windowNs`: kAdaptive, 0 (never spin) or a fixed window. */
  explicit PollWindow(int64_t windowNs, const CpuProbe& probe = SystemCpuProbe());

  /** After a wake-up pass at `nowNs` that did (`active`) or did not find work: whether to keep
   *  polling on the next loop turn rather than wait for the event fd. `held`: a transfer in device
   *  memory keeps the worker polling on this pass anyway (DeviceWait). The wait is then on the
   *  device, not on a peer: a held pass returns true and changes nothing but the time of the last
   *  work (the window neither runs out however long the loop's turns take, nor starts a spin of
   *  its own, nor counts a busy machine), and work found on the pass after a held one does not
   *  resize the window either, since that gap was the device's. Without this, a copy longer than
   *  the ceiling runs the window out and then counts as a gap over the ceiling, halving it twice
   *  per call, and both processes sleep through the replies that follow a transfer: 1 GiB on one
   *  H200 (about 500 µs) did so when the ceiling was 200 µs; with 1 ms it takes 4 GiB there, or
   *  1 GiB between two GPUs (about 2.7 ms)
   *  (docs/binding.md "Polling while a transfer in device memory is in flight"). */
  bool Update(uint64_t nowNs, bool active, bool held = false);

  /** Once the JavaScript of a wake-up has run: reads the machine's sample that Update found older
   *  than kIdleSampleNs (it decided on the last one meanwhile). True when that ends a spin (no core
   *  to spare): the caller stops polling. */
  bool SampleIfAsked(uint64_t nowNs);

  bool adaptive() const { return adaptive_; }
  uint64_t windowNs() const { return adaptive_ ? windowNs_ : fixedNs_; }
  uint64_t spins() const { return spins_; }          // spins begun
  uint64_t misses() const { return misses_; }        // spins that ran out with nothing found
  uint64_t preempted() const { return preempted_; }  // spins cut short by a preemption (cool-downs)
  uint64_t busyMachine() const { return busyMachine_; }  // spins not begun: no free core

 private:
  void EndSpin(uint64_t nowNs, bool ranOut);
  /** Starts the preemption check of a spin at `nowNs`. */
  void MarkCheck(uint64_t nowNs);
  /** Whether, since the last check, the thread was switched out and ran for less than three
   *  quarters of the time (a brief interruption, by a kernel thread or a helper thread of this
   *  process, does not count). */
  bool Preempted(uint64_t nowNs) const;
  /** Whether the machine had kFreeCores to spare over the last sample period; a sample older
   *  than kIdleSampleNs answers all the same and asks for a fresh one (SampleIfAsked). */
  bool FreeCore(uint64_t nowNs);
  /** Reads the machine's idle time and this thread's CPU time: freeCore_ for the period since
   *  the last reading. */
  void Sample(uint64_t nowNs);

  const CpuProbe* probe_;
  bool adaptive_;
  uint64_t fixedNs_;
  uint64_t windowNs_ = 0;
  uint64_t lastActivityNs_ = 0;
  bool held_ = false;  // the last pass was held: the gap since it is the device's
  bool spinning_ = false;
  uint64_t checkedNs_ = 0;
  long switchesAtCheck_ = 0;
  uint64_t cpuAtCheckNs_ = 0;
  uint64_t cooldownUntilNs_ = 0;
  uint64_t cooldownNs_ = kMinCooldownNs;
  uint64_t spins_ = 0;
  uint64_t misses_ = 0;
  uint64_t preempted_ = 0;
  uint64_t sampledNs_ = 0;
  unsigned long long idleTicks_ = 0, totalTicks_ = 0;
  uint64_t ownNs_ = 0;
  bool freeCore_ = true;
  bool resample_ = false;  // FreeCore found the sample stale: SampleIfAsked reads it
  uint64_t busyMachine_ = 0;
};

}  // namespace gdrpc
