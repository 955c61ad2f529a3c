// `cc -O2 -o /tmp/host-costs bench/host-costs.c && /tmp/host-costs`: what the host itself costs, with
// no Node.js and no UCX: a syscall, a clock read, an epoll pass, an 8-byte TCP loopback ping-pong
// between two processes (blocking, so two wake-ups a round trip, and both spinning on recv), and a
// flag ping-pong through shared memory. The floor under a small call on a machine
// (docs/binding.md "Where a small call's time goes on the H200 machine").
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdatomic.h>

static double now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmpd(const void* a, const void* b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
static void report(const char* what, double* v, int n) {
  qsort(v, n, sizeof(double), cmpd);
  printf("%-44s p50 %8.2f us  p10 %8.2f  p90 %8.2f  p99 %8.2f\n", what, v[n/2]/1e3, v[n/10]/1e3, v[n*9/10]/1e3, v[n*99/100]/1e3);
}
#define LOOP(name, N, stmt) do { double t0 = now_ns(); for (int i_ = 0; i_ < (N); i_++) { stmt; } \
  printf("%-44s %8.1f ns per call\n", name, (now_ns() - t0) / (N)); } while (0)

static void tcp_pair(int* a, int* b) {
  int l = socket(AF_INET, SOCK_STREAM, 0); struct sockaddr_in s = {0}; s.sin_family = AF_INET; s.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(l, (void*)&s, sizeof s); listen(l, 1); socklen_t len = sizeof s; getsockname(l, (void*)&s, &len);
  *a = socket(AF_INET, SOCK_STREAM, 0); connect(*a, (void*)&s, sizeof s); *b = accept(l, 0, 0); close(l);
  int one = 1; setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Ping-pong of 8 bytes between two processes; poll=1 spins on MSG_DONTWAIT, else blocks (wake-up).
static void pingpong(const char* name, int poll, int useEpoll) {
  int a, b; tcp_pair(&a, &b);
  enum { N = 20000 };
  pid_t pid = fork();
  char buf[8] = {0};
  if (pid == 0) {
    int ep = epoll_create1(0); struct epoll_event ev = { .events = EPOLLIN }; epoll_ctl(ep, EPOLL_CTL_ADD, b, &ev);
    for (int i = 0; i < N; i++) {
      ssize_t r;
      if (useEpoll) { struct epoll_event o; epoll_wait(ep, &o, 1, -1); }
      while ((r = recv(b, buf, 8, poll ? MSG_DONTWAIT : 0)) < 0 && errno == EAGAIN) {}
      send(b, buf, 8, 0);
    }
    _exit(0);
  }
  static double v[N];
  int ep = epoll_create1(0); struct epoll_event ev = { .events = EPOLLIN }; epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev);
  for (int i = 0; i < N; i++) {
    double t0 = now_ns(); send(a, buf, 8, 0); ssize_t r;
    if (useEpoll) { struct epoll_event o; epoll_wait(ep, &o, 1, -1); }
    while ((r = recv(a, buf, 8, poll ? MSG_DONTWAIT : 0)) < 0 && errno == EAGAIN) {}
    v[i] = now_ns() - t0;
  }
  waitpid(pid, 0, 0); close(a); close(b);
  report(name, v, N);
}

static void shm_pingpong(void) {
  atomic_int* f = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  enum { N = 100000 }; static double v[N];
  atomic_store(f, 0);
  pid_t pid = fork();
  if (pid == 0) { for (int i = 0; i < N; i++) { while (atomic_load(f) != 2 * i + 1) {} atomic_store(f, 2 * i + 2); } _exit(0); }
  for (int i = 0; i < N; i++) { double t0 = now_ns(); atomic_store(f, 2 * i + 1); while (atomic_load(f) != 2 * i + 2) {} v[i] = now_ns() - t0; }
  waitpid(pid, 0, 0);
  report("shared-memory flag ping-pong (2 procs)", v, N);
}

int main(void) {
  char cs[128] = "?"; FILE* f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f) { if (fgets(cs, sizeof cs, f)) cs[strcspn(cs, "\n")] = 0; fclose(f); }
  printf("clocksource %s, online cpus %ld\n", cs, sysconf(_SC_NPROCESSORS_ONLN));
  struct timespec t; volatile long sink = 0;
  LOOP("clock_gettime(MONOTONIC)", 1000000, clock_gettime(CLOCK_MONOTONIC, &t); sink += t.tv_nsec);
  LOOP("syscall getppid", 200000, sink += syscall(SYS_getppid));
  struct rusage ru; LOOP("getrusage(RUSAGE_THREAD)", 200000, getrusage(RUSAGE_THREAD, &ru); sink += ru.ru_nivcsw);
  int ep = epoll_create1(0); int a, b; tcp_pair(&a, &b); struct epoll_event ev = { .events = EPOLLIN }; epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev);
  struct epoll_event o; LOOP("epoll_wait(timeout 0), 1 idle fd", 200000, sink += epoll_wait(ep, &o, 1, 0));
  char buf[8] = {0}; LOOP("recv MSG_DONTWAIT on an empty socket", 200000, sink += recv(a, buf, 8, MSG_DONTWAIT));
  LOOP("send 8 bytes tcp loopback (+ drain)", 100000, send(a, buf, 8, 0); sink += recv(b, buf, 8, 0));
  char big[4096]; LOOP("open+read+close /proc/stat", 2000, int fd = open("/proc/stat", O_RDONLY); sink += read(fd, big, sizeof big); close(fd));
  close(a); close(b); close(ep);
  pingpong("tcp ping-pong, blocking recv", 0, 0);
  pingpong("tcp ping-pong, epoll_wait then recv", 0, 1);
  pingpong("tcp ping-pong, both spinning on recv", 1, 0);
  shm_pingpong();
  return (int)(sink & 0);
}
