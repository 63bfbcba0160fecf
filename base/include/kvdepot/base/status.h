// kvdepot's one error vocabulary: Status and Result<T>.
//
// Every fallible function in kvdepot returns a Status (no value) or a Result<T> (a value or a
// Status). Exceptions never cross a kvdepot API boundary. errno values are converted to Status in
// exactly one place (StatusFromErrno, below); cudaError_t in exactly one place
// (kvdepot::cuda::StatusFromCuda in cuda/).
//
// Messages name what failed and where ("container: section 1 (payload) checksum mismatch"), so
// that a user reading one line on stderr knows what to fix.
//
// Thread-safety: Status and Result are values; distinct objects may be used from distinct threads.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvdepot {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument = 1,    // the caller's input is malformed or out of range
  kNotFound = 2,           // a key, file or section that was asked for does not exist
  kCorruption = 3,         // stored or received bytes fail a checksum or a structural check
  kOutOfRange = 4,         // an index or size beyond a limit (e.g. a protocol or format bound)
  kResourceExhausted = 5,  // a capacity or memory limit was hit
  kIOError = 6,            // the OS reported an error (see the message for errno)
  kUnavailable = 7,        // a peer, device or service is not reachable right now
  kUnimplemented = 8,      // a known feature this build or version does not provide
  kInternal = 9,           // an invariant of kvdepot itself was violated (a bug)
  kDeviceError = 10,       // the GPU or its driver reported an error
  kAlreadyExists = 11,     // the thing being created exists already
  kCancelled = 12,         // the operation was cancelled (shutdown, client gone)
  kUnauthenticated = 13,   // no valid credentials were presented (e.g. no or a wrong AUTH token)
  kPermissionDenied = 14,  // the credentials do not allow this (e.g. another tenant's namespace)
};

// Stable lower-case name of a code ("invalid_argument"), used in logs, JSON and the protocol.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: npy: IN.npy: shape has 4 dimensions, expected 5"; "ok" when OK.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>" (OK stays OK).
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status Corruption(std::string message);
Status OutOfRange(std::string message);
Status ResourceExhausted(std::string message);
Status IOError(std::string message);
Status Unavailable(std::string message);
Status Unimplemented(std::string message);
Status Internal(std::string message);
Status DeviceError(std::string message);
Status Unauthenticated(std::string message);
Status PermissionDenied(std::string message);

// The one place errno becomes a Status: "<context>: <strerror(err)> (errno N)". ENOENT maps to
// kNotFound, ENOSPC/ENOMEM/EMFILE to kResourceExhausted, EINVAL to kInvalidArgument, EEXIST to
// kAlreadyExists, ECANCELED to kCancelled, ECONNREFUSED/ECONNRESET/EPIPE/ETIMEDOUT to kUnavailable,
// everything else to kIOError.
Status StatusFromErrno(int err, std::string_view context);

// Result<T>: either a T or a non-OK Status. Constructing a Result from an OK Status is a bug and
// yields kInternal.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}        // NOLINT: implicit
  Result(Status status) : state_(std::in_place_index<1>, std::move(status)) {  // NOLINT: implicit
    if (std::get<1>(state_).ok()) {
      state_.template emplace<1>(StatusCode::kInternal, "Result constructed from an OK Status");
    }
  }

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // The error; OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<1>(state_); }

  // Precondition: ok().
  T& value() & {
    assert(ok());
    return std::get<0>(state_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(state_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(state_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace kvdepot

#define KVD_CONCAT_INNER_(a, b) a##b
#define KVD_CONCAT_(a, b) KVD_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not OK.
#define KVD_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::kvdepot::Status kvd_status_ = (expr);    \
    if (!kvd_status_.ok()) return kvd_status_; \
  } while (0)

// `KVD_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result's value, or returns its Status.
#define KVD_ASSIGN_OR_RETURN(lhs, expr) \
  KVD_ASSIGN_OR_RETURN_IMPL_(KVD_CONCAT_(kvd_result_, __LINE__), lhs, expr)
#define KVD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
