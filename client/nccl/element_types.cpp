// The element types' sizes and names, and the host's reduction loop over the rules the GPU
// kernels share (kernels/).
#include "client/nccl/element_types.hpp"

#include "client/nccl/kernels/reduce_elements.hpp"

namespace iris::nccl {

namespace {

namespace k = kernels;
static_assert(static_cast<int>(ReduceKind::kSum) == k::kSum &&
              static_cast<int>(ReduceKind::kProd) == k::kProd &&
              static_cast<int>(ReduceKind::kMax) == k::kMax &&
              static_cast<int>(ReduceKind::kMin) == k::kMin &&
              static_cast<int>(ReduceKind::kAvg) == k::kAvg &&
              static_cast<int>(ReduceKind::kPreMulSum) == k::kPreMulSum);

// The host's loop: every element, in order, by the kernels' rules (kernels/reduce_elements.hpp).
template <typename Codec>
void reduce_blocks(const Reduction& r, const void* src, std::size_t blocks, std::size_t stride,
                   std::size_t count, void* dst) {
  typename Codec::C scalar{};
  if (r.kind == ReduceKind::kPreMulSum) scalar = k::load_scalar<Codec>(r.scalar_bits, r.scalar_at);
  k::reduce_range<Codec>(static_cast<const char*>(src), static_cast<unsigned>(blocks), stride,
                         count, static_cast<char*>(dst), static_cast<int>(r.kind), scalar, 0, 1);
}

struct TypeInfo {
  const char* name;
  std::size_t bytes;
  void (*reduce)(const Reduction&, const void*, std::size_t, std::size_t, std::size_t, void*);
};

template <typename Codec>
constexpr TypeInfo type_info(const char* name) {
  return {name, Codec::kBytes, reduce_blocks<Codec>};
}

// By ncclDataType_t value.
constexpr TypeInfo kTypes[kElementTypeCount] = {
    type_info<k::Int8>("int8"),
    type_info<k::Uint8>("uint8"),
    type_info<k::Int32>("int32"),
    type_info<k::Uint32>("uint32"),
    type_info<k::Int64>("int64"),
    type_info<k::Uint64>("uint64"),
    type_info<k::Float16>("float16"),
    type_info<k::Float32>("float32"),
    type_info<k::Float64>("float64"),
    type_info<k::Bfloat16>("bfloat16"),
    type_info<k::Float8e4m3>("float8e4m3"),
    type_info<k::Float8e5m2>("float8e5m2"),
};

const TypeInfo& info(ElementType type) { return kTypes[static_cast<int>(type)]; }

}  // namespace

std::optional<ElementType> element_type(int value) {
  if (value < 0 || value >= kElementTypeCount) return std::nullopt;
  return static_cast<ElementType>(value);
}

std::size_t element_bytes(ElementType type) { return info(type).bytes; }
const char* element_name(ElementType type) { return info(type).name; }

const char* reduce_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return "sum";
    case ReduceKind::kProd:
      return "prod";
    case ReduceKind::kMax:
      return "max";
    case ReduceKind::kMin:
      return "min";
    case ReduceKind::kAvg:
      return "avg";
    case ReduceKind::kPreMulSum:
      return "premulsum";
  }
  return "?";
}

void reduce_on_host(ElementType type, const Reduction& reduction, const void* src,
                    std::size_t blocks, std::size_t stride_bytes, std::size_t count, void* dst) {
  info(type).reduce(reduction, src, blocks, stride_bytes, count, dst);
}

namespace sf = small_float;
float half_to_float(uint16_t bits) { return sf::Half::decode(bits); }
uint16_t float_to_half(float value) { return static_cast<uint16_t>(sf::Half::encode(value)); }
float bfloat16_to_float(uint16_t bits) { return sf::Bfloat16::decode(bits); }
uint16_t float_to_bfloat16(float value) {
  return static_cast<uint16_t>(sf::Bfloat16::encode(value));
}
float e4m3_to_float(uint8_t bits) { return sf::E4m3::decode(bits); }
uint8_t float_to_e4m3(float value) { return static_cast<uint8_t>(sf::E4m3::encode(value)); }
float e5m2_to_float(uint8_t bits) { return sf::E5m2::decode(bits); }
uint8_t float_to_e5m2(float value) { return static_cast<uint8_t>(sf::E5m2::encode(value)); }

}  // namespace iris::nccl
