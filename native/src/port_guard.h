// Who may open a TCP connection to this process's UCX ports. Every UCX worker with the tcp
// transport listens on a port of each network device it uses, and UCX reads whatever a peer
// connecting there sends, before gdrpc sees a byte: UCX 1.22 handles a hand-written PUT request
// by writing to the address it names, and one wireup message carrying a worker address of an
// unknown version aborts the process (docs/security.md "UCX's own ports"). A port guard is a
// socket filter on those listening sockets (and on a Listener's) that drops every TCP segment
// whose source address is outside the allowed prefixes: a peer outside them cannot complete a
// handshake, so nothing it sends reaches UCX. Sockets accepted on a guarded port inherit the
// filter. Linux only.
#pragma once
#include <sys/types.h>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace gdrpc {

/** An address prefix a peer's source address must fall in: "10.0.0.0/8", "127.0.0.1", "::1". */
struct PeerPrefix {
  int family = 0;  // AF_INET or AF_INET6
  uint8_t bytes[16] = {};
  unsigned bits = 0;
};

/** Parses a numeric IPv4 or IPv6 address with an optional "/bits"; false for anything else. */
bool ParsePeerPrefix(const std::string& text, PeerPrefix& out);

/** Socket inodes of this process's listening TCP sockets (IPv4 and IPv6), from /proc/self/fd. */
std::set<ino_t> ListeningTcpSockets();

/** One listening socket: where it listens and whether a guard is on it. */
struct ListeningPort {
  std::string address;
  unsigned port = 0;
  bool guarded = false;
};

/** The listening sockets of this process whose inode is in `inodes`, each marked `guarded`. */
std::vector<ListeningPort> ListSockets(const std::set<ino_t>& inodes, bool guarded);

/** Attaches a filter admitting only `allowed` (empty: no one) to each listening socket of this
 *  process whose inode is in `inodes`, and returns them, `guarded` where the filter went on. */
std::vector<ListeningPort> GuardSockets(const std::set<ino_t>& inodes, const std::vector<PeerPrefix>& allowed);

/** The inode of this process's listening TCP socket bound to `address` (numeric, as
 *  DescribeAddress gives it) and `port`, or 0. */
ino_t ListeningSocketOn(const std::string& address, unsigned port);

/** Shuts down the connections accepted on `ports` before their guard was attached whose peer is
 *  outside `allowed` (a peer may connect between UCX's listen() and the guard); returns how many. */
int ShutUnallowed(const std::vector<ListeningPort>& ports, const std::vector<PeerPrefix>& allowed);

}  // namespace gdrpc
