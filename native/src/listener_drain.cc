#include "listener_drain.h"
#include <netdb.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#ifdef __linux__
#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#endif

namespace gdrpc {

std::pair<std::string, unsigned> DescribeAddress(const sockaddr_storage& address) {
  char host[NI_MAXHOST] = "";
  char service[NI_MAXSERV] = "";
  getnameinfo(reinterpret_cast<const sockaddr*>(&address), sizeof(address), host, sizeof(host), service,
              sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV);
  return {host, static_cast<unsigned>(std::strtoul(service, nullptr, 10))};
}

#ifdef __linux__
namespace {

/** A socket of this process on the port, as found by one scan of its descriptors. */
struct PortSocket {
  int fd;
  ino_t inode;
  bool listening;
};

unsigned PortOf(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return 0;
}

unsigned LocalPort(int fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 ? PortOf(local) : 0;
}

/** The sockets of this process whose local port is `port` (the listening one, and those accepted on it). */
std::vector<PortSocket> SocketsOn(unsigned port) {
  std::vector<PortSocket> found;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  const int own = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    struct stat st {};
    if (fd == own || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || LocalPort(fd) != port) continue;
    int listening = 0;
    socklen_t size = sizeof(listening);
    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size);
    found.push_back({fd, st.st_ino, listening != 0});
  }
  closedir(dir);
  return found;
}

/** A descriptor of our own for `socket`, if its number still names the socket the scan found
 *  (UCX's async thread may have closed it, and the number been reused, since): -1 otherwise. */
int Pin(const PortSocket& socket, unsigned port) {
  const int pinned = fcntl(socket.fd, F_DUPFD_CLOEXEC, 0);
  if (pinned < 0) return -1;
  struct stat st {};
  if (fstat(pinned, &st) == 0 && st.st_ino == socket.inode && LocalPort(pinned) == port) return pinned;
  close(pinned);
  return -1;
}

std::string PeerOf(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return "";
  auto [host, port] = DescribeAddress(peer);
  return host + ":" + std::to_string(port);
}

/** Connections waiting in a listening socket's accept queue. */
int AcceptQueue(int fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return 0;
  return info.tcpi_state == TCP_LISTEN ? static_cast<int>(info.tcpi_unacked) : 0;
}

}  // namespace

DrainResult DrainAccepted(unsigned port, const std::set<std::string>& keep, const std::function<void()>& progress, int budgetMs) {
  DrainResult result;
  int listening = -1;
  for (const PortSocket& socket : SocketsOn(port)) {
    if (socket.listening && listening < 0) listening = Pin(socket, port);
  }
  if (listening < 0) return result;
  result.found = true;
  // No new handshake completes (SYNs and their last ACKs are dropped); connections already
  // established are sockets of their own, which the filter does not touch.
  sock_filter dropAll[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
  sock_fprog program{1, dropAll};
  setsockopt(listening, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof(program));
  std::set<ino_t> shut;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(budgetMs);
  while (std::chrono::steady_clock::now() < until) {
    result.passes++;
    // A request whose bytes came before its socket was shut is delivered now, and rejected.
    progress();
    int fresh = 0;
    int open = 0;
    for (const PortSocket& socket : SocketsOn(port)) {
      if (socket.listening) continue;
      if (shut.count(socket.inode) > 0) {
        open++;  // shut, not yet closed by UCX
        continue;
      }
      const int pinned = Pin(socket, port);
      if (pinned < 0) continue;
      if (keep.count(PeerOf(pinned)) == 0) {
        shutdown(pinned, SHUT_RDWR);
        shut.insert(socket.inode);
        fresh++;
        open++;
      }
      close(pinned);
    }
    result.shut += fresh;
    if (open == 0 && AcceptQueue(listening) == 0) {
      result.settled = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  close(listening);
  return result;
}
#else
DrainResult DrainAccepted(unsigned, const std::set<std::string>&, const std::function<void()>&, int) { return {}; }
#endif

}  // namespace gdrpc
