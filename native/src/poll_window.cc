#include "poll_window.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace gdrpc {

namespace {
bool MachineTicks(unsigned long long* idle, unsigned long long* total) {
  FILE* file = std::fopen("/proc/stat", "r");
  if (file == nullptr) return false;
  unsigned long long v[8] = {};
  int n = std::fscanf(file, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  std::fclose(file);
  if (n < 5) return false;
  *idle = v[3] + v[4];  // idle, iowait
  *total = 0;
  for (int i = 0; i < n; ++i) *total += v[i];
  return true;
}

long OnlineCores() {
  static const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  return cores;
}

uint64_t ThreadCpuNs() {
  struct timespec t {};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

long InvoluntarySwitches() {
  struct rusage usage {};
  return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : 0;
}
}  // namespace

const CpuProbe& SystemCpuProbe() {
  static const CpuProbe probe{MachineTicks, OnlineCores, ThreadCpuNs, InvoluntarySwitches};
  return probe;
}

PollWindow::PollWindow(int64_t windowNs, const CpuProbe& probe)
    : probe_(&probe), adaptive_(windowNs == kAdaptive), fixedNs_(windowNs > 0 ? static_cast<uint64_t>(windowNs) : 0) {}

bool PollWindow::Update(uint64_t nowNs, bool active, bool held) {
  if (!adaptive_) {
    if (active || held) lastActivityNs_ = nowNs;
    return held || (fixedNs_ > 0 && nowNs - lastActivityNs_ < fixedNs_);
  }
  const bool afterHold = held_;
  held_ = held;
  if (held) {
    lastActivityNs_ = nowNs;
    return true;
  }
  if (active && afterHold) {
    lastActivityNs_ = nowNs;
  } else if (active) {
    uint64_t gap = lastActivityNs_ == 0 ? UINT64_MAX : nowNs - lastActivityNs_;
    if (gap <= kMaxWindowNs) {
      windowNs_ = std::max(windowNs_ - windowNs_ / 8, std::min(2 * gap, kMaxWindowNs));
    } else {
      windowNs_ /= 2;
      if (windowNs_ < kMinWindowNs) windowNs_ = 0;
    }
    lastActivityNs_ = nowNs;
  }
  bool want = windowNs_ > 0 && nowNs >= cooldownUntilNs_ && nowNs - lastActivityNs_ < windowNs_;
  if (want && !spinning_ && !FreeCore(nowNs)) {
    busyMachine_++;
    want = false;
  }
  if (want && !spinning_) {
    spinning_ = true;
    spins_++;
    MarkCheck(nowNs);
  } else if (want && nowNs - checkedNs_ >= kCheckEveryNs) {
    // A spin kept alive by a stream of work: look for preemption now and then all the same.
    if (Preempted(nowNs)) {
      EndSpin(nowNs, false);
      return false;
    }
    MarkCheck(nowNs);
  } else if (!want && spinning_) {
    EndSpin(nowNs, !active);
  }
  return want;
}

void PollWindow::EndSpin(uint64_t nowNs, bool ranOut) {
  spinning_ = false;
  if (ranOut) {
    misses_++;
    windowNs_ /= 2;
    if (windowNs_ < kMinWindowNs) windowNs_ = 0;
  }
  if (Preempted(nowNs)) {
    preempted_++;
    cooldownUntilNs_ = nowNs + cooldownNs_;
    cooldownNs_ = std::min(cooldownNs_ * 2, kMaxCooldownNs);
  } else {
    cooldownNs_ = kMinCooldownNs;
  }
}

void PollWindow::MarkCheck(uint64_t nowNs) {
  checkedNs_ = nowNs;
  switchesAtCheck_ = probe_->involuntarySwitches();
  cpuAtCheckNs_ = probe_->threadCpuNs();
}

bool PollWindow::Preempted(uint64_t nowNs) const {
  if (probe_->involuntarySwitches() == switchesAtCheck_) return false;
  uint64_t cpu = probe_->threadCpuNs();
  // Without the thread's clock (it reads 0, or went back) any involuntary switch counts.
  if (cpu == 0 || cpu < cpuAtCheckNs_) return true;
  return (cpu - cpuAtCheckNs_) * 4 < (nowNs - checkedNs_) * 3;
}

bool PollWindow::FreeCore(uint64_t nowNs) {
  if (sampledNs_ != 0 && nowNs - sampledNs_ < kIdleSampleNs) return freeCore_;
  // A stale sample is read once the wake-up's JavaScript has run (SampleIfAsked), and the spin
  // begins, or not, on the last answer meanwhile: the pass that asks is the one that found work,
  // whose JavaScript (a request's handler, the reply's send) runs only after the wake-up's passes.
  // Read here, /proc/stat held the reply of the first call after a pause: 13 us on the 2-core CPU
  // box, 86 us after 16 ms idle (bench/idle-gap.ts's machine).
  resample_ = true;
  return freeCore_;
}

bool PollWindow::SampleIfAsked(uint64_t nowNs) {
  if (!resample_) return false;
  resample_ = false;
  Sample(nowNs);
  if (!spinning_ || freeCore_) return false;
  // The spin that began on the stale answer ends: the next Update finds no core to spare.
  spinning_ = false;
  return true;
}

void PollWindow::Sample(uint64_t nowNs) {
  unsigned long long idle = 0, total = 0;
  if (!probe_->machineTicks(&idle, &total)) {
    freeCore_ = true;
    return;
  }
  uint64_t ownNs = probe_->threadCpuNs();
  if (sampledNs_ != 0 && total > totalTicks_) {
    // Cores left idle over the period (the idle share of all ticks times the number of cores),
    // plus the share of a core this thread used itself: what a spin of this thread may take
    // without taking it from anyone else. Counting the thread's own time keeps two peers that
    // spin on a machine with a core each from reading their own spinning as a busy machine.
    // Idle time can go back (iowait is not monotonic) and never exceeds the total: clamped.
    double idleTicks = idle > idleTicks_ ? static_cast<double>(idle - idleTicks_) : 0.0;
    double share = std::min(1.0, idleTicks / static_cast<double>(total - totalTicks_));
    double idleCores = share * static_cast<double>(probe_->cores());
    double ownCores = ownNs > ownNs_ ? static_cast<double>(ownNs - ownNs_) / static_cast<double>(nowNs - sampledNs_) : 0.0;
    freeCore_ = idleCores + ownCores >= kFreeCores;
  }
  sampledNs_ = nowNs;
  idleTicks_ = idle;
  totalTicks_ = total;
  ownNs_ = ownNs;
}

}  // namespace gdrpc
