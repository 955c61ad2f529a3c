#include "port_guard.h"

#include <arpa/inet.h>
#include <cstdlib>
#include <cstring>
#include "listener_drain.h"
#ifdef __linux__
#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace gdrpc {

bool ParsePeerPrefix(const std::string& text, PeerPrefix& out) {
  const size_t slash = text.find('/');
  const std::string address = text.substr(0, slash);
  PeerPrefix parsed;
  if (inet_pton(AF_INET, address.c_str(), parsed.bytes) == 1) {
    parsed.family = AF_INET;
    parsed.bits = 32;
  } else if (inet_pton(AF_INET6, address.c_str(), parsed.bytes) == 1) {
    parsed.family = AF_INET6;
    parsed.bits = 128;
  } else {
    return false;
  }
  if (slash != std::string::npos) {
    const std::string bits = text.substr(slash + 1);
    if (bits.empty() || bits.size() > 3 || bits.find_first_not_of("0123456789") != std::string::npos) return false;
    const unsigned value = static_cast<unsigned>(std::strtoul(bits.c_str(), nullptr, 10));
    if (value > parsed.bits) return false;
    parsed.bits = value;
  }
  out = parsed;
  return true;
}

#ifdef __linux__
namespace {

/** The 32-bit word `index` of a prefix's address and its mask, as a filter compares them (the
 *  load gives the word in host order). */
void Word(const PeerPrefix& prefix, unsigned index, uint32_t& value, uint32_t& mask) {
  const unsigned covered = prefix.bits > index * 32 ? prefix.bits - index * 32 : 0;
  mask = covered >= 32 ? 0xffffffffu : covered == 0 ? 0 : ~(0xffffffffu >> covered);
  uint32_t word = 0;
  std::memcpy(&word, prefix.bytes + index * 4, 4);
  value = ntohl(word) & mask;
}

/** The filter: the IP version from the network header, then each prefix of that family in turn;
 *  a match keeps the segment, none drops it. */
std::vector<sock_filter> Program(const std::vector<PeerPrefix>& allowed) {
  constexpr uint32_t kKeep = 0xffffffffu;
  std::vector<sock_filter> v4;
  std::vector<sock_filter> v6;
  for (const PeerPrefix& prefix : allowed) {
    if (prefix.family == AF_INET) {
      uint32_t value, mask;
      Word(prefix, 0, value, mask);
      v4.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_NET_OFF + 12)));  // IPv4 source
      v4.push_back(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, mask));
      v4.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1));
      v4.push_back(BPF_STMT(BPF_RET | BPF_K, kKeep));
    } else {
      const unsigned words = (prefix.bits + 31) / 32;
      for (unsigned i = 0; i < words; i++) {
        uint32_t value, mask;
        Word(prefix, i, value, mask);
        const unsigned left = words - 1 - i;  // words still to compare after this one
        v6.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_NET_OFF + 8 + 4 * static_cast<int>(i))));  // IPv6 source
        v6.push_back(BPF_STMT(BPF_ALU | BPF_AND | BPF_K, mask));
        // On a mismatch, skip this prefix's remaining compares and its keep.
        v6.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, static_cast<uint8_t>(3 * left + 1)));
      }
      v6.push_back(BPF_STMT(BPF_RET | BPF_K, kKeep));  // a /0 keeps every IPv6 segment
    }
  }
  std::vector<sock_filter> program;
  program.push_back(BPF_STMT(BPF_LD | BPF_B | BPF_ABS, static_cast<uint32_t>(SKF_NET_OFF)));
  program.push_back(BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 4));
  program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4, 1, 0));
  // Not IPv4: past the IPv4 part and its drop.
  program.push_back(BPF_STMT(BPF_JMP | BPF_JA | BPF_K, static_cast<uint32_t>(v4.size() + 1)));
  program.insert(program.end(), v4.begin(), v4.end());
  program.push_back(BPF_STMT(BPF_RET | BPF_K, 0));
  program.insert(program.end(), v6.begin(), v6.end());
  program.push_back(BPF_STMT(BPF_RET | BPF_K, 0));
  return program;
}

/** Whether `fd` is a listening TCP socket (IPv4 or IPv6). */
bool IsListeningTcp(int fd) {
  int value = 0;
  socklen_t size = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &size) != 0 || value == 0) return false;
  size = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &value, &size) != 0 || (value != AF_INET && value != AF_INET6)) return false;
  size = sizeof(value);
  return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &value, &size) == 0 && value == IPPROTO_TCP;
}

/** Calls `visit(fd, inode)` for each socket of this process. The descriptor is this scan's own
 *  duplicate (UCX's async thread may close the original meanwhile): it names the socket the
 *  scan found for as long as `visit` runs. */
template <typename Visit>
void EachSocket(Visit visit) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == own) continue;
    const int pinned = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (pinned < 0) continue;
    struct stat st {};
    if (fstat(pinned, &st) == 0 && S_ISSOCK(st.st_mode)) visit(pinned, st.st_ino);
    close(pinned);
  }
  closedir(dir);
}

/** EachSocket, for the listening TCP sockets only. */
template <typename Visit>
void EachListening(Visit visit) {
  EachSocket([&](int fd, ino_t inode) {
    if (IsListeningTcp(fd)) visit(fd, inode);
  });
}

}  // namespace

std::set<ino_t> ListeningTcpSockets() {
  std::set<ino_t> found;
  EachListening([&](int, ino_t inode) { found.insert(inode); });
  return found;
}

namespace {

/** The listening sockets among `inodes`, each once, with `guard(fd)` deciding its `guarded`. */
template <typename Guard>
std::vector<ListeningPort> Sockets(const std::set<ino_t>& inodes, Guard guard) {
  std::vector<ListeningPort> ports;
  std::set<ino_t> seen;
  EachListening([&](int fd, ino_t inode) {
    // Two descriptors of one socket (a dup) are one port.
    if (inodes.count(inode) == 0 || !seen.insert(inode).second) return;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return;
    ListeningPort port;
    std::tie(port.address, port.port) = DescribeAddress(local);
    port.guarded = guard(fd);
    ports.push_back(port);
  });
  return ports;
}

}  // namespace

std::vector<ListeningPort> ListSockets(const std::set<ino_t>& inodes, bool guarded) {
  return Sockets(inodes, [&](int) { return guarded; });
}

std::vector<ListeningPort> GuardSockets(const std::set<ino_t>& inodes, const std::vector<PeerPrefix>& allowed) {
  const std::vector<sock_filter> filter = Program(allowed);
  sock_fprog program{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
  return Sockets(inodes, [&](int fd) { return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof(program)) == 0; });
}

namespace {

bool InPrefix(const PeerPrefix& prefix, int family, const uint8_t* bytes) {
  if (prefix.family != family) return false;
  const unsigned whole = prefix.bits / 8;
  if (std::memcmp(prefix.bytes, bytes, whole) != 0) return false;
  const unsigned rest = prefix.bits % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (prefix.bytes[whole] & mask) == (bytes[whole] & mask);
}

/** Whether a peer at `address` is allowed (an IPv4 peer of an IPv6 socket as IPv4, as the filter sees it). */
bool Allows(const std::vector<PeerPrefix>& allowed, const sockaddr_storage& address) {
  int family = address.ss_family;
  const uint8_t* bytes = nullptr;
  if (family == AF_INET) {
    bytes = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in&>(address).sin_addr);
  } else if (family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
    bytes = reinterpret_cast<const uint8_t*>(&v6);
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      family = AF_INET;
      bytes += 12;
    }
  } else {
    return false;
  }
  for (const PeerPrefix& prefix : allowed) {
    if (InPrefix(prefix, family, bytes)) return true;
  }
  return false;
}

}  // namespace

int ShutUnallowed(const std::vector<ListeningPort>& ports, const std::vector<PeerPrefix>& allowed) {
  std::set<unsigned> local;
  for (const ListeningPort& port : ports) local.insert(port.port);
  int shut = 0;
  EachSocket([&](int fd, ino_t) {
    sockaddr_storage self{}, peer{};
    socklen_t selfLength = sizeof(self), peerLength = sizeof(peer);
    if (!IsListeningTcp(fd) && getsockname(fd, reinterpret_cast<sockaddr*>(&self), &selfLength) == 0 &&
        (self.ss_family == AF_INET || self.ss_family == AF_INET6) && local.count(DescribeAddress(self).second) > 0 &&
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerLength) == 0 && !Allows(allowed, peer)) {
      shutdown(fd, SHUT_RDWR);
      shut++;
    }
  });
  return shut;
}

ino_t ListeningSocketOn(const std::string& address, unsigned port) {
  ino_t found = 0;
  EachListening([&](int fd, ino_t inode) {
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (found == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        DescribeAddress(local) == std::make_pair(address, port)) {
      found = inode;
    }
  });
  return found;
}
#else
std::set<ino_t> ListeningTcpSockets() { return {}; }
std::vector<ListeningPort> ListSockets(const std::set<ino_t>&, bool) { return {}; }
std::vector<ListeningPort> GuardSockets(const std::set<ino_t>&, const std::vector<PeerPrefix>&) { return {}; }
ino_t ListeningSocketOn(const std::string&, unsigned) { return 0; }
int ShutUnallowed(const std::vector<ListeningPort>&, const std::vector<PeerPrefix>&) { return 0; }
#endif

}  // namespace gdrpc
