// Before a UCP listener is destroyed: the connections UCX accepted on its port whose request has
// not been delivered yet are ended at the socket. UCX 1.22's TCP connection manager gives each
// accepted connection an endpoint that points at the listener and that only the connection
// manager's close frees; when such a connection's request bytes arrive after
// ucp_listener_destroy, UCX's async thread calls into the freed listener (SIGSEGV,
// openucx/ucx#11087; docs/security.md "Open gaps"). A connection whose socket is shut down reaches
// UCX as an end of file instead, which frees its endpoint without reading the listener.
#pragma once
#include <sys/socket.h>
#include <functional>
#include <set>
#include <string>
#include <utility>

namespace gdrpc {

/** "address" and port of a socket address, numeric (as UCX reports a connection's client). */
std::pair<std::string, unsigned> DescribeAddress(const sockaddr_storage& address);

/** What DrainAccepted did (stats and tests). */
struct DrainResult {
  bool found = false;  // the listening socket was found (Linux, a TCP listener)
  int shut = 0;        // accepted sockets shut down
  int passes = 0;
  bool settled = false;  // nothing was left pending before the time ran out
};

/** Ends the connections accepted on TCP port `port` that are not among `keep` ("address:port" of
 *  the peers of live endpoints): a drop-all filter on the listening socket stops new handshakes,
 *  then each pass runs `progress` (which must reject what UCX delivered meanwhile), shuts down
 *  the accepted sockets not yet shut, and ends once none is left open, none waits in the accept
 *  queue and none was shut in that pass; or after `budgetMs`. Linux only; elsewhere it does
 *  nothing. */
DrainResult DrainAccepted(unsigned port, const std::set<std::string>& keep, const std::function<void()>& progress, int budgetMs);

}  // namespace gdrpc
