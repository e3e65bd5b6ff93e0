// shared/'s refusals are iris::Error with a code from errno or the bad input, so libiris and
// irisd pass them on as they are.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <string>

#include "iris/shared/os_error.hpp"
#include "iris/shared/shm_segment.hpp"
#include "iris/shared/unix_socket.hpp"
#include "tests/support/code_of.hpp"

namespace iris {
namespace {

using testing::code_of;

TEST(SharedErrors, ErrnoMapsToWhatTheCallerCanDo) {
  EXPECT_EQ(code_of_errno(EACCES), ErrorCode::kPermissionDenied);
  EXPECT_EQ(code_of_errno(EMFILE), ErrorCode::kLimitExceeded);
  EXPECT_EQ(code_of_errno(ENOMEM), ErrorCode::kLimitExceeded);
  EXPECT_EQ(code_of_errno(ECONNREFUSED), ErrorCode::kUnavailable);
  EXPECT_EQ(code_of_errno(EIO), ErrorCode::kInternal);
  errno = ENOENT;
  const Error e = os_error("cannot connect to /x");
  EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  EXPECT_NE(e.message().find("cannot connect to /x: "), std::string::npos) << e.message();
}

TEST(SharedErrors, BadMemoryAndSocketsAreRefusedWithACode) {
  // Not a memfd sealed against shrinking: someone else's memory is refused as invalid.
  net::Fd plain(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_TRUE(plain);
  ASSERT_EQ(::ftruncate(plain.get(), 4096), 0);
  EXPECT_EQ(code_of([&] { shm::ShmSegment::map(std::move(plain)); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { shm::ShmSegment::create("empty", 0); }), ErrorCode::kInvalidArgument);
  // Nothing listens there; a path past sockaddr_un's limit is the caller's mistake.
  EXPECT_EQ(
      code_of([] { net::connect_unix("/tmp/iris-no-such-socket-" + std::to_string(::getpid())); }),
      ErrorCode::kUnavailable);
  EXPECT_EQ(code_of([] { net::connect_unix(std::string(200, 'x')); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace iris
