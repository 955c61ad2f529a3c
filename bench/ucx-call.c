// A gdrpc tensor call's wire steps in C over UCX, no Node.js: the floor under the runtime's call.
//   cc -O2 -o /tmp/ucx-call bench/ucx-call.c -I$UCX/include -L$UCX/lib -lucp -lucs -ldl
//   /tmp/ucx-call host|cuda [bytes...]
// The GPU benchmark and the RPC benchmark run it beside gdrpc with gdrpc's UCX settings
// (bench/ucx-call.ts runUcxCall; scripts/gpu-pack.sh builds it for the GPU machine).
// Two processes on one machine, each with its buffer from ucp_mem_map (as gdrpc's pools are), an
// endpoint with peer error handling, and workers that busy-poll (the best case of a call) or sleep
// on their event fd (GDRPC_UCX_CALL_WAIT, below). Per round the client synchronizes its device
// when there is a payload (gdrpc synchronizes the producing device of a CUDA tensor; the runs
// committed before this rule synchronized in the 0-byte rounds too), posts the RESPONSE's receive,
// sends a 64-byte REQUEST and then the payload; the server receives the REQUEST, only then posts
// the payload's receive (so the payload arrives unexpected, as in gdrpc), and sends a 64-byte
// RESPONSE once the payload is in. Bytes 0 is the small call: REQUEST and RESPONSE. Reports the
// round trip's p50/p99, each side's CPU time per round, and the server's receive step (its receive
// posted until it completes: docs/gpu.md "Where a CUDA tensor call's time goes" measures the same
// step in gdrpc).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#define CHECK(what, ok) do { if (!(ok)) { fprintf(stderr, "ucx-call: %s failed\n", what); exit(1); } } while (0)

static double cpu_us(void) {
  struct rusage u; getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmpd(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static double pct(double* v, int n, int p) { qsort(v, n, sizeof(double), cmpd); return v[(long)n * p / 100]; }

// The CUDA driver, loaded at run time so that the program builds where there is no driver.
static int (*cuInit_)(unsigned);
static int (*cuDeviceGet_)(int*, int);
static int (*cuDevicePrimaryCtxRetain_)(void**, int);
static int (*cuCtxSetCurrent_)(void*);
static int (*cuMemAlloc_)(unsigned long long*, size_t);
static int (*cuCtxSynchronize_)(void);

static void* cuda_alloc(size_t bytes) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK("dlopen libcuda.so.1", lib);
  *(void**)&cuInit_ = dlsym(lib, "cuInit");
  *(void**)&cuDeviceGet_ = dlsym(lib, "cuDeviceGet");
  *(void**)&cuDevicePrimaryCtxRetain_ = dlsym(lib, "cuDevicePrimaryCtxRetain");
  *(void**)&cuCtxSetCurrent_ = dlsym(lib, "cuCtxSetCurrent");
  *(void**)&cuMemAlloc_ = dlsym(lib, "cuMemAlloc_v2");
  *(void**)&cuCtxSynchronize_ = dlsym(lib, "cuCtxSynchronize");
  int dev; void* ctx; unsigned long long p;
  CHECK("cuInit", cuInit_(0) == 0);
  CHECK("cuDeviceGet", cuDeviceGet_(&dev, 0) == 0);
  CHECK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain_(&ctx, dev) == 0);
  CHECK("cuCtxSetCurrent", cuCtxSetCurrent_(ctx) == 0);
  CHECK("cuMemAlloc", cuMemAlloc_(&p, bytes) == 0);
  return (void*)(uintptr_t)p;
}

static ucp_worker_h worker;
static int sleeper = -1;  // an epoll fd on the worker's event fd, where this side may sleep
static int sleeps_always;  // sleeps in every wait, not only in the server's wait for a REQUEST

// Progresses until `req` completes; with `may_sleep` and a sleeper, sleeps on the worker's fd
// whenever a pass found nothing to do.
static void wait_until(void* req, int may_sleep) {
  CHECK("request", !UCS_PTR_IS_ERR(req));
  if (req == NULL) return;
  while (ucp_request_check_status(req) == UCS_INPROGRESS) {
    if (ucp_worker_progress(worker) != 0 || sleeper < 0 || !may_sleep) continue;
    // Nothing happened: arm the worker and sleep until its fd says there is something to do.
    ucs_status_t armed = ucp_worker_arm(worker);
    if (armed == UCS_ERR_BUSY) continue;
    CHECK("ucp_worker_arm", armed == UCS_OK);
    struct epoll_event ev;
    while (epoll_wait(sleeper, &ev, 1, -1) < 0) {}
  }
  CHECK("request status", ucp_request_check_status(req) == UCS_OK);
  ucp_request_free(req);
}

static void wait_for(void* req) { wait_until(req, sleeps_always); }

static void on_conn_request(ucp_conn_request_h request, void* arg) { *(ucp_conn_request_h*)arg = request; }

// An operation's parameters: its memory type always, as gdrpc's operations name theirs (control
// messages included: host), and with `memh` the mapped memory handle, as gdrpc passes its pools'.
// An operation that names no memory type has UCX find it out, a lookup per operation once CUDA
// transports are loaded.
static ucp_request_param_t op_param(ucp_mem_h memh, ucs_memory_type_t type) {
  ucp_request_param_t p = {0};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  p.memory_type = type;
  if (memh) { p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH; p.memh = memh; }
  return p;
}

static void* tag_recv(void* buf, size_t n, uint64_t tag, ucp_mem_h memh, ucs_memory_type_t type) {
  ucp_request_param_t p = op_param(memh, type);
  return ucp_tag_recv_nbx(worker, buf, n, tag, (uint64_t)-1, &p);
}

static void* tag_send(ucp_ep_h ep, void* buf, size_t n, uint64_t tag, ucp_mem_h memh, ucs_memory_type_t type) {
  ucp_request_param_t p = op_param(memh, type);
  return ucp_tag_send_nbx(ep, buf, n, tag, &p);
}

static void full_write(int fd, const void* b, size_t n) { CHECK("write", write(fd, b, n) == (ssize_t)n); }
static void full_read(int fd, void* b, size_t n) {
  for (size_t got = 0; got < n;) { ssize_t r = read(fd, (char*)b + got, n - got); CHECK("read", r > 0); got += r; }
}

int main(int argc, char** argv) {
  if (argc < 2 || (strcmp(argv[1], "host") && strcmp(argv[1], "cuda"))) {
    fprintf(stderr, "usage: ucx-call host|cuda [bytes...]\n");
    return 2;
  }
  const int cuda = !strcmp(argv[1], "cuda");
  size_t sizes[32]; int nsizes = 0;
  for (int i = 2; i < argc && nsizes < 32; i++) {
    char* end;
    sizes[nsizes++] = strtoull(argv[i], &end, 10);
    if (*argv[i] < '0' || *argv[i] > '9' || *end != '\0') {
      fprintf(stderr, "ucx-call: a size is a byte count, got '%s'\n", argv[i]);
      return 2;
    }
  }
  const char* waits = getenv("GDRPC_UCX_CALL_WAIT");
  if (waits != NULL && strcmp(waits, "none") && strcmp(waits, "server") && strcmp(waits, "both")) {
    fprintf(stderr, "ucx-call: GDRPC_UCX_CALL_WAIT must be none, server or both, got '%s'\n", waits);
    return 2;
  }
  if (waits != NULL && !strcmp(waits, "none")) waits = NULL;
  // The client connects to the server's ucp_listener on 127.0.0.1, as a gdrpc Client connects to
  // a Server; GDRPC_UCX_CALL_CONNECT=address: each side makes its endpoint from the other's worker
  // address instead (the committed runs before this option were made so).
  const char* connect_how = getenv("GDRPC_UCX_CALL_CONNECT");
  const int via_listener = connect_how == NULL || !strcmp(connect_how, "listener");
  if (connect_how != NULL && !via_listener && strcmp(connect_how, "address")) {
    fprintf(stderr, "ucx-call: GDRPC_UCX_CALL_CONNECT must be listener or address, got '%s'\n", connect_how);
    return 2;
  }
  if (nsizes == 0) { size_t d[] = {0, 4096, 65536, 1 << 20, 16 << 20}; memcpy(sizes, d, sizeof d); nsizes = 5; }
  size_t most = 64;
  for (int i = 0; i < nsizes; i++) if (sizes[i] > most) most = sizes[i];

  int sv[2];
  CHECK("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  pid_t child = fork();
  const int server = child == 0;
  // A server whose client was killed (a bench's time limit) must not spin on alone.
  if (server) { prctl(PR_SET_PDEATHSIG, SIGKILL); if (getppid() == 1) return 1; }
  int fd = server ? sv[1] : sv[0];

  const ucs_memory_type_t type = cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  void* payload = cuda ? cuda_alloc(most) : calloc(1, most);
  static char control[2][64];

  ucp_params_t params = {0};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h context;
  CHECK("ucp_init", ucp_init(&params, NULL, &context) == UCS_OK);
  ucp_worker_params_t wp = {0};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  CHECK("ucp_worker_create", ucp_worker_create(context, &wp, &worker) == UCS_OK);
  // GDRPC_UCX_CALL_WAIT=server: the server sleeps on its worker's fd while it waits for a REQUEST,
  // as an idle gdrpc server does, and spins for the payload (gdrpc's server polls while a device
  // transfer is in flight); the client spins (gdrpc's adaptive window while a call is pending).
  // =both: both sleep in every wait (gdrpc with busyPollUs 0). Unset: both spin, the floor.
  sleeps_always = waits != NULL && !strcmp(waits, "both");
  if (waits != NULL && (sleeps_always || (server && !strcmp(waits, "server")))) {
    int efd;
    CHECK("ucp_worker_get_efd", ucp_worker_get_efd(worker, &efd) == UCS_OK);
    sleeper = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    CHECK("epoll_ctl", epoll_ctl(sleeper, EPOLL_CTL_ADD, efd, &ev) == 0);
  }
  ucp_mem_map_params_t mp = {0};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = payload; mp.length = most; mp.memory_type = type;
  ucp_mem_h memh;
  CHECK("ucp_mem_map", ucp_mem_map(context, &mp, &memh) == UCS_OK);

  ucp_address_t* addr = NULL; size_t alen;
  ucp_ep_h ep;
  ucp_ep_params_t ep_params = {0};
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucp_listener_h listener = NULL;
  if (!via_listener) {
    CHECK("ucp_worker_get_address", ucp_worker_get_address(worker, &addr, &alen) == UCS_OK);
    full_write(fd, &alen, sizeof alen); full_write(fd, addr, alen);
    size_t plen; full_read(fd, &plen, sizeof plen);
    void* peer = malloc(plen); full_read(fd, peer, plen);
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = peer;
    CHECK("ucp_ep_create", ucp_ep_create(worker, &ep_params, &ep) == UCS_OK);
  } else if (server) {
    static ucp_conn_request_h pending = NULL;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET; sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK); sa.sin_port = 0;
    ucp_listener_params_t lp = {0};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr*)&sa; lp.sockaddr.addrlen = sizeof sa;
    lp.conn_handler.cb = on_conn_request; lp.conn_handler.arg = &pending;
    CHECK("ucp_listener_create", ucp_listener_create(worker, &lp, &listener) == UCS_OK);
    ucp_listener_attr_t la = {0};
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    CHECK("ucp_listener_query", ucp_listener_query(listener, &la) == UCS_OK);
    uint16_t port = ntohs(((struct sockaddr_in*)&la.sockaddr)->sin_port);
    full_write(fd, &port, sizeof port);
    while (pending == NULL) ucp_worker_progress(worker);
    ep_params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.conn_request = pending;
    CHECK("ucp_ep_create", ucp_ep_create(worker, &ep_params, &ep) == UCS_OK);
  } else {
    uint16_t port; full_read(fd, &port, sizeof port);
    static struct sockaddr_in sa;
    sa.sin_family = AF_INET; sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK); sa.sin_port = htons(port);
    ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr = (const struct sockaddr*)&sa; ep_params.sockaddr.addrlen = sizeof sa;
    CHECK("ucp_ep_create", ucp_ep_create(worker, &ep_params, &ep) == UCS_OK);
  }

  enum { REQUEST = 1, PAYLOAD = 2, RESPONSE = 3 };
  if (!server) printf("# ucx-call %s: two processes, %s, buffers from ucp_mem_map%s\n", argv[1],
                      waits == NULL ? "busy-polling workers" : sleeps_always ? "both sleep on the worker's fd"
                                    : "the server sleeps on the worker's fd between calls, the client spins",
                      via_listener ? ", connected through a listener" : ", endpoints from worker addresses");
  for (int s = 0; s < nsizes; s++) {
    const size_t n = sizes[s];
    // GDRPC_UCX_CALL_ROUNDS replaces the number of measured rounds (a fifth as many warm up first).
    const char* given = getenv("GDRPC_UCX_CALL_ROUNDS");
    int runs = n >= (16 << 20) ? 1000 : 5000;
    if (given != NULL && atoi(given) > 0) runs = atoi(given);
    const int warm = given != NULL && atoi(given) > 0 ? runs / 5 : n >= (16 << 20) ? 200 : 2000;
    double* t = malloc(sizeof(double) * (runs + 1));
    double cpu0 = 0;
    for (int i = 0; i < warm + runs; i++) {
      if (i == warm) cpu0 = cpu_us();
      if (server) {
        wait_until(tag_recv(control[0], 64, REQUEST, NULL, UCS_MEMORY_TYPE_HOST), 1);
        double t0 = now_us();
        if (n > 0) wait_for(tag_recv(payload, n, PAYLOAD, memh, type));
        if (i >= warm) t[i - warm] = now_us() - t0;
        wait_for(tag_send(ep, control[1], 64, RESPONSE, NULL, UCS_MEMORY_TYPE_HOST));
      } else {
        double t0 = now_us();
        // gdrpc synchronizes the producing device before it sends a CUDA tensor; a call without
        // a payload has none to synchronize.
        if (cuda && n > 0) CHECK("cuCtxSynchronize", cuCtxSynchronize_() == 0);
        void* response = tag_recv(control[1], 64, RESPONSE, NULL, UCS_MEMORY_TYPE_HOST);
        wait_for(tag_send(ep, control[0], 64, REQUEST, NULL, UCS_MEMORY_TYPE_HOST));
        if (n > 0) wait_for(tag_send(ep, payload, n, PAYLOAD, memh, type));
        wait_for(response);
        if (i >= warm) t[i - warm] = now_us() - t0;
      }
    }
    // The last slot carries this side's CPU time per measured round (user + system).
    t[runs] = (cpu_us() - cpu0) / runs;
    if (server) {
      full_write(fd, t, sizeof(double) * (runs + 1));
    } else {
      double* r = malloc(sizeof(double) * (runs + 1));
      full_read(fd, r, sizeof(double) * (runs + 1));
      double client_cpu = t[runs], server_cpu = r[runs];
      double c50 = pct(t, runs, 50), c99 = pct(t, runs, 99);
      printf("%s %10zu bytes: call p50 %8.2f us p99 %8.2f", argv[1], n, c50, c99);
      if (n > 0) printf(" | server receive step p50 %8.2f us p99 %8.2f", pct(r, runs, 50), pct(r, runs, 99));
      printf(" | cpu per round client %.2f us server %.2f us (%d rounds)\n", client_cpu, server_cpu, runs);
      fflush(stdout);
      free(r);
    }
    free(t);
  }
  // Both sides flush before either tears down, so neither sees its peer vanish mid-round.
  char done = 1;
  full_write(fd, &done, 1); full_read(fd, &done, 1);
  ucp_request_param_t close = {0};
  close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  close.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* closing = ucp_ep_close_nbx(ep, &close);
  if (closing != NULL && !UCS_PTR_IS_ERR(closing)) {
    while (ucp_request_check_status(closing) == UCS_INPROGRESS) ucp_worker_progress(worker);
    ucp_request_free(closing);
  }
  if (addr != NULL) ucp_worker_release_address(worker, addr);
  if (listener != NULL) ucp_listener_destroy(listener);
  ucp_mem_unmap(context, memh);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  if (!server) waitpid(child, NULL, 0);
  return 0;
}
