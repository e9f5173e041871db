// Files on disk for libkabi's persistent state (the tuning cache) and device binaries (manifests, images): whole-file
// reads, complete writes, atomic replacement, and flock() locks. Every failure is an Error(KABI_STATUS_IO_ERROR)
// naming the path and the system's reason.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "error.hpp"

namespace kabi::core {

inline Error io_error(const std::string& what, const std::string& path, int error_number) {
  return Error(KABI_STATUS_IO_ERROR, "cannot " + what + " " + path + ": " + std::strerror(error_number));
}

// The rest of the open file fd, which it closes.
inline std::string read_and_close(int fd, const std::string& path) {
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t count = ::read(fd, buffer, sizeof(buffer));
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) {
      const int error_number = errno;
      ::close(fd);
      throw io_error("read", path, error_number);
    }
    if (count == 0) break;
    text.append(buffer, static_cast<size_t>(count));
  }
  ::close(fd);
  return text;
}

// The whole file, or "" when it does not exist.
inline std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    throw io_error("open", path, errno);
  }
  return read_and_close(fd, path);
}

// The whole regular file at path; an Error naming path when it is absent or not a regular file. One open and fstat,
// not a stat before the open: a process's first CUDA dispatch reads hundreds of manifests. O_NONBLOCK keeps the open
// of a FIFO from waiting for a writer before fstat refuses it; it changes nothing for a regular file.
inline std::string read_regular_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno != ENOENT && errno != ENOTDIR) throw io_error("open", path, errno);
  struct stat status {};
  if (fd < 0 || ::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    if (fd >= 0) ::close(fd);
    throw Error(KABI_STATUS_IO_ERROR, path + " is not a file");
  }
  return read_and_close(fd, path);
}

inline void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t count = ::write(fd, data.data(), data.size());
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) throw io_error("write", path, errno);
    data.remove_prefix(static_cast<size_t>(count));
  }
}

// Writes data to a temporary sibling of path, syncs it and renames it over path. Errors name path, the file the
// caller asked for: the temporary is an implementation detail.
inline void write_file_atomically(const std::string& path, std::string_view data) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_error("write", path, errno);
  try {
    write_all(fd, data, path);
    if (::fsync(fd) != 0) throw io_error("sync", path, errno);
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error_number = errno;
    ::unlink(temporary.c_str());
    throw io_error("replace", path, error_number);
  }
}

// flock() on the cache's lock file for the lifetime of the object. Without permission to create the lock file (a
// read-only cache directory) a shared lock degrades to none: nobody can be writing there either.
class FileLock {
 public:
  FileLock(const std::string& path, int operation) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      if (operation == LOCK_SH && (errno == EACCES || errno == EROFS || errno == ENOENT)) return;
      throw io_error("open lock file", path, errno);
    }
    while (::flock(fd_, operation) != 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      ::close(fd_);
      throw io_error("lock", path, error_number);
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace kabi::core
