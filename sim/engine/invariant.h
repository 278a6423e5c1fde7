// Invariant checks that stay on in release builds. A failed invariant is a bug in Parallax,
// not in the user's input: it throws InternalError naming the component and the simulated
// time, which main reports and exits on. Library code never calls exit().
#pragma once

#include <stdexcept>
#include <string>

#include "units/units.h"

namespace parallax {

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void invariant_failed(const char* component, Time now, const char* condition,
                                   const std::string& detail);

}  // namespace parallax

/// PARALLAX_INVARIANT(cond, component, now, detail): throws InternalError if !cond.
#define PARALLAX_INVARIANT(cond, component, now, detail)                         \
  do {                                                                            \
    if (!(cond)) ::parallax::invariant_failed(component, now, #cond, detail);    \
  } while (false)
