#pragma once
// CRC-32C (Castagnoli), the checksum of checkpoint shards: reflected polynomial 0x82F63B78
// (Castagnoli, Braeutigam and Herrmann 1993; RFC 3720, Sec. 12.1 and Appendix B.4, iSCSI),
// initial value and final xor 0xFFFFFFFF. Check value: crc32c("123456789") = 0xE3069283.

#include <cstdint>
#include <string_view>

namespace meshplan::executor {

/// CRC-32C of `bytes`, table-driven, one byte per step.
uint32_t crc32c(std::string_view bytes);

}  // namespace meshplan::executor
