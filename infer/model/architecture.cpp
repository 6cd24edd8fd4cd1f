// infer — the registry of architectures (architecture.hpp).
#include "architecture.hpp"

#include <ringattn/error.hpp>

#include <array>

namespace infer {

// The rows, one file each in architectures/.
extern const Architecture kLlama, kMistral, kQwen2, kQwen3, kGemma3, kPhi3;

namespace {

// The registry: an architecture's row is listed here once.
constexpr std::array<const Architecture*, 6> kAll{&kLlama, &kMistral, &kQwen2, &kQwen3, &kGemma3, &kPhi3};

std::string names(std::string_view Architecture::*form) {
  std::string out;
  for (const Architecture* a : kAll)
    if (!(a->*form).empty()) out += (out.empty() ? "" : ", ") + std::string(a->*form);
  return out;
}

}  // namespace

std::span<const Architecture* const> architectures() { return kAll; }

const Architecture* find_hf_architecture(std::string_view model_type) {
  for (const Architecture* a : kAll)
    if (!a->hf_type.empty() && a->hf_type == model_type) return a;
  return nullptr;
}

const Architecture* find_gguf_architecture(std::string_view arch) {
  for (const Architecture* a : kAll)
    if (!a->gguf_arch.empty() && a->gguf_arch == arch) return a;
  return nullptr;
}

const Architecture& architecture_named(std::string_view name) {
  for (const Architecture* a : kAll)
    if (a->name == name) return *a;
  throw ringattn::InvalidArgument("model: architecture \"" + std::string(name) + "\" is not one this runtime implements (" +
                                  names(&Architecture::name) + ")");
}

std::string hf_architecture_names() { return names(&Architecture::hf_type); }
std::string gguf_architecture_names() { return names(&Architecture::gguf_arch); }

}  // namespace infer
