/* Preloaded into a process that crashes natively where no debugger is installed: on SIGSEGV/SIGBUS/SIGABRT it
 * prints the native stack (library + offset per frame, for addr2line) to stderr, then lets the signal kill the
 * process as before. Build: cc -shared -fPIC -o segv_backtrace.so segv_backtrace.c */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void print_frames(int signal_number) {
  void* frames[64];
  const int count = backtrace(frames, 64);
  char line[512];
  int length = snprintf(line, sizeof line, "native backtrace (signal %d):\n", signal_number);
  write(STDERR_FILENO, line, (size_t)length);
  for (int i = 0; i < count; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) != 0 && info.dli_fname != NULL) {
      length = snprintf(line, sizeof line, "  frame %d: %s +0x%lx (%s)\n", i, info.dli_fname,
                        (unsigned long)((char*)frames[i] - (char*)info.dli_fbase),
                        info.dli_sname != NULL ? info.dli_sname : "?");
    } else {
      length = snprintf(line, sizeof line, "  frame %d: %p\n", i, frames[i]);
    }
    write(STDERR_FILENO, line, (size_t)length);
  }
}

static void on_fatal_signal(int signal_number) {
  print_frames(signal_number);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

__attribute__((constructor)) static void install_handlers(void) {
  signal(SIGSEGV, on_fatal_signal);
  signal(SIGBUS, on_fatal_signal);
}
