#include "engine/invariant.h"

#include "units/unit_parse.h"

namespace parallax {

void invariant_failed(const char* component, Time now, const char* condition,
                      const std::string& detail) {
  throw InternalError(std::string("internal error in ") + component + " at t=" + format_time(now) +
                      " (" + std::to_string(now.picoseconds()) + " ps): " + condition +
                      (detail.empty() ? "" : " — " + detail));
}

}  // namespace parallax
