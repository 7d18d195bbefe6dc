#pragma once
// Private: how the validity rules (validity.cpp, recompute_validity.cpp) word a rejection.

#include <string>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// A rejection with its code (the rule's name) and reason.
Validity reject(std::string code, std::string reason);
/// A rejection with code "framework": "<framework> cannot run this layout: <why> (<layout>)".
Validity refuse(Framework framework, const std::string& why, const Layout& layout);

}  // namespace meshplan::planner
