// infer — Mistral: Llama's decoder; a sliding_window W in its config.json bounds the
// context (attention is exact up to W keys; a longer prompt is refused, never run causal).
// llama.cpp writes Mistral GGUF files as general.architecture "llama".
#include "../architecture.hpp"

namespace infer {

extern const Architecture kMistral{.name = "mistral", .hf_type = "mistral", .window = SlidingWindow::bounds_context};

}  // namespace infer
