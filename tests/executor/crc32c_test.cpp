#include "crc32c.h"

#include <doctest/doctest.h>

#include <string>

namespace meshplan::executor {
namespace {

TEST_CASE("CRC-32C matches the published check values") {
  // The CRC catalogue's check value for CRC-32C (the CRC of the nine ASCII digits).
  CHECK(crc32c("123456789") == 0xE3069283u);
  // RFC 3720, Appendix B.4: 32 bytes of zeros -> aa 36 91 8a, read as a little-endian word.
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  // RFC 3720, Appendix B.4: 32 bytes of 0xff -> 43 ab a8 62.
  CHECK(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  CHECK(crc32c("") == 0u);
}

TEST_CASE("one flipped bit changes the CRC-32C") {
  std::string bytes(1000, 'x');
  const uint32_t before = crc32c(bytes);
  bytes[517] = static_cast<char>(bytes[517] ^ 0x10);
  CHECK(crc32c(bytes) != before);
}

}  // namespace
}  // namespace meshplan::executor
