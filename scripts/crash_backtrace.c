/* A crash's native stack, for the GPU check's Python runs (scripts/gpu_check.sh --python):
 * LD_PRELOAD this library and a SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT writes the native
 * frames as "<object>(+0x<offset>)[address]" lines (glibc's backtrace_symbols_fd) to stderr
 * and, when CRASH_BACKTRACE_PREFIX is set, to the file PREFIX.<pid> (one per process, where
 * several ranks share stderr); then the signal's default action runs. Python's faulthandler
 * (pytest turns it on) names the Python line only: it chains to this handler, so both print.
 * gpu_check.sh resolves the offsets with addr2line.
 *   gcc -shared -fPIC -O1 -o crash_backtrace.so scripts/crash_backtrace.c
 *   LD_PRELOAD=$PWD/crash_backtrace.so CRASH_BACKTRACE_PREFIX=out/crash python3 ...         */
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[4096]; /* PREFIX. ; the pid is appended in the handler */
static size_t path_length;

/* Appends the decimal @p value to @p out (async-signal-safe); returns the new length. */
static size_t append_number(char* out, size_t at, size_t room, long value) {
  char digits[24];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + value % 10);
    value /= 10;
  } while (value > 0 && n < sizeof(digits));
  while (n > 0 && at + 1 < room) out[at++] = digits[--n];
  out[at] = '\0';
  return at;
}

static void write_frames(int fd, int sig, void* const* frames, int n) {
  char head[64] = "crash_backtrace: native frames, signal ";
  size_t at = append_number(head, strlen(head), sizeof(head) - 1, sig);
  head[at++] = '\n';
  (void)!write(fd, head, at);
  backtrace_symbols_fd(frames, n, fd);
}

static void on_crash(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  write_frames(STDERR_FILENO, sig, frames, n);
  if (path_length > 0) {
    append_number(path, path_length, sizeof(path), (long)getpid());
    const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      write_frames(fd, sig, frames, n);
      close(fd);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  void* warm[1];
  (void)backtrace(warm, 1); /* loads libgcc_s now, not inside the handler */
  const char* prefix = getenv("CRASH_BACKTRACE_PREFIX");
  if (prefix != NULL && strlen(prefix) + 32 < sizeof(path)) {
    strcpy(path, prefix);
    strcat(path, ".");
    path_length = strlen(path);
  }
  const int signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (unsigned i = 0; i < sizeof(signals) / sizeof(signals[0]); ++i) {
    struct sigaction a;
    memset(&a, 0, sizeof(a));
    a.sa_handler = on_crash;
    a.sa_flags = SA_NODEFER | SA_RESETHAND;
    sigemptyset(&a.sa_mask);
    sigaction(signals[i], &a, NULL);
  }
}
