#include "kvdepot/base/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace kvdepot {
namespace {

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status().ToString(), "ok");
  const Status s = Corruption("container: bad magic");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.ToString(), "corruption: container: bad magic");
  EXPECT_EQ(s.WithContext("in.kvd").message(), "in.kvd: container: bad magic");
  EXPECT_TRUE(Status().WithContext("x").ok());
}

TEST(StatusTest, ErrnoConversion) {
  EXPECT_EQ(StatusFromErrno(ENOENT, "a.npy").code(), StatusCode::kNotFound);
  EXPECT_EQ(StatusFromErrno(ENOSPC, "a").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusFromErrno(EINVAL, "a").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromErrno(ECONNRESET, "a").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromErrno(EIO, "a").code(), StatusCode::kIOError);
  const std::string m = StatusFromErrno(ENOENT, "a.npy").message();
  EXPECT_EQ(m.rfind("a.npy: ", 0), 0u) << m;
  EXPECT_NE(m.find("(errno " + std::to_string(ENOENT) + ")"), std::string::npos) << m;
}

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgument("odd: " + std::to_string(v));
  return v / 2;
}

Result<int> Quarter(int v) {
  KVD_ASSIGN_OR_RETURN(int h, Half(v));
  KVD_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int v) {
  KVD_RETURN_IF_ERROR(Half(v).status());
  return Status::Ok();
}

TEST(StatusTest, ResultAndMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  const Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), StatusCode::kInvalidArgument);
  const Result<int> from_ok = Status::Ok();
  EXPECT_EQ(from_ok.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, CodeNamesAreStable) {
  EXPECT_EQ(StatusCodeName(StatusCode::kInvalidArgument), "invalid_argument");
  EXPECT_EQ(StatusCodeName(StatusCode::kCorruption), "corruption");
  EXPECT_EQ(StatusCodeName(StatusCode::kDeviceError), "device_error");
}

}  // namespace
}  // namespace kvdepot
