#include "quant_options.h"

#include <sstream>
#include <vector>

#include "diffq/error.h"
#include "diffq/quantization.h"

namespace diffq::cli {

std::string cli_quantization_config(const std::string& quant, const std::string& quant_config_file,
                                    const std::string& components, DType dtype) {
  check(quant.empty() || quant_config_file.empty(), "cli", "give --quant or --quant-config, not both");
  if (!quant_config_file.empty()) {
    check(components.empty(), "cli", "--quantize goes with --quant; --quant-config names its own components");
    return quantization_config_from_file(quant_config_file);
  }
  if (quant.empty()) {
    check(components.empty(), "cli", "--quantize needs --quant");
    return "";
  }
  std::vector<std::string> comps;
  std::stringstream ss(components);
  for (std::string c; std::getline(ss, c, ',');)
    if (!c.empty()) comps.push_back(c);
  return quantization_config_from_shorthand(quant, dtype, comps);
}

}  // namespace diffq::cli
