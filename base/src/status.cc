#include "kvdepot/base/status.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace kvdepot {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kDeviceError: return "device_error";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kUnauthenticated: return "unauthenticated";
    case StatusCode::kPermissionDenied: return "permission_denied";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
Status NotFound(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
Status Corruption(std::string m) {
  return {StatusCode::kCorruption, std::move(m)};
}
Status OutOfRange(std::string m) {
  return {StatusCode::kOutOfRange, std::move(m)};
}
Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
Status IOError(std::string m) {
  return {StatusCode::kIOError, std::move(m)};
}
Status Unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
Status Unimplemented(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
Status Internal(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}
Status DeviceError(std::string m) {
  return {StatusCode::kDeviceError, std::move(m)};
}
Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}

Status StatusFromErrno(int err, std::string_view context) {
  StatusCode code = StatusCode::kIOError;
  switch (err) {
    case ENOENT: code = StatusCode::kNotFound; break;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EDQUOT: code = StatusCode::kResourceExhausted; break;
    case EINVAL: code = StatusCode::kInvalidArgument; break;
    case EEXIST: code = StatusCode::kAlreadyExists; break;
    case ECANCELED: code = StatusCode::kCancelled; break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH: code = StatusCode::kUnavailable; break;
    default: break;
  }
  char buf[256];
  // GNU strerror_r returns the message pointer (which may or may not be buf).
  const char* text = strerror_r(err, buf, sizeof(buf));
  std::string message(context);
  message += ": ";
  message += text;
  message += " (errno ";
  message += std::to_string(err);
  message += ")";
  return Status(code, std::move(message));
}

}  // namespace kvdepot
