// close_on_exec.h says why.
#include "close_on_exec.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gdrpc {

namespace {
/** close_range's flag (linux/close_range.h), for headers that lack it. */
constexpr unsigned kCloseRangeCloexec = 1u << 2;

/** Whether `fd` is a socket or an anonymous inode (what UCX opens), by its /proc link. */
bool MadeByUcxKind(int fd) {
  char path[64];
  char target[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strncmp(target, "socket:", 7) == 0 || std::strncmp(target, "anon_inode:", 11) == 0;
}
}  // namespace

int CloseOnExec() {
  // One system call where the kernel has it (Linux 5.11): every descriptor above stderr, whatever
  // it is. A scan of /proc/self/fd cost each admitted connection milliseconds once a server held
  // thousands of descriptors (2.6 ms with 2,100 sockets, a helper session's review). In a Node
  // process a descriptor meant for a child is passed in its stdio, which clears the flag on the
  // child's copy; none is meant to be inherited unnamed.
#ifdef SYS_close_range  // kernel headers older than Linux 5.9 lack the number: the scan does it
  if (syscall(SYS_close_range, STDERR_FILENO + 1, ~0U, kCloseRangeCloexec) == 0) return -1;
#endif
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  const int own = dirfd(dir);
  int marked = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd <= STDERR_FILENO || fd == own) continue;
    // Another thread (UCX's async one) may close the descriptor, and the number be reused, in
    // between: the worst case marks a descriptor that is not UCX's, which in a Node process
    // changes nothing but that no program it starts inherits it.
    const int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC) != 0 || !MadeByUcxKind(fd)) continue;
    if (fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0) marked++;
  }
  closedir(dir);
  return marked;
}

}  // namespace gdrpc
