// ringattn — a Plan rendered for people (aligned text) and for scripts (one JSON
// object). Both come from the same Plan, so they never disagree.
#pragma once

#include <string>

#include "cost_model.hpp"

namespace ringattn::plan {

std::string format_plan_text(const Plan& p);
// One JSON object, keys in snake_case, SI units (bytes, seconds, FLOP, FLOP/s, B/s).
std::string format_plan_json(const Plan& p);

}  // namespace ringattn::plan
