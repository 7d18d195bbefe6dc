#include "crc32c.h"

#include <array>

namespace meshplan::executor {

namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;  // RFC 3720, Appendix B.4

// table[b] = the CRC of byte b alone, shifted out bit by bit (LSB first).
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; bit++) {
      crc = (crc & 1u) != 0 ? (crc >> 1) ^ kCastagnoliReflected : crc >> 1;
    }
    table[b] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : bytes) {
    crc = kTable[(crc ^ static_cast<unsigned char>(c)) & 0xFFu] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace meshplan::executor
